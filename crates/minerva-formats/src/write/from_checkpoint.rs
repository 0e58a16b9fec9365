//! An opened checkpoint as a canonical `Model`: tensor names mapped to roles, llama.cpp's q/k
//! row permutation undone, experts stacked [n_expert, out, in] (Hugging Face mixtral's
//! per-expert tensors gathered; gpt-oss's fused, interleaved and possibly transposed gate_up
//! split), GGUF metadata turned back into config.json and tokenizer files.

use super::model::{gguf_qk_dest_row, Companions, Model, ModelTensor, SharedRows};
use super::safetensors::DEFAULT_SHARD_BYTES;
use super::tokenizer::{tokenizer_config_from_gguf, tokenizer_json_from_gguf};
use crate::checkpoint::{Checkpoint, Format};
use crate::dequant::{dequantize, dequantize_rows};
use crate::dtype::DType;
use crate::error::{FormatError, Result};
use crate::metadata::Metadata;
use crate::names::{self, Role, TensorId};
use crate::quantize::MLX_SCALE_DTYPE;
use crate::spec::Architecture;
use crate::tensor::{TensorData, TensorView};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

fn view_rows<'a>(v: TensorView<'a>) -> SharedRows<'a> {
    Arc::new(move |first, n, out| dequantize_rows(&v, first, n, out))
}

/// The view's buffers when they can be copied unchanged into a file of the same dtype.
fn stored<'a>(v: &TensorView<'a>) -> Option<(DType, Vec<&'a [u8]>)> {
    match v.data {
        TensorData::Plain(b) => Some((v.dtype, vec![b])),
        TensorData::MlxAffine {
            weight,
            scales,
            biases,
            scale_dtype,
        } if scale_dtype == MLX_SCALE_DTYPE => Some((v.dtype, vec![weight, scales, biases])),
        TensorData::MlxMxfp4 { weight, scales } => Some((v.dtype, vec![weight, scales])),
        _ => None,
    }
}

fn arch_of_model_type(t: &str) -> Option<Architecture> {
    Some(match t {
        "llama" => Architecture::Llama,
        "mistral" => Architecture::Mistral,
        "mixtral" => Architecture::Mixtral,
        "qwen2" => Architecture::Qwen2,
        "qwen3" => Architecture::Qwen3,
        "gpt_oss" => Architecture::GptOss,
        _ => return None,
    })
}

