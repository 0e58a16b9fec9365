//! A whole model in canonical form (roles, Hugging Face row order, stacked experts
//! [n_expert, out, in]) and its writing into each format's names, layouts and companion files.
//! Convert and synth both build a `Model`; this is the one place formats' conventions differ.

use super::safetensors::write_safetensors;
use super::tokenizer::{gguf_tokenizer_kv, SpecialIds};
use super::{AtomicOutput, OutTensor, Progress, RowFn, Source};
use crate::dtype::DType;
use crate::error::{FormatError, Result};
use crate::metadata::MetaValue;
use crate::names::{self, Role, TensorId};
use crate::quantize::{policy::fit_row, QuantPolicy};
use crate::spec::Architecture;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Canonical f32 rows of a tensor, shareable between the formats' views of it.
pub type SharedRows<'a> = Arc<dyn Fn(usize, usize, &mut [f32]) -> Result<()> + Send + Sync + 'a>;

pub struct ModelTensor<'a> {
    pub id: TensorId,
    /// Canonical shape: [out, in], [n_expert, out, in] or [n].
    pub shape: Vec<usize>,
    pub rows: SharedRows<'a>,
    /// The stored bytes when they can be copied as is into a target that keeps their dtype:
    /// in canonical row order, or in GGUF q/k row order when `gguf_order` is set.
    pub stored: Option<(DType, Vec<&'a [u8]>)>,
    pub gguf_order: bool,
    /// Reads are cheapest in chunks of this many rows (whole experts for sources that must
    /// transpose an expert to produce any of its rows).
    pub chunk_rows: usize,
}

impl<'a> ModelTensor<'a> {
    fn row_len(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// An output tensor reading this one's canonical rows.
    fn out(&self, name: String, dtype: DType, source: Source<'a>) -> OutTensor<'a> {
        let mut t = OutTensor::new(name, self.shape.clone(), dtype, source);
        t.align_rows = self.chunk_rows.max(1);
        t
    }
}

/// Files that travel beside the weights.
#[derive(Debug, Clone, Default)]
pub struct Companions {
    pub tokenizer_json: Option<Value>,
    pub tokenizer_config: Option<Value>,
    pub chat_template: Option<String>,
    pub generation_config: Option<Value>,
}

pub struct Model<'a> {
    /// `general.name` and file name stem.
    pub name: String,
    pub arch: Architecture,
    /// Hugging Face config.json (without any quantization block).
    pub config: Value,
    pub tensors: Vec<ModelTensor<'a>>,
    pub companions: Companions,
    /// Largest SafeTensors / MLX shard (5 GB unless changed).
    pub shard_bytes: u64,
}

/// MLX quantization of the matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlxQuant {
    Affine { bits: u8, group: u16 },
    Mxfp4,
}

impl MlxQuant {
    /// `--quant` for MLX: the bits (2 3 4 5 6 8) or `mxfp4`.
    pub fn parse(quant: &str, group: Option<u16>) -> Option<MlxQuant> {
        if quant.eq_ignore_ascii_case("mxfp4") {
            return (group.unwrap_or(32) == 32).then_some(MlxQuant::Mxfp4);
        }
        let bits: u8 = quant.trim_end_matches("bit").parse().ok()?;
        let group = group.unwrap_or(64);
        ([2, 3, 4, 5, 6, 8].contains(&bits) && [32, 64, 128].contains(&group))
            .then_some(MlxQuant::Affine { bits, group })
    }

    /// Folder-name suffix: `4bit`, `mxfp4`.
    pub fn label(&self) -> String {
        match self {
            MlxQuant::Affine { bits, group: 64 } => format!("{bits}bit"),
            MlxQuant::Affine { bits, group } => format!("{bits}bit-g{group}"),
            MlxQuant::Mxfp4 => "mxfp4".into(),
        }
    }
}

pub enum Target {
    Gguf(QuantPolicy),
    Safetensors(DType),
    Mlx(MlxQuant),
}

impl Target {
    /// The format's name.
    pub fn format(&self) -> &'static str {
        match self {
            Target::Gguf(_) => "gguf",
            Target::Safetensors(_) => "safetensors",
            Target::Mlx(_) => "mlx",
        }
    }
}

