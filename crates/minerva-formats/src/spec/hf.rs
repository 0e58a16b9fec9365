//! ModelSpec from a Hugging Face / MLX config.json.

use super::validate::{self, Field, KeyNames};
use super::{Activation, Architecture, ModelSpec, MoeSpec, RopeScaling, RopeSpec, RopeStyle};
use crate::error::{FormatError, Result};
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::path::Path;

/// The config.json key behind each checked quantity.
pub struct ConfigKeys;

impl KeyNames for ConfigKeys {
    fn key(&self, field: Field) -> String {
        match field {
            Field::Layers => "num_hidden_layers",
            Field::Hidden => "hidden_size",
            Field::Heads => "num_attention_heads",
            Field::KvHeads => "num_key_value_heads",
            Field::HeadDim => "head_dim",
            Field::Vocab => "vocab_size",
            Field::Ffn => "intermediate_size",
            Field::Experts => "num_local_experts (or num_experts)",
            Field::ExpertsUsed => "num_experts_per_tok",
            Field::ExpertFfn => "the expert intermediate size",
            Field::Context => "max_position_embeddings",
            Field::NormEps => "rms_norm_eps",
            Field::RopeTheta => "rope_theta",
            Field::RopeDim => "partial_rotary_factor",
            Field::RopeFactor => "rope_scaling",
            Field::RopeOriginalContext => "rope_scaling.original_max_position_embeddings",
            Field::SlidingWindow => "sliding_window",
            Field::SwigluLimit => "swiglu_limit",
            Field::SwigluAlpha => "swiglu_alpha",
        }
        .to_string()
    }
}

/// Typed access to config.json keys, with errors naming the file and key.
struct Keys<'a> {
    map: &'a Map<String, Value>,
    path: &'a Path,
    /// Prefix for messages about nested objects (`rope_parameters.`).
    scope: &'static str,
}

impl<'a> Keys<'a> {
    fn present(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn bad(&self, key: &str, what: &str) -> FormatError {
        FormatError::malformed(self.path, format!("{}{key}: {what}", self.scope))
    }

    fn usize_opt(&self, key: &str) -> Result<Option<usize>> {
        match self.present(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.bad(key, &format!("expected a whole number, found {v}"))),
        }
    }

    fn usize(&self, key: &str) -> Result<usize> {
        self.usize_opt(key)?.ok_or_else(|| self.bad(key, "missing"))
    }

    fn f32_opt(&self, key: &str) -> Result<Option<f32>> {
        match self.present(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|f| Some(f as f32))
                .ok_or_else(|| self.bad(key, &format!("expected a number, found {v}"))),
        }
    }

    fn bool_opt(&self, key: &str) -> Result<Option<bool>> {
        match self.present(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.bad(key, &format!("expected true or false, found {v}"))),
        }
    }

    fn str_opt(&self, key: &str) -> Result<Option<&'a str>> {
        match self.present(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.bad(key, &format!("expected a string, found {v}"))),
        }
    }

    /// A token id, or a list of them (eos may be either).
    fn ids(&self, key: &str) -> Result<Vec<u32>> {
        let one = |v: &Value| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| self.bad(key, &format!("expected a token id, found {v}")))
        };
        match self.present(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items.iter().map(one).collect(),
            Some(v) => Ok(vec![one(v)?]),
        }
    }
}

fn architecture(model_type: &str) -> Option<Architecture> {
    Some(match model_type {
        "llama" => Architecture::Llama,
        "mistral" => Architecture::Mistral,
        "qwen2" => Architecture::Qwen2,
        "qwen3" => Architecture::Qwen3,
        "mixtral" => Architecture::Mixtral,
        "qwen2_moe" => Architecture::Qwen2Moe,
        "qwen3_moe" => Architecture::Qwen3Moe,
        "gpt_oss" => Architecture::GptOss,
        "phi3" => Architecture::Phi3,
        _ => return None,
    })
}

