//! The model families the engine runs, named as Hugging Face's `model_type` names them.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Architecture {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Mixtral,
    Qwen2Moe,
    Qwen3Moe,
    GptOss,
    Phi3,
}

impl Architecture {
    /// The Hugging Face `model_type` spelling.
    pub fn name(&self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Mixtral => "mixtral",
            Architecture::Qwen2Moe => "qwen2_moe",
            Architecture::Qwen3Moe => "qwen3_moe",
            Architecture::GptOss => "gpt_oss",
            Architecture::Phi3 => "phi3",
        }
    }
}
