//! ModelSpec: the one normalized description of a model that every later stage reads, built
//! from config.json (Hugging Face and MLX folders) or from GGUF metadata.

mod gguf;
mod hf;
mod validate;

pub use validate::MIN_CONTEXT;

pub use crate::architecture::Architecture;
use crate::checkpoint::{Checkpoint, Format};
use crate::error::Result;
use crate::names::{self, Role, TensorId};
use serde::Serialize;

/// Which elements RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeStyle {
    /// Adjacent pairs (x[2i], x[2i+1]): GGUF `llama`-arch files, whose Q/K rows the converter permuted.
    Interleaved,
    /// Halves (x[i], x[i+d/2]): Hugging Face, MLX, and GGUF qwen/gpt-oss ("NEOX").
    Halves,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RopeScaling {
    None,
    Linear {
        factor: f32,
    },
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position: usize,
    },
    Yarn {
        factor: f32,
        original_max_position: usize,
        beta_fast: f32,
        beta_slow: f32,
        /// Round the correction range to integers (llama.cpp, mlx-lm) or not (transformers
        /// with `truncate: false`, as gpt-oss publishes).
        truncate: bool,
        /// Multiplier of cos/sin; None means 0.1·ln(factor) + 1.
        attention_factor: Option<f32>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RopeSpec {
    pub theta: f32,
    pub style: RopeStyle,
    /// Rotated dimensions per head (head_dim unless partial rotary).
    pub dim: usize,
    pub scaling: RopeScaling,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Activation {
    /// silu(gate) · up
    Silu,
    /// gpt-oss: gate, up clamped (gate ≤ limit, −limit ≤ up ≤ limit); (up + 1) · gate · σ(α·gate)
    GptOssClamped { alpha: f32, limit: f32 },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeSpec {
    pub n_experts: usize,
    pub experts_per_token: usize,
    /// Width of each expert's FFN.
    pub expert_ffn: usize,
    /// Qwen MoE shared expert width (with a sigmoid gate), if any.
    pub shared_expert_ffn: Option<usize>,
    /// Renormalize the chosen experts' softmax weights (mixtral, gpt-oss: softmax over the top-k).
    pub norm_topk_prob: bool,
    /// Router softmax over the chosen top-k logits only (gpt-oss) rather than over all experts.
    pub softmax_after_topk: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    pub architecture: Architecture,
    pub hidden_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    /// Dense FFN width (0 where every layer is MoE).
    pub ffn: usize,
    pub moe: Option<MoeSpec>,
    pub rope: RopeSpec,
    pub norm_eps: f32,
    /// Window of sliding-window layers, in tokens.
    pub sliding_window: Option<usize>,
    /// Per layer: true where that layer uses the sliding window.
    pub sliding_layers: Vec<bool>,
    /// One learned sink logit per head joins the attention softmax (gpt-oss).
    pub attention_sinks: bool,
    /// Biases on q, k, v.
    pub qkv_bias: bool,
    /// Bias on the attention output projection.
    pub o_bias: bool,
    /// Biases on the FFN / expert projections.
    pub mlp_bias: bool,
    /// Per-head RMSNorm of q and k before RoPE (qwen3).
    pub qk_norm: bool,
    pub tie_embeddings: bool,
    pub activation: Activation,
    /// Trained context length.
    pub context_length: usize,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
}

impl ModelSpec {
    /// Bytes of the KV cache for `ctx` tokens at `bytes_per_value` (2 for f16): sliding-window
    /// layers keep only their window.
    pub fn kv_cache_bytes(&self, ctx: usize, bytes_per_value: usize) -> u64 {
        let per_token = 2 * self.n_kv_heads * self.head_dim * bytes_per_value;
        (0..self.n_layers)
            .map(|l| {
                let windowed = self.sliding_layers.get(l).copied().unwrap_or(false);
                let len = match (windowed, self.sliding_window) {
                    (true, Some(w)) => ctx.min(w),
                    _ => ctx,
                };
                (len * per_token) as u64
            })
            .sum()
    }
}

/// Builds the spec of an opened checkpoint from its config.json or GGUF metadata.
impl Checkpoint {
    /// The normalized model description, from config.json or GGUF metadata.
    pub fn spec(&self) -> Result<ModelSpec> {
        from_checkpoint(self)
    }
}

/// Builds and checks the spec: every number is in range and agrees with the tensors present
/// before any caller sizes a buffer or a loop by it.
pub fn from_checkpoint(ckpt: &Checkpoint) -> Result<ModelSpec> {
    let layers = validate::layers_present(ckpt);
    match ckpt.format {
        Format::Gguf => {
            let path = ckpt.main_path();
            let (spec, names) =
                gguf::from_metadata(&ckpt.metadata, &|name| ckpt.contains(name), &layers, path)?;
            validate::numbers(&spec, path, &names)?;
            let embedding = names::gguf_name(spec.architecture, TensorId::global(Role::TokenEmbd));
            validate::embedding(&spec, ckpt, embedding, path, &names)?;
            Ok(spec)
        }
        Format::Safetensors | Format::Mlx => {
            let config = ckpt.config.as_ref().ok_or_else(|| {
                crate::error::FormatError::not_a_model(&ckpt.dir, "config.json is missing")
            })?;
            let path = ckpt.dir.join("config.json");
            let spec = hf::from_config(config, &layers, &path)?;
            validate::numbers(&spec, &path, &hf::ConfigKeys)?;
            let id = TensorId::global(Role::TokenEmbd);
            let embedding = match ckpt.format {
                Format::Mlx => names::mlx_name(spec.architecture, id),
                _ => names::hf_name(spec.architecture, id),
            };
            validate::embedding(&spec, ckpt, embedding, &path, &hf::ConfigKeys)?;
            Ok(spec)
        }
    }
}
