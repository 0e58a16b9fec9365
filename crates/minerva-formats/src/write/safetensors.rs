//! SafeTensors writer: one `model.safetensors`, or shards `model-0000i-of-0000n.safetensors`
//! with `model.safetensors.index.json` when the weights exceed the shard size. MLX packs are
//! written as mlx-lm stores them: `X.weight` (u32 words), `X.scales`, `X.biases`.

use super::stream::{write_data, Placed};
use super::{OutTensor, Progress};
use crate::dtype::DType;
use crate::error::{FormatError, Result};
use crate::quantize::MLX_SCALE_DTYPE;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// Hugging Face's and mlx-lm's default largest shard.
pub const DEFAULT_SHARD_BYTES: u64 = 5 << 30;

fn st_dtype(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F64 => "F64",
        DType::F32 => "F32",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I64 => "I64",
        DType::I32 => "I32",
        DType::I16 => "I16",
        DType::I8 => "I8",
        DType::U64 => "U64",
        DType::U32 => "U32",
        DType::U16 => "U16",
        DType::U8 => "U8",
        DType::Bool => "BOOL",
        _ => return None,
    })
}

/// The safetensors entries (name, dtype, shape) a tensor is stored as, one per buffer.
fn entries(t: &OutTensor, path: &Path) -> Result<Vec<(String, &'static str, Vec<usize>)>> {
    let lead = &t.shape[..t.shape.len().saturating_sub(1)];
    let with_last = |n: usize| lead.iter().copied().chain([n]).collect::<Vec<_>>();
    let row = t.row_len();
    let base = || {
        t.name.strip_suffix(".weight").ok_or_else(|| {
            FormatError::unsupported(
                path,
                format!(
                    "tensor '{}': a packed MLX tensor must be named X.weight",
                    t.name
                ),
            )
        })
    };
    let scale = st_dtype(MLX_SCALE_DTYPE).unwrap_or("BF16");
    Ok(match t.dtype {
        DType::MlxAffine { bits, group } => {
            let b = base()?;
            let groups = row / group as usize;
            vec![
                (t.name.clone(), "U32", with_last(row * bits as usize / 32)),
                (format!("{b}.scales"), scale, with_last(groups)),
                (format!("{b}.biases"), scale, with_last(groups)),
            ]
        }
        DType::MlxMxfp4 => {
            let b = base()?;
            vec![
                (t.name.clone(), "U32", with_last(row / 8)),
                (format!("{b}.scales"), "U8", with_last(row / 32)),
            ]
        }
        DType::HfMxfp4 => vec![
            (
                format!("{}_blocks", t.name),
                "U8",
                lead.iter().copied().chain([row / 32, 16]).collect(),
            ),
            (format!("{}_scales", t.name), "U8", with_last(row / 32)),
        ],
        d => {
            let s = st_dtype(d).ok_or_else(|| {
                FormatError::unsupported(
                    path,
                    format!("tensor '{}': SafeTensors cannot hold {}", t.name, d.name()),
                )
            })?;
            vec![(t.name.clone(), s, t.shape.clone())]
        }
    })
}

/// How the folder's weights were split.
pub struct Written {
    pub files: Vec<PathBuf>,
    pub total_bytes: u64,
}

/// Writes the tensors into `dir` (which exists). `format` goes into the header metadata
/// (`pt` for Hugging Face, `mlx` for MLX); `always_index` writes the index even for one file.
pub fn write_safetensors(
    dir: &Path,
    tensors: &[OutTensor],
    shard_bytes: u64,
    format: &str,
    always_index: bool,
    progress: Progress,
) -> Result<Written> {
    let mut sizes = Vec::with_capacity(tensors.len());
    for t in tensors {
        t.check(dir)?;
        sizes.push(t.buffer_bytes().unwrap_or_default().iter().sum::<usize>() as u64);
    }
    // Greedy shards in tensor order; a tensor (with its scales and biases) never straddles two.
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let mut cur = 0u64;
    for (i, &s) in sizes.iter().enumerate() {
        if cur > 0 && cur + s > shard_bytes {
            shards.push(Vec::new());
            cur = 0;
        }
        shards.last_mut().unwrap().push(i);
        cur += s;
    }
    let n = shards.len();
    let mut files = Vec::new();
    let mut weight_map = Map::new();
    let total: u64 = sizes.iter().sum();
    for (k, shard) in shards.iter().enumerate() {
        let fname = if n == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", k + 1)
        };
        let path = dir.join(&fname);
        let mut header = Map::new();
        header.insert("__metadata__".into(), json!({ "format": format }));
        let mut offset = 0u64;
        let mut rel = Vec::new();
        for &i in shard {
            let t = &tensors[i];
            let mut offs = Vec::new();
            for ((name, dtype, shape), len) in entries(t, &path)?
                .into_iter()
                .zip(t.buffer_bytes().unwrap_or_default())
            {
                header.insert(name.clone(), json!({ "dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len as u64] }));
                weight_map.insert(name, Value::String(fname.clone()));
                offs.push(offset);
                offset += len as u64;
            }
            rel.push((i, offs));
        }
        let mut text = serde_json::to_vec(&Value::Object(header))
            .map_err(|e| FormatError::malformed(&path, e.to_string()))?;
        while text.len() % 8 != 0 {
            text.push(b' ');
        }
        let data_start = 8 + text.len() as u64;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| FormatError::io(&path, e))?;
        file.set_len(data_start + offset)
            .map_err(|e| FormatError::io(&path, e))?;
        let mut head = (text.len() as u64).to_le_bytes().to_vec();
        head.extend_from_slice(&text);
        super::stream::write_all_at(&file, &head, 0).map_err(|e| FormatError::io(&path, e))?;
        let placed: Vec<Placed> = rel
            .into_iter()
            .map(|(i, offs)| Placed {
                tensor: &tensors[i],
                offsets: offs.into_iter().map(|o| o + data_start).collect(),
            })
            .collect();
        write_data(&file, &path, &placed, progress)?;
        file.sync_all().map_err(|e| FormatError::io(&path, e))?;
        files.push(path);
    }
    if n > 1 || always_index {
        let index = json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
        let path = dir.join("model.safetensors.index.json");
        let text = serde_json::to_string_pretty(&index)
            .map_err(|e| FormatError::malformed(&path, e.to_string()))?;
        std::fs::write(&path, text).map_err(|e| FormatError::io(&path, e))?;
    }
    Ok(Written {
        files,
        total_bytes: total,
    })
}