fn cfg_usize(c: &Value, key: &str) -> Option<usize> {
    c.get(key).and_then(Value::as_u64).map(|v| v as usize)
}

fn cfg_f64(c: &Value, key: &str) -> Option<f64> {
    c.get(key).and_then(Value::as_f64)
}

/// Head geometry from config.json.
struct Heads {
    n_head: usize,
    n_kv: usize,
    head_dim: usize,
}

fn heads(c: &Value, path: &Path) -> Result<Heads> {
    let need = |k: &str| {
        cfg_usize(c, k)
            .filter(|&v| v > 0)
            .ok_or_else(|| FormatError::malformed(path, format!("config.json: '{k}' is missing")))
    };
    let n_head = need("num_attention_heads")?;
    let hidden = need("hidden_size")?;
    Ok(Heads {
        n_head,
        n_kv: cfg_usize(c, "num_key_value_heads").unwrap_or(n_head),
        head_dim: cfg_usize(c, "head_dim").unwrap_or(hidden / n_head),
    })
}

/// The rope theta and scaling block, from either transformers 5's `rope_parameters` or the
/// older top-level keys.
fn rope(c: &Value) -> (f64, Option<Value>) {
    let p = c.get("rope_parameters").filter(|v| v.is_object());
    let theta = p
        .and_then(|p| cfg_f64(p, "rope_theta"))
        .or_else(|| cfg_f64(c, "rope_theta"))
        .unwrap_or(10000.0);
    let scaling = c
        .get("rope_scaling")
        .filter(|v| v.is_object())
        .cloned()
        .or_else(|| {
            p.filter(|p| {
                p.get("rope_type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t != "default")
            })
            .cloned()
        });
    (theta, scaling)
}

/// GGUF row `h·d + 2i + j` holds canonical row `h·d + j·d/2 + i` (llama.cpp's q/k permutation).
pub fn gguf_qk_source_row(row: usize, head_dim: usize) -> usize {
    let (h, r) = (row / head_dim, row % head_dim);
    h * head_dim + (r % 2) * head_dim / 2 + r / 2
}

/// Canonical row `h·d + j·d/2 + i` is GGUF row `h·d + 2i + j`.
pub fn gguf_qk_dest_row(row: usize, head_dim: usize) -> usize {
    let (h, r) = (row / head_dim, row % head_dim);
    let (j, i) = (r / (head_dim / 2), r % (head_dim / 2));
    h * head_dim + 2 * i + j
}

/// Rows gathered one by one through a row map (`out row → source row`).
fn remapped<'a>(
    src: SharedRows<'a>,
    row_len: usize,
    map: impl Fn(usize) -> usize + Send + Sync + 'a,
) -> RowFn<'a> {
    Box::new(move |first, n, out| {
        for r in 0..n {
            src(map(first + r), 1, &mut out[r * row_len..(r + 1) * row_len])?;
        }
        Ok(())
    })
}

/// A 1-D tensor with its elements permuted (`out element → source element`).
fn permuted_vector<'a>(
    src: SharedRows<'a>,
    len: usize,
    map: impl Fn(usize) -> usize + Send + Sync + 'a,
) -> RowFn<'a> {
    Box::new(move |_, _, out| {
        let mut all = vec![0f32; len];
        src(0, 1, &mut all)?;
        for (i, o) in out.iter_mut().enumerate() {
            *o = all[map(i)];
        }
        Ok(())
    })
}

pub(super) fn plain<'a>(src: &SharedRows<'a>) -> RowFn<'a> {
    let s = src.clone();
    Box::new(move |first, n, out| s(first, n, out))
}

fn rows_offset<'a>(src: &SharedRows<'a>, offset: usize) -> RowFn<'a> {
    let s = src.clone();
    Box::new(move |first, n, out| s(offset + first, n, out))
}

