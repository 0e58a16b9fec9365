//! The OpenAI API's requests and responses as this server reads and writes them: chat
//! completions and completions (whole and as stream chunks), models, log-probabilities, usage,
//! and the sampler settings a request carries (OpenAI's, plus llama.cpp's `top_k`, `min_p`
//! and `repeat_penalty`). Fields other servers send that we do not use are ignored.

use minerva_engine::SamplerConfig;
use minerva_service::LogprobView;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A string or a list of strings (`stop`, a completion's `prompt`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// A message's content: a string, or parts of which the text ones are joined.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

/// What both endpoints share: the model, the sampler, the length and the stream.
#[derive(Debug, Clone, Deserialize)]
pub struct Common {
    pub model: String,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub seed: Option<u64>,
    pub max_tokens: Option<usize>,
    pub max_completion_tokens: Option<usize>,
    pub stop: Option<OneOrMany>,
    #[serde(default)]
    pub stream: bool,
    pub n: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    #[serde(flatten)]
    pub common: Common,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    #[serde(flatten)]
    pub common: Common,
    pub prompt: OneOrMany,
    /// The number of alternatives per token (the legacy API's integer).
    pub logprobs: Option<usize>,
}

impl Common {
    /// The sampler: OpenAI's default temperature is 1; a missing seed is drawn fresh.
    pub fn sampler(&self) -> SamplerConfig {
        let fresh = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        SamplerConfig {
            temperature: self.temperature.unwrap_or(1.0).max(0.0),
            top_k: self.top_k.unwrap_or(0),
            top_p: self.top_p.unwrap_or(1.0).clamp(0.0, 1.0),
            min_p: self.min_p.unwrap_or(0.0).clamp(0.0, 1.0),
            repetition_penalty: self.repeat_penalty.unwrap_or(1.0),
            seed: self.seed.unwrap_or(fresh),
            ..SamplerConfig::default()
        }
    }

    pub fn max_tokens(&self) -> Option<usize> {
        self.max_completion_tokens.or(self.max_tokens)
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        }
    }
}

/// One token's entry in a chat completion's `logprobs.content`.
pub fn chat_logprob(l: &LogprobView) -> Value {
    json!({
        "token": l.token,
        "logprob": l.logprob,
        "bytes": l.bytes,
        "top_logprobs": l.top.iter().map(|(t, lp, b)| json!({
            "token": t, "logprob": lp, "bytes": b,
        })).collect::<Vec<_>>(),
    })
}

/// A completion's `logprobs` object (the legacy API's parallel lists) for these tokens, whose
/// text starts at `offset` characters into the completion.
pub fn completion_logprobs(tokens: &[LogprobView], mut offset: usize) -> Value {
    let mut text_offset = Vec::with_capacity(tokens.len());
    for t in tokens {
        text_offset.push(offset);
        offset += t.token.chars().count();
    }
    json!({
        "tokens": tokens.iter().map(|t| &t.token).collect::<Vec<_>>(),
        "token_logprobs": tokens.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": tokens.iter().map(|t| {
            t.top.iter().map(|(tok, lp, _)| (tok.clone(), json!(lp))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": text_offset,
    })
}

/// Seconds since the epoch, for `created`.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
