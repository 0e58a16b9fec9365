//! Text: tokenizers from every format, chat templates, harmony, streaming detokenizer.

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