/// GGUF file_type of a policy's base dtype (what llama.cpp shows as the model's type).
fn gguf_file_type(policy: &QuantPolicy) -> u32 {
    use crate::quantize::QuantRecipe::*;
    if policy.overrides.iter().any(|o| o.1 == DType::MXFP4) {
        return 38;
    }
    match policy.recipe {
        Uniform(DType::F32) => 0,
        Uniform(DType::F16) => 1,
        Uniform(DType::Q4_0) => 2,
        Uniform(DType::Q4_1) => 3,
        Uniform(DType::Q8_0) => 7,
        Uniform(DType::Q5_0) => 8,
        Uniform(DType::Q5_1) => 9,
        KMixed(DType::Q4_K) => 15,
        KMixed(DType::Q5_K) => 17,
        Uniform(DType::Q6_K) => 18,
        Uniform(DType::BF16) => 32,
        Uniform(DType::MXFP4) => 38,
        _ => 1024,
    }
}

/// llama.cpp's per-dimension frequency factors for llama3 RoPE scaling (`rope_freqs.weight`).
pub(crate) fn llama3_rope_factors(scaling: &Value, theta: f64, dim: usize) -> Vec<f32> {
    let factor = cfg_f64(scaling, "factor").unwrap_or(8.0);
    let low = cfg_f64(scaling, "low_freq_factor").unwrap_or(1.0);
    let high = cfg_f64(scaling, "high_freq_factor").unwrap_or(4.0);
    let old = cfg_f64(scaling, "original_max_position_embeddings").unwrap_or(8192.0);
    let (low_wl, high_wl) = (old / low, old / high);
    (0..dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf((2 * i) as f64 / dim as f64);
            let wl = 2.0 * std::f64::consts::PI / freq;
            (if wl < high_wl {
                1.0
            } else if wl > low_wl {
                factor
            } else {
                let smooth = (old / wl - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }) as f32
        })
        .collect()
}

/// A target from a format name and `--quant` / `--group-size` (None: each format's default:
/// GGUF f16, SafeTensors bf16, MLX 4-bit).
pub fn parse_target(
    model: &Model,
    format: &str,
    quant: Option<&str>,
    group: Option<u16>,
) -> std::result::Result<Target, String> {
    let n_layers = cfg_usize(&model.config, "num_hidden_layers").unwrap_or(0);
    let moe = model.tensors.iter().any(|t| t.id.role == Role::ExpGate);
    match format.to_ascii_lowercase().as_str() {
        "gguf" => {
            let q = quant.unwrap_or("f16");
            crate::quantize::policy::gguf_policy(q, n_layers, model.tied(), moe)
                .map(Target::Gguf)
                .ok_or_else(|| {
                    format!(
                        "unknown GGUF quant '{q}' (one of: {})",
                        crate::quantize::policy::GGUF_QUANTS
                    )
                })
        }
        "safetensors" | "hf" => match quant.unwrap_or("bf16").to_ascii_lowercase().as_str() {
            "f32" => Ok(Target::Safetensors(DType::F32)),
            "f16" => Ok(Target::Safetensors(DType::F16)),
            "bf16" => Ok(Target::Safetensors(DType::BF16)),
            // OpenAI's layout: packed experts, the rest bf16.
            "mxfp4" if model.arch == Architecture::GptOss => {
                Ok(Target::Safetensors(DType::HfMxfp4))
            }
            "mxfp4" => {
                Err("SafeTensors mxfp4 is gpt-oss's layout; other models: f32 f16 bf16".into())
            }
            q => Err(format!(
                "unknown SafeTensors dtype '{q}' (one of: f32 f16 bf16, mxfp4 for gpt-oss)"
            )),
        },
        "mlx" => {
            let q = quant.unwrap_or("4");
            MlxQuant::parse(q, group).map(Target::Mlx).ok_or_else(|| {
                format!("unknown MLX quant '{q}' with group size {group:?} (bits 2 3 4 5 6 8 with group 32, 64 or 128; or mxfp4 with group 32)")
            })
        }
        f => Err(format!("unknown format '{f}' (gguf, safetensors or mlx)")),
    }
}

impl<'a> Model<'a> {
    fn vocab_size(&self) -> usize {
        cfg_usize(&self.config, "vocab_size").unwrap_or(0)
    }

