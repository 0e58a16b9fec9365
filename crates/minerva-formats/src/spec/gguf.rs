//! ModelSpec from GGUF metadata keys (`<arch>.*`, `tokenizer.ggml.*`), plus the few facts only
//! the tensor table tells (biases, q/k norms, tied embeddings).

use super::validate::{self, Field, KeyNames};
use super::{Activation, Architecture, ModelSpec, MoeSpec, RopeScaling, RopeSpec, RopeStyle};
use crate::error::{FormatError, Result};
use crate::metadata::Metadata;
use std::collections::BTreeSet;
use std::path::Path;

/// The GGUF key behind each checked quantity, under the file's architecture prefix.
#[derive(Debug)]
pub struct GgufKeys {
    arch: String,
}

impl KeyNames for GgufKeys {
    fn key(&self, field: Field) -> String {
        let suffix = match field {
            Field::Layers => "block_count",
            Field::Hidden => "embedding_length",
            Field::Heads => "attention.head_count",
            Field::KvHeads => "attention.head_count_kv",
            Field::HeadDim => "attention.key_length",
            Field::Vocab => "vocab_size",
            Field::Ffn => "feed_forward_length",
            Field::Experts => "expert_count",
            Field::ExpertsUsed => "expert_used_count",
            Field::ExpertFfn => "expert_feed_forward_length",
            Field::Context => "context_length",
            Field::NormEps => "attention.layer_norm_rms_epsilon",
            Field::RopeTheta => "rope.freq_base",
            Field::RopeDim => "rope.dimension_count",
            Field::RopeFactor => "rope.scaling.factor",
            Field::RopeOriginalContext => "rope.scaling.original_context_length",
            Field::SlidingWindow => "attention.sliding_window",
            // gpt-oss GGUFs carry no key for these: the engine's constants.
            Field::SwigluLimit => return "the SwiGLU limit".into(),
            Field::SwigluAlpha => return "the SwiGLU alpha".into(),
        };
        format!("{}.{suffix}", self.arch)
    }
}

/// Metadata of one architecture: `<arch>.<key>` lookups that name the key when it is wrong.
struct Keys<'a> {
    md: &'a Metadata,
    arch: &'a str,
    path: &'a Path,
}

impl Keys<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// An optional non-negative integer; present but of another type is an error.
    fn opt_usize(&self, k: &str) -> Result<Option<usize>> {
        let key = self.key(k);
        match self.md.get(&key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    FormatError::malformed(self.path, format!("key '{key}' is not a count: {v:?}"))
                }),
        }
    }

    fn usize(&self, k: &str) -> Result<usize> {
        self.opt_usize(k)?.ok_or_else(|| self.missing(k))
    }

    fn opt_f32(&self, k: &str) -> Result<Option<f32>> {
        let key = self.key(k);
        match self.md.get(&key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(|f| Some(f as f32)).ok_or_else(|| {
                FormatError::malformed(self.path, format!("key '{key}' is not a number: {v:?}"))
            }),
        }
    }

    fn missing(&self, k: &str) -> FormatError {
        FormatError::malformed(self.path, format!("key '{}' is missing", self.key(k)))
    }
}

