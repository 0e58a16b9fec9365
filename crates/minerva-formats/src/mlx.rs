//! MLX (mlx-community) folders: safetensors shards whose quantized linears are packed triples
//! `X.weight` (u32 words), `X.scales` and, in affine mode, `X.biases`, joined here into one
//! logical tensor `X.weight` of shape [.., out, in]. config.json's `quantization` block says how
//! each module is packed.

use crate::checkpoint::{Layout, TensorEntry};
use crate::dtype::DType;
use crate::error::{FormatError, Result};
use crate::safetensors_reader::{RawTensor, ShardSet};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// Whether config.json describes an MLX quantized model: mlx-lm writes `quantization` (and a
/// copy as `quantization_config`) with `bits`/`group_size`; Hugging Face's own
/// `quantization_config` (gpt-oss MXFP4, GPTQ, ...) carries a `quant_method` instead.
pub fn is_mlx_config(config: &serde_json::Value) -> bool {
    if config.get("quantization").is_some_and(|q| q.is_object()) {
        return true;
    }
    config
        .get("quantization_config")
        .and_then(|q| q.as_object())
        .is_some_and(|q| {
            q.get("quant_method").is_none()
                && (q.contains_key("bits") || q.contains_key("group_size"))
        })
}

/// How one module is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlxQuant {
    Affine { bits: u8, group: u16 },
    Mxfp4,
}

/// config.json's `quantization`: the global setting and per-module overrides (`None` where a
/// module is marked `false`, i.e. left unquantized).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantConfig {
    pub global: Option<MlxQuant>,
    pub modules: HashMap<String, Option<MlxQuant>>,
}

impl QuantConfig {
    /// Reads `quantization` (or `quantization_config`); None when config.json has neither.
    pub fn from_config(config: &Value, path: &Path) -> Result<Option<QuantConfig>> {
        let Some(q) = config
            .get("quantization")
            .or_else(|| config.get("quantization_config"))
        else {
            return Ok(None);
        };
        let q = q
            .as_object()
            .ok_or_else(|| FormatError::malformed(path, "\"quantization\" is not an object"))?;
        let has_global = ["bits", "group_size", "mode"]
            .iter()
            .any(|k| q.contains_key(*k));
        let global = if has_global {
            Some(parse_quant(q, path, "quantization")?)
        } else {
            None
        };
        let mut modules = HashMap::new();
        for (key, value) in q {
            if matches!(key.as_str(), "bits" | "group_size" | "mode") {
                continue;
            }
            let what = format!("quantization.{key}");
            let quant = match value {
                Value::Bool(false) => None,
                Value::Bool(true) => global,
                Value::Object(m) => Some(parse_quant(m, path, &what)?),
                _ => continue,
            };
            modules.insert(key.clone(), quant);
        }
        Ok(Some(QuantConfig { global, modules }))
    }

    /// The packing of the module at `module` (a path like `model.layers.0.mlp.router`).
    pub fn for_module(&self, module: &str) -> Option<MlxQuant> {
        match self.modules.get(module) {
            Some(q) => *q,
            None => self.global,
        }
    }
}

/// One quantization entry. Missing keys take MLX's per-mode defaults; an entry without `mode`
/// is affine (also under a global mxfp4 setting, as mlx-lm writes its 8-bit router entries).
fn parse_quant(m: &serde_json::Map<String, Value>, path: &Path, what: &str) -> Result<MlxQuant> {
    let int = |key: &str| -> Result<Option<u64>> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                FormatError::malformed(path, format!("{what}.{key} is not a whole number: {v}"))
            }),
        }
    };
    let mode = match m.get("mode") {
        None | Some(Value::Null) => "affine",
        Some(Value::String(s)) => s.as_str(),
        Some(v) => {
            return Err(FormatError::malformed(
                path,
                format!("{what}.mode is not a string: {v}"),
            ))
        }
    };
    let (bits, group) = (int("bits")?, int("group_size")?);
    match mode {
        "affine" => {
            let (bits, group) = (bits.unwrap_or(4), group.unwrap_or(64));
            if !matches!(bits, 2 | 3 | 4 | 5 | 6 | 8) {
                return Err(FormatError::unsupported(
                    path,
                    format!("{what}: MLX affine with {bits} bits (2, 3, 4, 5, 6 or 8 are known)"),
                ));
            }
            if !matches!(group, 32 | 64 | 128) {
                return Err(FormatError::unsupported(
                    path,
                    format!("{what}: MLX group size {group} (32, 64 or 128 are known)"),
                ));
            }
            Ok(MlxQuant::Affine {
                bits: bits as u8,
                group: group as u16,
            })
        }
        "mxfp4" => {
            if bits.is_some_and(|b| b != 4) || group.is_some_and(|g| g != 32) {
                return Err(FormatError::malformed(
                    path,
                    format!("{what}: mxfp4 needs bits 4 and group size 32"),
                ));
            }
            Ok(MlxQuant::Mxfp4)
        }
        other => Err(FormatError::unsupported(
            path,
            format!("{what}: MLX quantization mode '{other}'"),
        )),
    }
}