    pub fn tied(&self) -> bool {
        !self.tensors.iter().any(|t| t.id.role == Role::Output)
    }

    fn special_ids(&self) -> SpecialIds {
        let first = |v: Option<&Value>| match v {
            Some(Value::Array(a)) => a.first().and_then(Value::as_u64),
            Some(v) => v.as_u64(),
            None => None,
        };
        let gen = self.companions.generation_config.as_ref();
        let pick = |k: &str| {
            first(self.config.get(k))
                .or_else(|| first(gen.and_then(|g| g.get(k))))
                .map(|v| v as u32)
        };
        let add_bos = self
            .companions
            .tokenizer_config
            .as_ref()
            .and_then(|t| t.get("add_bos_token"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        // The unknown token is named in tokenizer_config.json; its id is in tokenizer.json.
        let unk = self
            .companions
            .tokenizer_config
            .as_ref()
            .and_then(|t| t.get("unk_token"))
            .and_then(Value::as_str)
            .and_then(|u| {
                let tj = self.companions.tokenizer_json.as_ref()?;
                tj["model"]["vocab"]
                    .get(u)
                    .and_then(Value::as_u64)
                    .map(|v| v as u32)
            });
        SpecialIds {
            bos: pick("bos_token_id"),
            eos: pick("eos_token_id"),
            pad: pick("pad_token_id"),
            unk,
            add_bos,
        }
    }

    fn chat_template(&self) -> Option<String> {
        self.companions.chat_template.clone().or_else(|| {
            self.companions
                .tokenizer_config
                .as_ref()?
                .get("chat_template")?
                .as_str()
                .map(str::to_string)
        })
    }

    /// GGUF metadata: general.*, the architecture's hyperparameters, the tokenizer.
    fn gguf_metadata(&self, policy: &QuantPolicy, path: &Path) -> Result<Vec<(String, MetaValue)>> {
        let c = &self.config;
        let a = names::gguf_arch(self.arch);
        let h = heads(c, path)?;
        let (theta, scaling) = rope(c);
        let mut kv: Vec<(String, MetaValue)> = vec![
            ("general.architecture".into(), MetaValue::String(a.into())),
            ("general.type".into(), MetaValue::String("model".into())),
            ("general.name".into(), MetaValue::String(self.name.clone())),
            (
                "general.file_type".into(),
                MetaValue::U32(gguf_file_type(policy)),
            ),
            ("general.quantization_version".into(), MetaValue::U32(2)),
        ];
        let mut put = |k: &str, v: MetaValue| kv.push((format!("{a}.{k}"), v));
        let u = |k: &str| cfg_usize(c, k).unwrap_or(0) as u32;
        put("block_count", MetaValue::U32(u("num_hidden_layers")));
        put(
            "context_length",
            MetaValue::U32(u("max_position_embeddings")),
        );
        put("embedding_length", MetaValue::U32(u("hidden_size")));
        put(
            "feed_forward_length",
            MetaValue::U32(u("intermediate_size")),
        );
        put("attention.head_count", MetaValue::U32(h.n_head as u32));
        put("attention.head_count_kv", MetaValue::U32(h.n_kv as u32));
        put("rope.freq_base", MetaValue::F32(theta as f32));
        put(
            "attention.layer_norm_rms_epsilon",
            MetaValue::F32(cfg_f64(c, "rms_norm_eps").unwrap_or(1e-5) as f32),
        );
        if a == "llama" {
            put("vocab_size", MetaValue::U32(self.vocab_size() as u32));
            put("rope.dimension_count", MetaValue::U32(h.head_dim as u32));
        }
        put("attention.key_length", MetaValue::U32(h.head_dim as u32));
        put("attention.value_length", MetaValue::U32(h.head_dim as u32));
        if let Some(n) = cfg_usize(c, "num_local_experts").or_else(|| cfg_usize(c, "num_experts")) {
            put("expert_count", MetaValue::U32(n as u32));
            put(
                "expert_used_count",
                MetaValue::U32(u("num_experts_per_tok")),
            );
        }
        if self.arch == Architecture::GptOss {
            put(
                "expert_feed_forward_length",
                MetaValue::U32(u("intermediate_size")),
            );
            put(
                "attention.sliding_window",
                MetaValue::U32(u("sliding_window")),
            );
        }
        if let Some(s) = &scaling {
            if s.get("rope_type")
                .or_else(|| s.get("type"))
                .and_then(Value::as_str)
                == Some("yarn")
            {
                put("rope.scaling.type", MetaValue::String("yarn".into()));
                put(
                    "rope.scaling.factor",
                    MetaValue::F32(cfg_f64(s, "factor").unwrap_or(1.0) as f32),
                );
                put(
                    "rope.scaling.original_context_length",
                    MetaValue::U32(
                        cfg_usize(s, "original_max_position_embeddings").unwrap_or(0) as u32,
                    ),
                );
                put(
                    "rope.scaling.yarn_beta_fast",
                    MetaValue::F32(cfg_f64(s, "beta_fast").unwrap_or(32.0) as f32),
                );
                put(
                    "rope.scaling.yarn_beta_slow",
                    MetaValue::F32(cfg_f64(s, "beta_slow").unwrap_or(1.0) as f32),
                );
            }
        }
        if let Some(t) = &self.companions.tokenizer_json {
            kv.extend(gguf_tokenizer_kv(
                t,
                self.vocab_size(),
                &self.special_ids(),
                self.chat_template().as_deref(),
                path,
            )?);
        }
        Ok(kv)
    }

    /// The GGUF tensors: llama.cpp names, q/k rows permuted for its `llama` architecture, 1-D
    /// tensors F32, a `rope_freqs` tensor for llama3 RoPE scaling.
    fn gguf_tensors(&self, policy: &QuantPolicy, path: &Path) -> Result<Vec<OutTensor<'a>>> {
        let h = heads(&self.config, path)?;
        let permute = names::gguf_permutes_qk(self.arch);
        let mut out = Vec::new();
        let (theta, scaling) = rope(&self.config);
        if let Some(s) = scaling.filter(|s| {
            s.get("rope_type")
                .or_else(|| s.get("type"))
                .and_then(Value::as_str)
                == Some("llama3")
        }) {
            let f = llama3_rope_factors(&s, theta, h.head_dim);
            let n = f.len();
            out.push(OutTensor::new(
                "rope_freqs.weight",
                vec![n],
                DType::F32,
                Source::Rows(Box::new(move |_, _, o: &mut [f32]| {
                    o.copy_from_slice(&f);
                    Ok(())
                })),
            ));
        }
        for t in &self.tensors {
            let name = names::gguf_name(self.arch, t.id).ok_or_else(|| {
                FormatError::unsupported(path, format!("no GGUF name for {:?}", t.id))
            })?;
            let dtype = if t.shape.len() < 2 {
                DType::F32
            } else {
                fit_row(policy.choose(t.id), t.row_len())
            };
            let qk_heads = match t.id.role {
                Role::AttnQ if permute => Some(h.n_head),
                Role::AttnK if permute => Some(h.n_kv),
                _ => None,
            };
            let d = h.head_dim;
            let source = match (qk_heads, &t.stored) {
                (_, Some((sd, bufs))) if *sd == dtype && t.gguf_order == qk_heads.is_some() => {
                    Source::Stored(bufs.clone())
                }
                (Some(_), _) if t.id.bias => {
                    Source::Rows(permuted_vector(t.rows.clone(), t.shape[0], move |i| {
                        gguf_qk_source_row(i, d)
                    }))
                }
                (Some(_), _) => Source::Rows(remapped(t.rows.clone(), t.row_len(), move |r| {
                    gguf_qk_source_row(r, d)
                })),
                _ => Source::Rows(plain(&t.rows)),
            };
            out.push(t.out(name, dtype, source));
        }
        Ok(out)
    }

    /// Hugging Face tensors: per-expert mixtral weights, gpt-oss fused and transposed experts.
    /// `dtype` HfMxfp4 (gpt-oss as OpenAI ships it) packs the expert matrices; the rest is bf16.
    fn hf_tensors(&self, dtype: DType, path: &Path) -> Result<Vec<OutTensor<'a>>> {
        let mut out = Vec::new();
        let dense = if dtype == DType::HfMxfp4 {
            DType::BF16
        } else {
            dtype
        };
        let keep = |t: &ModelTensor<'a>| match &t.stored {
            Some((sd, bufs)) if *sd == dense && !t.gguf_order => Source::Stored(bufs.clone()),
            _ => Source::Rows(plain(&t.rows)),
        };
        let find = |role: Role, layer: Option<usize>, bias: bool| {
            self.tensors
                .iter()
                .find(|t| t.id == TensorId { role, layer, bias })
        };
        for t in &self.tensors {
            let is_expert = matches!(t.id.role, Role::ExpGate | Role::ExpUp | Role::ExpDown);
            if !is_expert {
                let name = names::hf_name(self.arch, t.id).ok_or_else(|| {
                    FormatError::unsupported(path, format!("no Hugging Face name for {:?}", t.id))
                })?;
                out.push(t.out(name, dense, keep(t)));
                continue;
            }
            let layer = t.id.layer.unwrap_or(0);
            if self.arch == Architecture::GptOss {
                let up = |bias| find(Role::ExpUp, t.id.layer, bias);
                out.extend(super::gpt_oss::hf_experts(t, up, dtype, layer, path)?);
            } else {
                let (e, rows) = (t.shape[0], t.shape[1]);
                for x in 0..e {
                    let name = names::hf_mixtral_expert(layer, t.id.role, x).ok_or_else(|| {
                        FormatError::unsupported(
                            path,
                            format!("no Hugging Face name for {:?}", t.id),
                        )
                    })?;
                    out.push(OutTensor::new(
                        name,
                        t.shape[1..].to_vec(),
                        dtype,
                        Source::Rows(rows_offset(&t.rows, x * rows)),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// MLX tensors and the config's quantization block.
    fn mlx_tensors(&self, q: MlxQuant, path: &Path) -> Result<(Vec<OutTensor<'a>>, Value)> {
        let (dtype, block) = match q {
            MlxQuant::Affine { bits, group } => (
                DType::MlxAffine { bits, group },
                json!({"group_size": group, "bits": bits, "mode": "affine"}),
            ),
            MlxQuant::Mxfp4 => (
                DType::MlxMxfp4,
                json!({"group_size": 32, "bits": 4, "mode": "mxfp4"}),
            ),
        };
        let mut block = block;
        let mut out = Vec::new();
        for t in &self.tensors {
            let name = names::mlx_name(self.arch, t.id).ok_or_else(|| {
                FormatError::unsupported(path, format!("no MLX name for {:?}", t.id))
            })?;
            let module = name.strip_suffix(".weight").unwrap_or(&name).to_string();
            let want = if !t.id.is_matrix() || t.shape.len() < 2 {
                DType::BF16
            } else if self.arch == Architecture::GptOss && t.id.role == Role::Router {
                // mlx-lm's gpt-oss recipe keeps the router at 8-bit affine.
                let d = DType::MlxAffine { bits: 8, group: 64 };
                if crate::quantize::row_buffer_bytes(d, t.row_len()).is_some() {
                    block[&module] = json!({"group_size": 64, "bits": 8});
                    d
                } else {
                    block[&module] = Value::Bool(false);
                    DType::BF16
                }
            } else if crate::quantize::row_buffer_bytes(dtype, t.row_len()).is_some() {
                dtype
            } else {
                block[&module] = Value::Bool(false);
                DType::BF16
            };
            let source = match &t.stored {
                Some((sd, bufs)) if *sd == want && !t.gguf_order => Source::Stored(bufs.clone()),
                _ => Source::Rows(plain(&t.rows)),
            };
            out.push(t.out(name, want, source));
        }
        Ok((out, block))
    }

    fn write_companions(&self, dir: &Path, config: &Value) -> Result<()> {
        let put = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| FormatError::io(&p, e))
        };
        let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
        put("config.json", pretty(config))?;
        if let Some(t) = &self.companions.tokenizer_json {
            put(
                "tokenizer.json",
                serde_json::to_string(t).unwrap_or_default(),
            )?;
        }
        let mut tc = self.companions.tokenizer_config.clone();
        if let Some(t) = self.chat_template() {
            put("chat_template.jinja", t.clone())?;
            if let Some(Value::Object(m)) = tc.as_mut() {
                m.insert("chat_template".into(), Value::String(t));
            }
        }
        if let Some(tc) = &tc {
            put("tokenizer_config.json", pretty(tc))?;
        }
        if let Some(g) = &self.companions.generation_config {
            put("generation_config.json", pretty(g))?;
        }
        Ok(())
    }

    /// Writes the model to `out` in the target format, atomically. Returns the final path.
    pub fn write(&self, target: &Target, out: &Path, progress: Progress) -> Result<PathBuf> {
        self.write_sized(target, out, progress, &|_| {})
    }

    /// As `write`, first telling `total` how many tensor bytes will be written.
    pub fn write_sized(
        &self,
        target: &Target,
        out: &Path,
        progress: Progress,
        total: &dyn Fn(u64),
    ) -> Result<PathBuf> {
        let sum = |ts: &[OutTensor]| {
            ts.iter()
                .map(|t| {
                    t.buffer_bytes()
                        .map_or(0, |b| b.iter().sum::<usize>() as u64)
                })
                .sum::<u64>()
        };
        match target {
            Target::Gguf(policy) => {
                let meta = self.gguf_metadata(policy, out)?;
                let tensors = self.gguf_tensors(policy, out)?;
                total(sum(&tensors));
                let o = AtomicOutput::file(out)?;
                super::gguf::write_gguf(o.path(), &meta, &tensors, progress)?;
                o.commit()
            }
            Target::Safetensors(dtype) => {
                let tensors = self.hf_tensors(*dtype, out)?;
                total(sum(&tensors));
                let mut config = self.config.clone();
                let name = match dtype {
                    DType::F32 => "float32",
                    DType::F16 => "float16",
                    _ => "bfloat16",
                };
                config["dtype"] = json!(name);
                config["tie_word_embeddings"] = json!(self.tied());
                if *dtype == DType::HfMxfp4 {
                    config["quantization_config"] = json!({
                        "quant_method": "mxfp4",
                        "modules_to_not_convert": [
                            "model.layers.*.self_attn",
                            "model.layers.*.mlp.router",
                            "model.embed_tokens",
                            "lm_head"
                        ]
                    });
                }
                let o = AtomicOutput::dir(out)?;
                write_safetensors(o.path(), &tensors, self.shard_bytes, "pt", false, progress)?;
                self.write_companions(o.path(), &config)?;
                o.commit()
            }
            Target::Mlx(q) => {
                let (tensors, block) = self.mlx_tensors(*q, out)?;
                total(sum(&tensors));
                let mut config = self.config.clone();
                // mlx-lm reads only the older top-level rope keys for some models (gpt-oss).
                let (theta, scaling) = rope(&config);
                if config.get("rope_theta").is_none() {
                    config["rope_theta"] = json!(theta);
                }
                if let (None, Some(s)) = (config.get("rope_scaling"), scaling) {
                    config["rope_scaling"] = s;
                }
                config["quantization"] = block.clone();
                config["quantization_config"] = block;
                config["tie_word_embeddings"] = json!(self.tied());
                let o = AtomicOutput::dir(out)?;
                write_safetensors(o.path(), &tensors, self.shard_bytes, "mlx", true, progress)?;
                self.write_companions(o.path(), &config)?;
                o.commit()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qk_permutation_is_llama_cpp_s_and_inverts() {
        // head_dim 4: GGUF rows 0,1,2,3 come from canonical rows 0,2,1,3.
        let src: Vec<usize> = (0..8).map(|r| gguf_qk_source_row(r, 4)).collect();
        assert_eq!(src, [0, 2, 1, 3, 4, 6, 5, 7]);
        for r in 0..64 {
            assert_eq!(gguf_qk_dest_row(gguf_qk_source_row(r, 16), 16), r);
        }
    }
}