/// Builds the spec from a GGUF's metadata; `has_tensor` answers whether a tensor name exists
/// and `layers` holds the block numbers the tensors use.
pub fn from_metadata(
    md: &Metadata,
    has_tensor: &dyn Fn(&str) -> bool,
    layers: &BTreeSet<usize>,
    path: &Path,
) -> Result<(ModelSpec, GgufKeys)> {
    let arch_name = md
        .get_str("general.architecture")
        .ok_or_else(|| FormatError::malformed(path, "key 'general.architecture' is missing"))?;
    let k = Keys {
        md,
        arch: arch_name,
        path,
    };
    let n_experts = k.opt_usize("expert_count")?.unwrap_or(0);
    let architecture = match arch_name {
        // llama.cpp writes Mistral and Mixtral models as `llama` too.
        "llama" if n_experts > 0 => Architecture::Mixtral,
        "llama" => Architecture::Llama,
        "qwen2" => Architecture::Qwen2,
        "qwen3" => Architecture::Qwen3,
        "qwen2moe" => Architecture::Qwen2Moe,
        "qwen3moe" => Architecture::Qwen3Moe,
        "gpt-oss" => Architecture::GptOss,
        "phi3" => Architecture::Phi3,
        other => {
            return Err(FormatError::unsupported(
                path,
                format!("architecture '{other}'"),
            ))
        }
    };
    let gpt_oss = architecture == Architecture::GptOss;

    let hidden_size = k.usize("embedding_length")?;
    let n_layers = k.usize("block_count")?;
    let names = GgufKeys {
        arch: arch_name.to_string(),
    };
    validate::layer_count(n_layers, layers, path, &names)?;
    let n_heads = k.usize("attention.head_count")?;
    let n_kv_heads = k.opt_usize("attention.head_count_kv")?.unwrap_or(n_heads);
    if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
        return Err(FormatError::malformed(
            path,
            format!("{n_heads} attention heads cannot share {n_kv_heads} key/value heads"),
        ));
    }
    let head_dim = match k.opt_usize("attention.key_length")? {
        Some(d) => d,
        None if hidden_size % n_heads == 0 => hidden_size / n_heads,
        None => return Err(k.missing("attention.key_length")),
    };
    let vocab_size = match k.opt_usize("vocab_size")? {
        Some(v) => v,
        None => md
            .get_array("tokenizer.ggml.tokens")
            .map(<[_]>::len)
            .ok_or_else(|| k.missing("vocab_size"))?,
    };

    let moe = if n_experts > 0 {
        let expert_ffn = match k.opt_usize("expert_feed_forward_length")? {
            Some(f) => f,
            None => k.usize("feed_forward_length")?,
        };
        let norm_default = !matches!(architecture, Architecture::Qwen2Moe);
        Some(MoeSpec {
            n_experts,
            experts_per_token: k.usize("expert_used_count")?,
            expert_ffn,
            shared_expert_ffn: k.opt_usize("expert_shared_feed_forward_length")?,
            norm_topk_prob: md
                .get_bool(&k.key("expert_weights_norm"))
                .unwrap_or(norm_default),
            softmax_after_topk: gpt_oss,
        })
    } else {
        None
    };
    let ffn = if moe.is_some() {
        0
    } else {
        k.usize("feed_forward_length")?
    };

    let rope = RopeSpec {
        theta: k.opt_f32("rope.freq_base")?.unwrap_or(10_000.0),
        // The converter permutes q/k rows of `llama` files for adjacent-pair rotation.
        style: if arch_name == "llama" {
            RopeStyle::Interleaved
        } else {
            RopeStyle::Halves
        },
        dim: k.opt_usize("rope.dimension_count")?.unwrap_or(head_dim),
        scaling: rope_scaling(&k, gpt_oss)?,
    };

    let sliding_window = k.opt_usize("attention.sliding_window")?.filter(|&w| w > 0);
    let sliding_layers = (0..n_layers)
        .map(|l| match sliding_window {
            // gpt-oss alternates, starting with a sliding layer; others slide everywhere.
            Some(_) if gpt_oss => l % 2 == 0,
            Some(_) => true,
            None => false,
        })
        .collect();

    let token = |key: &str| -> Result<Option<u32>> {
        match md.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    FormatError::malformed(path, format!("key '{key}' is not a token id: {v:?}"))
                }),
        }
    };
    let mut eos_token_ids: Vec<u32> = token("tokenizer.ggml.eos_token_id")?.into_iter().collect();
    if let Some(eot) = token("tokenizer.ggml.eot_token_id")? {
        if !eos_token_ids.contains(&eot) {
            eos_token_ids.push(eot);
        }
    }

    let has_any = |names: &[&str]| names.iter().any(|n| has_tensor(n));
    let spec = ModelSpec {
        architecture,
        hidden_size,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab_size,
        ffn,
        moe,
        rope,
        norm_eps: k
            .opt_f32("attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| k.missing("attention.layer_norm_rms_epsilon"))?,
        sliding_window,
        sliding_layers,
        attention_sinks: gpt_oss,
        qkv_bias: has_any(&["blk.0.attn_q.bias", "blk.0.attn_qkv.bias"]),
        o_bias: has_tensor("blk.0.attn_output.bias"),
        mlp_bias: has_any(&[
            "blk.0.ffn_up.bias",
            "blk.0.ffn_down.bias",
            "blk.0.ffn_up_exps.bias",
            "blk.0.ffn_down_exps.bias",
        ]),
        qk_norm: has_tensor("blk.0.attn_q_norm.weight"),
        tie_embeddings: !has_tensor("output.weight"),
        activation: if gpt_oss {
            Activation::GptOssClamped {
                alpha: 1.702,
                limit: 7.0,
            }
        } else {
            Activation::Silu
        },
        context_length: k.usize("context_length")?,
        bos_token_id: token("tokenizer.ggml.bos_token_id")?,
        eos_token_ids,
        pad_token_id: token("tokenizer.ggml.padding_token_id")?,
    };
    Ok((spec, names))
}

fn rope_scaling(k: &Keys, gpt_oss: bool) -> Result<RopeScaling> {
    let kind = k.md.get_str(&k.key("rope.scaling.type"));
    let factor = || -> Result<f32> {
        k.opt_f32("rope.scaling.factor")?
            .ok_or_else(|| k.missing("rope.scaling.factor"))
    };
    Ok(match kind {
        None | Some("none") => match k.opt_f32("rope.scale_linear")? {
            // The key older converters wrote for linear scaling.
            Some(f) if f != 1.0 => RopeScaling::Linear { factor: f },
            _ => RopeScaling::None,
        },
        Some("linear") => RopeScaling::Linear { factor: factor()? },
        Some("yarn") => RopeScaling::Yarn {
            factor: factor()?,
            original_max_position: k.usize("rope.scaling.original_context_length")?,
            beta_fast: k.opt_f32("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
            beta_slow: k.opt_f32("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
            // gpt-oss publishes `truncate: false`, which GGUF has no key for.
            truncate: !gpt_oss,
            attention_factor: k.opt_f32("rope.scaling.attn_factor")?,
        },
        Some(other) => {
            return Err(FormatError::unsupported(
                k.path,
                format!("RoPE scaling '{other}'"),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MetaValue;

    fn md(pairs: &[(&str, MetaValue)]) -> Metadata {
        Metadata(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn unknown_architecture_is_named() {
        let m = md(&[("general.architecture", MetaValue::String("xyz".into()))]);
        let e = from_metadata(&m, &|_| true, &BTreeSet::new(), Path::new("m.gguf"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m.gguf") && e.contains("architecture 'xyz'"),
            "{e}"
        );
    }

    #[test]
    fn missing_key_is_named() {
        let m = md(&[
            ("general.architecture", MetaValue::String("qwen2".into())),
            ("qwen2.embedding_length", MetaValue::U32(64)),
        ]);
        let e = from_metadata(&m, &|_| true, &BTreeSet::new(), Path::new("m.gguf"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("qwen2.block_count"), "{e}");
    }
}