/// Builds the spec from config.json; `layers` holds the block numbers the tensors use.
pub fn from_config(config: &Value, layers: &BTreeSet<usize>, path: &Path) -> Result<ModelSpec> {
    use Architecture::*;
    let map = config
        .as_object()
        .ok_or_else(|| FormatError::malformed(path, "config is not a JSON object"))?;
    let k = Keys {
        map,
        path,
        scope: "",
    };
    let model_type = k
        .str_opt("model_type")?
        .ok_or_else(|| k.bad("model_type", "missing"))?;
    let arch = architecture(model_type)
        .ok_or_else(|| FormatError::unsupported(path, format!("architecture '{model_type}'")))?;

    let hidden_size = k.usize("hidden_size")?;
    let n_layers = k.usize("num_hidden_layers")?;
    validate::layer_count(n_layers, layers, path, &ConfigKeys)?;
    let n_heads = k.usize("num_attention_heads")?;
    if n_heads == 0 || hidden_size == 0 {
        return Err(FormatError::malformed(
            path,
            "hidden_size and num_attention_heads must be positive",
        ));
    }
    let n_kv_heads = k.usize_opt("num_key_value_heads")?.unwrap_or(n_heads);
    if n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
        return Err(k.bad(
            "num_key_value_heads",
            &format!("{n_kv_heads} does not divide {n_heads} heads"),
        ));
    }
    let head_dim = match k.usize_opt("head_dim")? {
        Some(d) => d,
        None if hidden_size % n_heads == 0 => hidden_size / n_heads,
        None => {
            return Err(k.bad(
                "head_dim",
                "missing, and hidden_size is not a multiple of num_attention_heads",
            ))
        }
    };
    let vocab_size = k.usize("vocab_size")?;
    let intermediate = k.usize_opt("intermediate_size")?;

    let moe = match arch {
        Mixtral | GptOss => Some(MoeSpec {
            n_experts: k.usize("num_local_experts")?,
            experts_per_token: k.usize("num_experts_per_tok")?,
            expert_ffn: intermediate.ok_or_else(|| k.bad("intermediate_size", "missing"))?,
            shared_expert_ffn: None,
            // Mixtral renormalizes the chosen softmax weights; gpt-oss takes the softmax over
            // the chosen logits, which is the same renormalized distribution.
            norm_topk_prob: true,
            softmax_after_topk: arch == GptOss,
        }),
        Qwen2Moe | Qwen3Moe => Some(MoeSpec {
            n_experts: k.usize("num_experts")?,
            experts_per_token: k.usize("num_experts_per_tok")?,
            expert_ffn: k.usize("moe_intermediate_size")?,
            shared_expert_ffn: k
                .usize_opt("shared_expert_intermediate_size")?
                .filter(|&w| w > 0),
            norm_topk_prob: k.bool_opt("norm_topk_prob")?.unwrap_or(false),
            softmax_after_topk: false,
        }),
        _ => None,
    };
    if let Some(m) = &moe {
        if m.n_experts == 0 || m.experts_per_token == 0 || m.experts_per_token > m.n_experts {
            return Err(k.bad(
                "num_experts_per_tok",
                &format!("{} of {} experts", m.experts_per_token, m.n_experts),
            ));
        }
    }
    let ffn = match arch {
        Mixtral | GptOss => 0,
        Qwen2Moe | Qwen3Moe => {
            // Dense layers exist only where mlp_only_layers or decoder_sparse_step say so.
            let dense_layers = map
                .get("mlp_only_layers")
                .and_then(|v| v.as_array())
                .is_some_and(|a| !a.is_empty())
                || k.usize_opt("decoder_sparse_step")?.is_some_and(|s| s > 1);
            if dense_layers {
                intermediate.unwrap_or(0)
            } else {
                0
            }
        }
        _ => intermediate.ok_or_else(|| k.bad("intermediate_size", "missing"))?,
    };

    let context_length = k.usize("max_position_embeddings")?;
    let rope = rope(&k, arch, head_dim, context_length)?;
    let (sliding_window, sliding_layers) = sliding(&k, arch, n_layers)?;

    let attention_bias = k.bool_opt("attention_bias")?.unwrap_or(false);
    let (qkv_bias, o_bias) = match arch {
        Qwen2 | Qwen2Moe => (true, false),
        Llama | Qwen3 | Qwen3Moe | GptOss => (attention_bias, attention_bias),
        Mistral | Mixtral | Phi3 => (false, false),
    };
    let mlp_bias = match arch {
        GptOss => true,
        Llama => k.bool_opt("mlp_bias")?.unwrap_or(false),
        _ => false,
    };
    let activation = match arch {
        GptOss => Activation::GptOssClamped {
            alpha: k.f32_opt("swiglu_alpha")?.unwrap_or(1.702),
            limit: k.f32_opt("swiglu_limit")?.unwrap_or(7.0),
        },
        _ => match k.str_opt("hidden_act")? {
            None | Some("silu") | Some("swish") => Activation::Silu,
            Some(other) => {
                return Err(FormatError::unsupported(
                    path,
                    format!("hidden_act '{other}'"),
                ))
            }
        },
    };
    let one_id = |key: &str| -> Result<Option<u32>> { Ok(k.ids(key)?.first().copied()) };

    Ok(ModelSpec {
        architecture: arch,
        hidden_size,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab_size,
        ffn,
        moe,
        rope,
        norm_eps: k.f32_opt("rms_norm_eps")?.unwrap_or(1e-6),
        sliding_window,
        sliding_layers,
        attention_sinks: arch == GptOss,
        qkv_bias,
        o_bias,
        mlp_bias,
        qk_norm: matches!(arch, Qwen3 | Qwen3Moe),
        tie_embeddings: k.bool_opt("tie_word_embeddings")?.unwrap_or(false),
        activation,
        context_length,
        bos_token_id: one_id("bos_token_id")?,
        eos_token_ids: k.ids("eos_token_id")?,
        pad_token_id: one_id("pad_token_id")?,
    })
}

