//! A conversation's settings: system prompt, sampling, length limits and where it runs.

use minerva_engine::SamplerConfig;
use serde::{Deserialize, Serialize};

/// Saved with the conversation; every field has a default so older rows stay readable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Empty: none.
    pub system_prompt: String,
    /// 0 is greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// 0: all tokens.
    pub top_k: usize,
    pub min_p: f32,
    pub repeat_penalty: f32,
    /// None: a new seed for every reply.
    pub seed: Option<u64>,
    pub max_tokens: usize,
    /// KV cache length; None: the model's trained length, at most 4096.
    pub ctx: Option<usize>,
    /// `auto`, `cpu`, `gpu`, or a GPU adapter's name (or part of it).
    pub backend: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            system_prompt: String::new(),
            temperature: 0.7,
            top_p: 0.95,
            top_k: 40,
            min_p: 0.05,
            repeat_penalty: 1.0,
            seed: None,
            max_tokens: 1024,
            ctx: None,
            backend: "auto".into(),
        }
    }
}

impl Settings {
    /// The sampler of one reply; `fresh_seed` is used when no seed is set.
    pub fn sampler(&self, fresh_seed: u64) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            seed: self.seed.unwrap_or(fresh_seed),
            ..SamplerConfig::default()
        }
    }
}
