//! GGUF v3 writer: metadata of every type, tensor infos in ggml order (`ne`, fastest first),
//! data aligned to 32 bytes and streamed in parallel chunks.

use super::stream::{write_data, Placed};
use super::{OutTensor, Progress};
use crate::error::{FormatError, Result};
use crate::metadata::MetaValue;
use std::path::Path;

pub const ALIGNMENT: u64 = 32;

fn value_type(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::String(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue, key: &str, path: &Path) -> Result<()> {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Array(items) => {
            // An empty array still needs an element type; u32 is what gguf-py reads back.
            let ty = items.first().map_or(4, value_type);
            if items
                .iter()
                .any(|i| value_type(i) != ty || matches!(i, MetaValue::Array(_)))
            {
                return Err(FormatError::unsupported(
                    path,
                    format!("metadata '{key}': arrays must hold one scalar type"),
                ));
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items {
                put_value(out, i, key, path)?;
            }
        }
    }
    Ok(())
}

/// Writes a GGUF file at `path` (the caller makes it atomic). Metadata keys are written in the
/// given order.
pub fn write_gguf(
    path: &Path,
    metadata: &[(String, MetaValue)],
    tensors: &[OutTensor],
    progress: Progress,
) -> Result<()> {
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        put_str(&mut head, k);
        head.extend_from_slice(&value_type(v).to_le_bytes());
        put_value(&mut head, v, k, path)?;
    }
    let mut rel = Vec::with_capacity(tensors.len());
    let mut offset = 0u64;
    for t in tensors {
        t.check(path)?;
        let ggml = t.dtype.ggml_type().ok_or_else(|| {
            FormatError::unsupported(
                path,
                format!("tensor '{}': GGUF cannot hold {}", t.name, t.dtype.name()),
            )
        })?;
        put_str(&mut head, &t.name);
        let dims: Vec<u64> = if t.shape.is_empty() {
            vec![1]
        } else {
            t.shape.iter().rev().map(|&d| d as u64).collect()
        };
        head.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&ggml.to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        rel.push(offset);
        let bytes: u64 = t
            .buffer_bytes()
            .map_or(0, |b| b.iter().sum::<usize>() as u64);
        offset = (offset + bytes).div_ceil(ALIGNMENT) * ALIGNMENT;
    }
    let data_start = (head.len() as u64).div_ceil(ALIGNMENT) * ALIGNMENT;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| FormatError::io(path, e))?;
    file.set_len(data_start + offset)
        .map_err(|e| FormatError::io(path, e))?;
    use std::os::unix::fs::FileExt;
    file.write_all_at(&head, 0)
        .map_err(|e| FormatError::io(path, e))?;
    let placed: Vec<Placed> = tensors
        .iter()
        .zip(rel)
        .map(|(t, r)| Placed {
            tensor: t,
            offsets: vec![data_start + r],
        })
        .collect();
    write_data(&file, path, &placed, progress)?;
    file.sync_all().map_err(|e| FormatError::io(path, e))
}