/// config.json for a GGUF file, from its metadata (the reverse of the writer's mapping).
fn config_from_gguf(
    md: &Metadata,
    vocab: usize,
    tied: bool,
    path: &std::path::Path,
) -> Result<(Architecture, Value)> {
    let a = md
        .get_str("general.architecture")
        .ok_or_else(|| FormatError::malformed(path, "general.architecture is missing"))?;
    let k = |key: &str| format!("{a}.{key}");
    let u = |key: &str| md.get_u64(&k(key)).map(|v| v as usize);
    let experts = u("expert_count").filter(|&e| e > 0);
    let arch = match (a, experts) {
        ("llama", Some(_)) => Architecture::Mixtral,
        ("llama", None) => Architecture::Llama,
        ("qwen3", _) => Architecture::Qwen3,
        ("gpt-oss", _) => Architecture::GptOss,
        _ => {
            return Err(FormatError::unsupported(
                path,
                format!("converting GGUF architecture '{a}'"),
            ))
        }
    };
    let hidden = u("embedding_length").ok_or_else(|| {
        FormatError::malformed(path, format!("{} is missing", k("embedding_length")))
    })?;
    let heads = u("attention.head_count")
        .filter(|&h| h > 0)
        .ok_or_else(|| {
            FormatError::malformed(path, format!("{} is missing", k("attention.head_count")))
        })?;
    let head_dim = u("attention.key_length")
        .or(u("rope.dimension_count"))
        .unwrap_or(hidden / heads);
    let layers = u("block_count").unwrap_or(0);
    let theta = md.get_f64(&k("rope.freq_base")).unwrap_or(10000.0);
    let model_type = arch.name();
    let class = match arch {
        Architecture::Mixtral => "MixtralForCausalLM",
        Architecture::Qwen3 => "Qwen3ForCausalLM",
        Architecture::GptOss => "GptOssForCausalLM",
        _ => "LlamaForCausalLM",
    };
    let mut c = json!({
        "architectures": [class], "model_type": model_type,
        "hidden_size": hidden, "num_hidden_layers": layers,
        "intermediate_size": u("expert_feed_forward_length").or(u("feed_forward_length")).unwrap_or(0),
        "num_attention_heads": heads, "num_key_value_heads": u("attention.head_count_kv").unwrap_or(heads),
        "head_dim": head_dim, "vocab_size": vocab,
        "max_position_embeddings": u("context_length").unwrap_or(2048),
        // GGUF holds the epsilon as f32: print it back at f32 precision (1e-5, not 9.99999974e-6).
        "rms_norm_eps": md.get_f64(&k("attention.layer_norm_rms_epsilon")).map(|e| (e as f32).to_string().parse::<f64>().unwrap_or(e)).unwrap_or(1e-5),
        "rope_theta": theta, "tie_word_embeddings": tied, "hidden_act": "silu",
    });
    for (key, gkey) in [
        ("bos_token_id", "tokenizer.ggml.bos_token_id"),
        ("eos_token_id", "tokenizer.ggml.eos_token_id"),
        ("pad_token_id", "tokenizer.ggml.padding_token_id"),
    ] {
        if let Some(v) = md.get_u64(gkey) {
            c[key] = json!(v);
        }
    }
    if let Some(e) = experts {
        c["num_local_experts"] = json!(e);
        c["num_experts_per_tok"] = json!(u("expert_used_count").unwrap_or(2));
    }
    if md.get_str(&k("rope.scaling.type")) == Some("yarn") {
        let f = |key: &str, d: f64| md.get_f64(&k(key)).unwrap_or(d);
        let s = json!({"rope_type": "yarn", "factor": f("rope.scaling.factor", 1.0),
            "original_max_position_embeddings": u("rope.scaling.original_context_length").unwrap_or(4096),
            "beta_fast": f("rope.scaling.yarn_beta_fast", 32.0), "beta_slow": f("rope.scaling.yarn_beta_slow", 1.0), "truncate": false});
        let mut p = s.clone();
        p["rope_theta"] = json!(theta);
        c["rope_scaling"] = s;
        c["rope_parameters"] = p;
    }
    if arch == Architecture::GptOss {
        let types: Vec<&str> = (0..layers)
            .map(|l| {
                if l % 2 == 0 {
                    "sliding_attention"
                } else {
                    "full_attention"
                }
            })
            .collect();
        c["layer_types"] = json!(types);
        c["sliding_window"] = json!(u("attention.sliding_window").unwrap_or(128));
        c["attention_bias"] = json!(true);
        c["swiglu_alpha"] = json!(1.702);
        c["swiglu_limit"] = json!(7.0);
    }
    Ok((arch, c))
}

