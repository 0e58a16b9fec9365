//! The prompt builder a caller uses for chat: harmony for gpt-oss, the model's chat template
//! otherwise, the plain fallback when the model has none — and the matching output splitter.

use crate::error::Result;
use crate::harmony::{self, HarmonyEvent, HarmonyOptions, HarmonyParser, HarmonyStop};
use crate::reasoning::{OutputPiece, ReasoningSplitter};
use crate::template::{render_plain, ChatTemplate, Message};
use crate::tokenizer::Tokenizer;
use minerva_formats::{Checkpoint, Format};

/// Which way prompts are built (so a UI or CLI can say when the fallback is in use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    Harmony,
    Template,
    /// The model has no chat template: `template::render_plain`.
    Plain,
}

#[derive(Debug)]
pub enum PromptBuilder {
    Harmony(HarmonyOptions),
    Template(ChatTemplate),
    Plain,
}

/// Whether a checkpoint is a gpt-oss model (which speaks harmony).
pub fn is_gpt_oss(ckpt: &Checkpoint) -> bool {
    match ckpt.format {
        Format::Gguf => ckpt.metadata.get_str("general.architecture") == Some("gpt-oss"),
        Format::Safetensors | Format::Mlx => ckpt
            .config
            .as_ref()
            .and_then(|c| c.get("model_type"))
            .and_then(|t| t.as_str())
            .is_some_and(|t| t == "gpt_oss"),
    }
}

impl PromptBuilder {
    pub fn from_checkpoint(ckpt: &Checkpoint) -> Result<PromptBuilder> {
        if is_gpt_oss(ckpt) {
            return Ok(PromptBuilder::Harmony(HarmonyOptions::default()));
        }
        Ok(PromptBuilder::from_template(ChatTemplate::from_checkpoint(
            ckpt,
        )?))
    }

    pub fn from_template(template: Option<ChatTemplate>) -> PromptBuilder {
        template.map_or(PromptBuilder::Plain, PromptBuilder::Template)
    }

    pub fn kind(&self) -> PromptKind {
        match self {
            PromptBuilder::Harmony(_) => PromptKind::Harmony,
            PromptBuilder::Template(_) => PromptKind::Template,
            PromptBuilder::Plain => PromptKind::Plain,
        }
    }

    /// The prompt text (special tokens written as text; encode it with `add_special = false`
    /// when the template writes BOS itself).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        match self {
            PromptBuilder::Harmony(o) => Ok(harmony::render(messages, o, add_generation_prompt)),
            PromptBuilder::Template(t) => t.render(messages, add_generation_prompt),
            PromptBuilder::Plain => Ok(render_plain(messages, add_generation_prompt)),
        }
    }

    /// Ids of a rendered prompt. Templates and harmony write BOS and other special tokens
    /// themselves, so nothing is added; the plain fallback gets what the tokenizer adds (BOS).
    pub fn encode(&self, tokenizer: &Tokenizer, prompt: &str) -> Result<Vec<u32>> {
        tokenizer.encode(prompt, self.kind() == PromptKind::Plain)
    }

    /// A splitter for one reply's streamed text (special tokens kept in the text).
    pub fn output_splitter(&self) -> OutputSplitter {
        match self {
            PromptBuilder::Harmony(_) => OutputSplitter::Harmony(HarmonyParser::new()),
            _ => OutputSplitter::Think(ReasoningSplitter::new()),
        }
    }
}

/// Splits a reply into reasoning and answer as it streams, whatever the format.
#[derive(Debug, Clone)]
pub enum OutputSplitter {
    Harmony(HarmonyParser),
    Think(ReasoningSplitter),
}

impl OutputSplitter {
    pub fn push(&mut self, text: &str) -> Vec<OutputPiece> {
        match self {
            OutputSplitter::Harmony(p) => harmony_pieces(p.push(text)),
            OutputSplitter::Think(s) => s.push(text),
        }
    }

    pub fn finish(&mut self) -> Vec<OutputPiece> {
        match self {
            OutputSplitter::Harmony(p) => harmony_pieces(p.finish()),
            OutputSplitter::Think(s) => s.finish(),
        }
    }

    /// True once a harmony reply has ended with `<|return|>` or `<|call|>`.
    pub fn is_done(&self) -> bool {
        matches!(self, OutputSplitter::Harmony(p) if p.stop_reason().is_some())
    }

    pub fn harmony_stop(&self) -> Option<HarmonyStop> {
        match self {
            OutputSplitter::Harmony(p) => p.stop_reason(),
            OutputSplitter::Think(_) => None,
        }
    }
}

/// Harmony's `final` channel is the answer; every other channel is reasoning or tool talk.
fn harmony_pieces(events: Vec<HarmonyEvent>) -> Vec<OutputPiece> {
    events
        .into_iter()
        .filter_map(|e| match e {
            HarmonyEvent::Delta { channel, text } if channel == "final" => {
                Some(OutputPiece::Answer(text))
            }
            HarmonyEvent::Delta { text, .. } => Some(OutputPiece::Reasoning(text)),
            _ => None,
        })
        .collect()
}
