//! Text: tokenizers from every format, chat templates, harmony, streaming detokenizer.
//!
//! - [`Tokenizer::from_checkpoint`]: a folder's tokenizer.json, or a GGUF's embedded vocabulary
//!   (`gpt2` byte-level BPE with a pre-tokenizer chosen by `tokenizer.ggml.pre`, or `llama`
//!   SentencePiece BPE with scores and byte fallback); `encode`, `decode`, `bos_id`, `eos_ids`.
//! - [`PromptBuilder::from_checkpoint`]: harmony for gpt-oss, the model's [`ChatTemplate`]
//!   otherwise, [`render_plain`] when it has none ([`PromptKind::Plain`] says so).
//! - [`Detokenizer`]: ids to text as they arrive, with stop strings.
//! - [`OutputSplitter`] (from `PromptBuilder::output_splitter`): a reply's reasoning and answer
//!   as it streams — harmony channels ([`HarmonyParser`]) or `<think>` tags
//!   ([`ReasoningSplitter`]). It reads special tokens, so feed it text detokenized with
//!   `skip_special = false`.

pub mod detokenizer;
pub mod error;
pub mod gguf_vocab;
pub mod harmony;
pub mod hf_config;
pub mod markers;
pub mod pretokenizer;
pub mod prompt;
pub mod reasoning;
pub mod template;
pub mod tokenizer;

pub use detokenizer::Detokenizer;
pub use error::{Result, TextError};
pub use harmony::{HarmonyEvent, HarmonyOptions, HarmonyParser, HarmonyStop, ReasoningEffort};
pub use prompt::{OutputSplitter, PromptBuilder, PromptKind};
pub use reasoning::{OutputPiece, ReasoningSplitter};
pub use template::{render_plain, ChatTemplate, Message};
pub use tokenizer::{SpecialTokens, Tokenizer};