/// llama.cpp stores llama3 RoPE scaling as per-frequency factors (`rope_freqs`); config.json
/// needs the parameters. The published llama3 parameters (low 1, high 4, original context 8192)
/// with the largest factor are accepted when they reproduce the stored factors.
fn llama3_scaling_of(factors: &[f32], config: &Value, path: &std::path::Path) -> Result<Value> {
    let theta = config["rope_theta"].as_f64().unwrap_or(10000.0);
    let dim = config["head_dim"].as_u64().unwrap_or(0) as usize;
    let factor = factors.iter().cloned().fold(1f32, f32::max) as f64;
    let s = json!({"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192});
    let again = super::model::llama3_rope_factors(&s, theta, dim);
    if again.len() == factors.len()
        && again
            .iter()
            .zip(factors)
            .all(|(a, b)| (a - b).abs() <= 1e-3 * b.abs().max(1.0))
    {
        Ok(s)
    } else {
        Err(FormatError::unsupported(
            path,
            "rope_freqs.weight holds RoPE factors that no llama3 scaling parameters reproduce",
        ))
    }
}

/// Splits a fused gpt-oss `gate_up_proj` (or its bias) into canonical gate (`pick` 0) or up (1).
/// Transformers' dense layout is [E, hidden, 2F] (transposed, gate in even columns); the
/// original MXFP4 checkpoints store [E, 2F, hidden] (gate in even rows).
fn gate_up_part<'a>(v: TensorView<'a>, pick: usize) -> (Vec<usize>, SharedRows<'a>) {
    let s = v.shape.clone();
    if s.len() == 2 {
        // Bias [E, 2F]: element 2f + pick.
        let (e, f2) = (s[0], s[1]);
        let rows: SharedRows<'a> = Arc::new(move |first, n, out| {
            let mut row = vec![0f32; f2];
            for r in 0..n {
                dequantize_rows(&v, first + r, 1, &mut row)?;
                for (i, o) in out[r * f2 / 2..(r + 1) * f2 / 2].iter_mut().enumerate() {
                    *o = row[2 * i + pick];
                }
            }
            Ok(())
        });
        return (vec![e, f2 / 2], rows);
    }
    let (e, a, b) = (s[0], s[1], s[2]);
    if v.dtype == DType::HfMxfp4 {
        // [E, 2F, hidden]: canonical row (x, f) is stored row x·2F + 2f + pick.
        let rows: SharedRows<'a> = Arc::new(move |first, n, out| {
            for r in 0..n {
                let (x, f) = ((first + r) / (a / 2), (first + r) % (a / 2));
                dequantize_rows(&v, x * a + 2 * f + pick, 1, &mut out[r * b..(r + 1) * b])?;
            }
            Ok(())
        });
        return (vec![e, a / 2, b], rows);
    }
    // [E, hidden, 2F]: canonical row (x, f) is column 2f + pick of expert x.
    let (hidden, f) = (a, b / 2);
    let rows: SharedRows<'a> = Arc::new(move |first, n, out| {
        let mut m = vec![0f32; hidden * b];
        let mut loaded = usize::MAX;
        for r in 0..n {
            let (x, o) = ((first + r) / f, (first + r) % f);
            if x != loaded {
                dequantize_rows(&v, x * hidden, hidden, &mut m)?;
                loaded = x;
            }
            for h in 0..hidden {
                out[r * hidden + h] = m[h * b + 2 * o + pick];
            }
        }
        Ok(())
    });
    (vec![e, f, hidden], rows)
}

/// gpt-oss dense `down_proj` [E, F, hidden] → canonical [E, hidden, F].
fn transposed_down<'a>(v: TensorView<'a>) -> (Vec<usize>, SharedRows<'a>) {
    let (e, f, hidden) = (v.shape[0], v.shape[1], v.shape[2]);
    let rows: SharedRows<'a> = Arc::new(move |first, n, out| {
        let mut m = vec![0f32; f * hidden];
        let mut loaded = usize::MAX;
        for r in 0..n {
            let (x, o) = ((first + r) / hidden, (first + r) % hidden);
            if x != loaded {
                dequantize_rows(&v, x * f, f, &mut m)?;
                loaded = x;
            }
            for i in 0..f {
                out[r * f + i] = m[i * hidden + o];
            }
        }
        Ok(())
    });
    (vec![e, hidden, f], rows)
}

/// Stacks per-expert [out, in] tensors into one [E, out, in].
fn stacked<'a>(experts: Vec<TensorView<'a>>) -> (Vec<usize>, SharedRows<'a>) {
    let (rows_each, row_len) = (experts[0].shape[0], experts[0].shape[1]);
    let shape = vec![experts.len(), rows_each, row_len];
    let rows: SharedRows<'a> = Arc::new(move |first, n, out| {
        for r in 0..n {
            let (x, o) = ((first + r) / rows_each, (first + r) % rows_each);
            dequantize_rows(&experts[x], o, 1, &mut out[r * row_len..(r + 1) * row_len])?;
        }
        Ok(())
    });
    (shape, rows)
}

fn read_json(ck: &Checkpoint, name: &str) -> Option<Value> {
    let p = ck.companion(name)?;
    serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()
}