/// RoPE from `rope_parameters` (transformers 5) or top-level `rope_theta` + `rope_scaling`.
/// Hugging Face and MLX checkpoints both rotate halves.
fn rope(k: &Keys, arch: Architecture, head_dim: usize, context_length: usize) -> Result<RopeSpec> {
    let (params, scope) = match k.present("rope_parameters").and_then(|v| v.as_object()) {
        Some(p) => (Some(p), "rope_parameters."),
        None => (
            k.present("rope_scaling").and_then(|v| v.as_object()),
            "rope_scaling.",
        ),
    };
    let theta = match params
        .map(|p| Keys {
            map: p,
            path: k.path,
            scope,
        })
        .map(|p| p.f32_opt("rope_theta"))
        .transpose()?
        .flatten()
    {
        Some(t) => t,
        None => k.f32_opt("rope_theta")?.unwrap_or(10000.0),
    };
    let partial = k.f32_opt("partial_rotary_factor")?.unwrap_or(1.0);
    let dim = ((head_dim as f32) * partial).round() as usize;
    let scaling = match params {
        None => RopeScaling::None,
        Some(p) => {
            let p = Keys {
                map: p,
                path: k.path,
                scope,
            };
            let kind = match p.str_opt("rope_type")? {
                Some(t) => Some(t),
                None => p.str_opt("type")?,
            };
            let factor = || {
                p.f32_opt("factor")?
                    .ok_or_else(|| p.bad("factor", "missing"))
            };
            match kind.unwrap_or("default") {
                "default" => RopeScaling::None,
                "linear" => RopeScaling::Linear { factor: factor()? },
                "llama3" => RopeScaling::Llama3 {
                    factor: factor()?,
                    low_freq_factor: p.f32_opt("low_freq_factor")?.unwrap_or(1.0),
                    high_freq_factor: p.f32_opt("high_freq_factor")?.unwrap_or(4.0),
                    original_max_position: p.usize("original_max_position_embeddings")?,
                },
                "yarn" => {
                    let factor = factor()?;
                    let original_max_position =
                        match p.usize_opt("original_max_position_embeddings")? {
                            Some(n) => n,
                            None => (context_length as f32 / factor) as usize,
                        };
                    RopeScaling::Yarn {
                        factor,
                        original_max_position,
                        beta_fast: p.f32_opt("beta_fast")?.unwrap_or(32.0),
                        beta_slow: p.f32_opt("beta_slow")?.unwrap_or(1.0),
                        truncate: p
                            .bool_opt("truncate")?
                            .unwrap_or(arch != Architecture::GptOss),
                        attention_factor: p.f32_opt("attention_factor")?,
                    }
                }
                other => {
                    return Err(FormatError::unsupported(
                        k.path,
                        format!("RoPE type '{other}'"),
                    ))
                }
            }
        }
    };
    Ok(RopeSpec {
        theta,
        style: RopeStyle::Halves,
        dim,
        scaling,
    })
}

/// The sliding window and which layers use it.
fn sliding(k: &Keys, arch: Architecture, n_layers: usize) -> Result<(Option<usize>, Vec<bool>)> {
    use Architecture::*;
    let window = k.usize_opt("sliding_window")?;
    let layers: Vec<bool> = if let Some(types) = k.present("layer_types") {
        let types = types
            .as_array()
            .ok_or_else(|| k.bad("layer_types", "expected a list"))?;
        if types.len() != n_layers {
            return Err(k.bad(
                "layer_types",
                &format!("{} entries for {n_layers} layers", types.len()),
            ));
        }
        types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(FormatError::unsupported(k.path, format!("layer type {t}"))),
            })
            .collect::<Result<_>>()?
    } else {
        match arch {
            Mistral | Mixtral | Phi3 => vec![window.is_some(); n_layers],
            Qwen2 | Qwen3 | Qwen2Moe | Qwen3Moe => {
                let on = k.bool_opt("use_sliding_window")?.unwrap_or(false) && window.is_some();
                let first = k.usize_opt("max_window_layers")?.unwrap_or(n_layers);
                (0..n_layers).map(|l| on && l >= first).collect()
            }
            // transformers' default for gpt-oss: even layers slide, odd layers attend fully.
            GptOss => (0..n_layers)
                .map(|l| l % 2 == 0 && window.is_some())
                .collect(),
            Llama => vec![false; n_layers],
        }
    };
    if !layers.iter().any(|&s| s) {
        return Ok((None, layers));
    }
    match window {
        Some(w) if w > 0 => Ok((Some(w), layers)),
        _ => Err(k.bad("sliding_window", "missing or zero, but some layers slide")),
    }
}