/// The tensor table of an MLX folder: packs joined into one `X.weight`, everything else plain.
pub fn entries(set: &ShardSet, config: &Value, config_path: &Path) -> Result<Vec<TensorEntry>> {
    let quant = QuantConfig::from_config(config, config_path)?
        .ok_or_else(|| FormatError::malformed(config_path, "no \"quantization\" block"))?;
    let by_name: HashMap<&str, (usize, &RawTensor)> = set
        .tensors
        .iter()
        .map(|(f, t)| (t.name.as_str(), (*f, t)))
        .collect();
    let mut entries = Vec::with_capacity(set.tensors.len());
    for (fi, t) in &set.tensors {
        let name = t.name.as_str();
        let module_of = |suffix: &str| {
            name.strip_suffix(suffix)
                .filter(|m| by_name.contains_key(format!("{m}.weight").as_str()))
        };
        // Scales and biases travel with their weight.
        if module_of(".scales").is_some()
            || module_of(".biases")
                .is_some_and(|m| by_name.contains_key(format!("{m}.scales").as_str()))
        {
            continue;
        }
        if let Some(module) = name.strip_suffix(".weight") {
            if let Some(&scales) = by_name.get(format!("{module}.scales").as_str()) {
                let biases = by_name.get(format!("{module}.biases").as_str()).copied();
                entries.push(pack_entry(set, &quant, module, (*fi, t), scales, biases)?);
                continue;
            }
        }
        entries.push(TensorEntry {
            name: t.name.clone(),
            shape: t.shape.clone(),
            dtype: t.dtype,
            layout: Layout::Plain,
            spans: vec![ShardSet::span(*fi, t)],
        });
    }
    Ok(entries)
}

fn pack_entry(
    set: &ShardSet,
    quant: &QuantConfig,
    module: &str,
    weight: (usize, &RawTensor),
    scales: (usize, &RawTensor),
    biases: Option<(usize, &RawTensor)>,
) -> Result<TensorEntry> {
    let (w, s) = (weight.1, scales.1);
    let bad = |file: usize, tensor: &str, what: String| {
        FormatError::malformed(set.path(file), format!("tensor '{tensor}': {what}"))
    };
    let q = quant.for_module(module).ok_or_else(|| {
        bad(
            scales.0,
            &s.name,
            format!("config.json does not quantize module '{module}'"),
        )
    })?;
    if w.dtype != DType::U32 {
        return Err(bad(
            weight.0,
            &w.name,
            format!("packed MLX weight is {}, expected U32", w.dtype.name()),
        ));
    }
    let Some((&packed, outer)) = w.shape.split_last() else {
        return Err(bad(
            weight.0,
            &w.name,
            "packed MLX weight is a scalar".into(),
        ));
    };
    let (bits, group) = match q {
        MlxQuant::Affine { bits, group } => (bits as usize, group as usize),
        MlxQuant::Mxfp4 => (4, 32),
    };
    let row = packed
        .checked_mul(32)
        .filter(|b| b % bits == 0)
        .map(|b| b / bits)
        .ok_or_else(|| {
            bad(
                weight.0,
                &w.name,
                format!("{packed} words do not hold whole {bits}-bit values"),
            )
        })?;
    if row % group != 0 {
        return Err(bad(
            weight.0,
            &w.name,
            format!("row of {row} values is not a whole number of groups of {group}"),
        ));
    }
    let mut scale_shape = outer.to_vec();
    scale_shape.push(row / group);
    let check_companion = |c: (usize, &RawTensor), role: &str| -> Result<()> {
        if c.1.shape != scale_shape {
            return Err(bad(
                c.0,
                &c.1.name,
                format!("{role} of shape {:?} do not match weight '{}' {:?} ({bits}-bit, group {group}): expected {:?}", c.1.shape, w.name, w.shape, scale_shape),
            ));
        }
        Ok(())
    };
    check_companion(scales, "scales")?;
    let mut shape = outer.to_vec();
    shape.push(row);
    let spans = |rest: &[(usize, &RawTensor)]| {
        let mut v = vec![ShardSet::span(weight.0, w)];
        v.extend(rest.iter().map(|(f, t)| ShardSet::span(*f, t)));
        v
    };
    match q {
        MlxQuant::Affine { bits, group } => {
            if !matches!(s.dtype, DType::BF16 | DType::F16 | DType::F32) {
                return Err(bad(
                    scales.0,
                    &s.name,
                    format!(
                        "affine scales of dtype {} (BF16, F16 or F32 expected)",
                        s.dtype.name()
                    ),
                ));
            }
            let b = biases.ok_or_else(|| {
                bad(
                    scales.0,
                    &s.name,
                    format!("affine pack of '{module}' has no '{module}.biases'"),
                )
            })?;
            check_companion(b, "biases")?;
            if b.1.dtype != s.dtype {
                return Err(bad(
                    b.0,
                    &b.1.name,
                    format!(
                        "biases are {} but scales are {}",
                        b.1.dtype.name(),
                        s.dtype.name()
                    ),
                ));
            }
            Ok(TensorEntry {
                name: w.name.clone(),
                shape,
                dtype: DType::MlxAffine { bits, group },
                layout: Layout::MlxAffine {
                    scale_dtype: s.dtype,
                },
                spans: spans(&[scales, b]),
            })
        }
        MlxQuant::Mxfp4 => {
            if s.dtype != DType::U8 {
                return Err(bad(
                    scales.0,
                    &s.name,
                    format!("mxfp4 scales of dtype {} (U8 expected)", s.dtype.name()),
                ));
            }
            if let Some(b) = biases {
                return Err(bad(b.0, &b.1.name, "an mxfp4 pack has no biases".into()));
            }
            Ok(TensorEntry {
                name: w.name.clone(),
                shape,
                dtype: DType::MlxMxfp4,
                layout: Layout::MlxMxfp4,
                spans: spans(&[scales]),
            })
        }
    }
}