/// The checkpoint as a canonical model.
pub fn model_from_checkpoint(ck: &Checkpoint) -> Result<Model<'_>> {
    let path = ck.main_path().to_path_buf();
    let mut tensors: Vec<ModelTensor> = Vec::new();
    let unsupported =
        |name: &str| FormatError::unsupported(&path, format!("tensor '{name}' has no known role"));
    let (arch, mut config, companions) = match ck.format {
        Format::Gguf => {
            let vocab = ck
                .tensor("token_embd.weight")
                .map(|t| t.shape[0])
                .ok_or_else(|| FormatError::malformed(&path, "token_embd.weight is missing"))?;
            let tied = !ck.contains("output.weight");
            let (arch, mut config) = config_from_gguf(&ck.metadata, vocab, tied, &path)?;
            if let Some(f) = ck.tensor("rope_freqs.weight") {
                config["rope_scaling"] = llama3_scaling_of(&dequantize(&f)?, &config, &path)?;
            }
            let c = &config;
            let hd = c["head_dim"].as_u64().unwrap_or(1) as usize;
            for v in ck.tensors() {
                if v.name == "rope_freqs.weight" {
                    continue;
                }
                let id = names::parse_gguf(arch, v.name).ok_or_else(|| unsupported(v.name))?;
                let shape = v.shape.clone();
                let permute =
                    names::gguf_permutes_qk(arch) && matches!(id.role, Role::AttnQ | Role::AttnK);
                if permute && hd.is_multiple_of(2) && shape.first().is_some_and(|&r| r % hd == 0) {
                    let row_len = *shape.last().unwrap_or(&1);
                    let vv = v.clone();
                    let rows: SharedRows = if id.bias {
                        Arc::new(move |_, _, out: &mut [f32]| {
                            let all = crate::dequant::dequantize(&vv)?;
                            for (i, o) in out.iter_mut().enumerate() {
                                *o = all[gguf_qk_dest_row(i, hd)];
                            }
                            Ok(())
                        })
                    } else {
                        Arc::new(move |first, n, out: &mut [f32]| {
                            for r in 0..n {
                                dequantize_rows(
                                    &vv,
                                    gguf_qk_dest_row(first + r, hd),
                                    1,
                                    &mut out[r * row_len..(r + 1) * row_len],
                                )?;
                            }
                            Ok(())
                        })
                    };
                    // The stored bytes stay usable for a GGUF target, which permutes the same way.
                    tensors.push(ModelTensor {
                        id,
                        shape,
                        rows,
                        stored: stored(&v),
                        gguf_order: true,
                        chunk_rows: 1,
                    });
                } else {
                    tensors.push(ModelTensor {
                        id,
                        shape,
                        stored: stored(&v),
                        gguf_order: false,
                        chunk_rows: 1,
                        rows: view_rows(v),
                    });
                }
            }
            let md = &ck.metadata;
            let mut generation = json!({});
            for (k, g) in [
                ("bos_token_id", "tokenizer.ggml.bos_token_id"),
                ("eos_token_id", "tokenizer.ggml.eos_token_id"),
            ] {
                if let Some(v) = md.get_u64(g) {
                    generation[k] = json!(v);
                }
            }
            let companions = Companions {
                tokenizer_json: tokenizer_json_from_gguf(md, &path)?,
                tokenizer_config: Some(tokenizer_config_from_gguf(md)),
                chat_template: md.get_str("tokenizer.chat_template").map(str::to_string),
                generation_config: Some(generation),
            };
            (arch, config, companions)
        }
        Format::Safetensors | Format::Mlx => {
            let config = ck
                .config
                .clone()
                .ok_or_else(|| FormatError::not_a_model(&ck.dir, "config.json is missing"))?;
            let mt = config["model_type"].as_str().unwrap_or("");
            let arch = arch_of_model_type(mt).ok_or_else(|| {
                FormatError::unsupported(
                    ck.dir.join("config.json"),
                    format!("converting model_type '{mt}'"),
                )
            })?;
            let mut mixtral_experts: BTreeMap<(usize, Role), Vec<(usize, TensorView)>> =
                BTreeMap::new();
            for v in ck.tensors() {
                let name = v.name;
                if let Some(id) = names::parse_mlx(arch, name) {
                    tensors.push(ModelTensor {
                        id,
                        shape: v.shape.clone(),
                        stored: stored(&v),
                        gguf_order: false,
                        chunk_rows: 1,
                        rows: view_rows(v),
                    });
                    continue;
                }
                let layer = name
                    .strip_prefix("model.layers.")
                    .and_then(|r| r.split('.').next())
                    .and_then(|l| l.parse::<usize>().ok());
                let Some(layer) = layer else {
                    return Err(unsupported(name));
                };
                let tail = name
                    .split_once(&format!("model.layers.{layer}."))
                    .map_or("", |x| x.1);
                if arch == Architecture::Mixtral {
                    let parts: Vec<&str> = tail.split('.').collect();
                    if let ["block_sparse_moe", "experts", x, w, "weight"] = parts[..] {
                        let role = match w {
                            "w1" => Role::ExpGate,
                            "w3" => Role::ExpUp,
                            "w2" => Role::ExpDown,
                            _ => return Err(unsupported(name)),
                        };
                        let x: usize = x.parse().map_err(|_| unsupported(name))?;
                        mixtral_experts
                            .entry((layer, role))
                            .or_default()
                            .push((x, v));
                        continue;
                    }
                }
                if arch == Architecture::GptOss {
                    let base = tail.trim_end_matches("_blocks").trim_end_matches(".weight");
                    match base {
                        "mlp.experts.gate_up_proj" | "mlp.experts.gate_up_proj_bias" => {
                            let bias = base.ends_with("_bias");
                            for (pick, role) in [(0, Role::ExpGate), (1, Role::ExpUp)] {
                                let (shape, rows) = gate_up_part(v.clone(), pick);
                                // The dense layout transposes whole experts to produce rows.
                                let transposes = !bias && v.dtype != DType::HfMxfp4;
                                let chunk_rows = if transposes { shape[1] } else { 1 };
                                tensors.push(ModelTensor {
                                    id: TensorId {
                                        role,
                                        layer: Some(layer),
                                        bias,
                                    },
                                    shape,
                                    rows,
                                    stored: None,
                                    gguf_order: false,
                                    chunk_rows,
                                });
                            }
                            continue;
                        }
                        "mlp.experts.down_proj" => {
                            let (shape, rows, chunk_rows) = if v.dtype == DType::HfMxfp4 {
                                (v.shape.clone(), view_rows(v.clone()), 1)
                            } else {
                                let (s, r) = transposed_down(v.clone());
                                let per_expert = s[1];
                                (s, r, per_expert)
                            };
                            tensors.push(ModelTensor {
                                id: TensorId::layer(Role::ExpDown, layer),
                                shape,
                                rows,
                                stored: None,
                                gguf_order: false,
                                chunk_rows,
                            });
                            continue;
                        }
                        "mlp.experts.down_proj_bias" => {
                            tensors.push(ModelTensor {
                                id: TensorId::bias(Role::ExpDown, layer),
                                shape: v.shape.clone(),
                                stored: stored(&v),
                                gguf_order: false,
                                chunk_rows: 1,
                                rows: view_rows(v),
                            });
                            continue;
                        }
                        _ => {}
                    }
                }
                return Err(unsupported(name));
            }
            for ((layer, role), mut experts) in mixtral_experts {
                experts.sort_by_key(|e| e.0);
                if experts.iter().enumerate().any(|(i, e)| {
                    e.0 != i || e.1.shape != experts[0].1.shape || e.1.shape.len() != 2
                }) {
                    return Err(FormatError::malformed(&path, format!("layer {layer}: experts of {role:?} are not numbered 0..n with equal shapes")));
                }
                let (shape, rows) = stacked(experts.into_iter().map(|e| e.1).collect());
                tensors.push(ModelTensor {
                    id: TensorId::layer(role, layer),
                    shape,
                    rows,
                    stored: None,
                    gguf_order: false,
                    chunk_rows: 1,
                });
            }
            let chat_template = ck
                .companion("chat_template.jinja")
                .and_then(|p| std::fs::read_to_string(p).ok());
            let companions = Companions {
                tokenizer_json: read_json(ck, "tokenizer.json"),
                tokenizer_config: read_json(ck, "tokenizer_config.json"),
                chat_template,
                generation_config: read_json(ck, "generation_config.json"),
            };
            (arch, config, companions)
        }
    };
    if let Value::Object(m) = &mut config {
        m.remove("quantization");
        m.remove("quantization_config");
    }
    tensors.sort_by_key(|t| {
        (
            t.id.layer
                .map_or(if t.id.role == Role::TokenEmbd { 0 } else { 2 }, |_| 1),
            t.id.layer,
            t.id.role,
            t.id.bias,
        )
    });
    let name = ck
        .metadata
        .get_str("general.name")
        .map(str::to_string)
        .or_else(|| {
            config
                .get("_name_or_path")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(str::to_string)
        })
        .or_else(|| ck.dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into());
    Ok(Model {
        name,
        arch,
        config,
        tensors,
        companions,
        shard_bytes: DEFAULT_SHARD_BYTES,
    })
}
