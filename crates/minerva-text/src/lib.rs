//! Text: tokenizers from every format, chat templates, harmony, streaming detokenizer.
