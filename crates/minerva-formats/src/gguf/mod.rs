//! GGUF reader (versions 2 and 3), including split sets written by llama.cpp's gguf-split
//! (`name-00001-of-00003.gguf`, …): the first part holds the metadata, every part its tensors.

mod header;
pub mod pre_tokenizers;

pub use header::{parse_header, Header, TensorInfo, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS};

use crate::checkpoint::{map_file, Checkpoint, Format, Layout, ModelFile, Span, TensorEntry};
use crate::dtype::DType;
use crate::error::{FormatError, Result};
use crate::metadata::Metadata;
use std::path::{Path, PathBuf};

/// Opens one GGUF file, or a split set from any of its parts (`*-0000K-of-0000N.gguf`).
pub fn open(path: &Path) -> Result<Checkpoint> {
    let parts = match split_name(path) {
        Some((prefix, _, count)) if count > 1 => (1..=count)
            .map(|i| part_path(path, &prefix, i, count))
            .collect(),
        _ => vec![path.to_path_buf()],
    };
    for p in &parts {
        if !p.is_file() {
            return Err(FormatError::not_a_model(
                p,
                format!("part of the split GGUF {} is missing", path.display()),
            ));
        }
    }
    let mut files = Vec::with_capacity(parts.len());
    let mut maps = Vec::with_capacity(parts.len());
    let mut entries = Vec::new();
    let mut metadata = Metadata::default();
    for (i, p) in parts.iter().enumerate() {
        let map = map_file(p)?;
        let header = parse_header(&map, p)?;
        check_split_keys(&header.metadata, i, parts.len(), p)?;
        entries.extend(tensor_entries(&header, i, map.len(), p)?);
        if i == 0 {
            metadata = header.metadata;
        }
        files.push(ModelFile {
            path: p.clone(),
            size: map.len() as u64,
        });
        maps.push(map);
    }
    if parts.len() > 1 {
        let want = metadata.get_u64("split.tensors.count");
        if want != Some(entries.len() as u64) {
            return Err(FormatError::malformed(
                &parts[0],
                format!(
                    "split.tensors.count is {}, the {} parts hold {} tensors",
                    shown(want),
                    parts.len(),
                    entries.len()
                ),
            ));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Checkpoint::from_parts(Format::Gguf, dir, files, maps, entries, metadata, None)
}

/// `(prefix, part, count)` of a gguf-split file name `prefix-0000K-of-0000N.gguf`.
fn split_name(path: &Path) -> Option<(String, usize, usize)> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, part) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(part) || !digits(count) {
        return None;
    }
    let (part, count) = (part.parse().ok()?, count.parse().ok()?);
    (1..=count)
        .contains(&part)
        .then(|| (prefix.to_string(), part, count))
}

fn part_path(path: &Path, prefix: &str, part: usize, count: usize) -> PathBuf {
    path.with_file_name(format!("{prefix}-{part:05}-of-{count:05}.gguf"))
}

/// A part's `split.no` / `split.count` must agree with its place in the set.
fn check_split_keys(md: &Metadata, index: usize, count: usize, path: &Path) -> Result<()> {
    let (no, n) = (md.get_u64("split.no"), md.get_u64("split.count"));
    let ok = match (no, n) {
        (None, None) => count == 1,
        (Some(no), Some(n)) => no == index as u64 && n == count as u64,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(FormatError::malformed(
            path,
            format!(
                "split.no is {}, split.count is {}; the file name says part {} of {count} \
                 (split.no counts from 0)",
                shown(no),
                shown(n),
                index + 1
            ),
        ))
    }
}

/// A key's value for messages.
fn shown(v: Option<u64>) -> String {
    v.map_or_else(|| "absent".to_string(), |n| n.to_string())
}

/// The checkpoint entries of one file's tensor infos (shape reversed to outermost first).
fn tensor_entries(
    h: &Header,
    file: usize,
    file_len: usize,
    path: &Path,
) -> Result<Vec<TensorEntry>> {
    h.tensors
        .iter()
        .map(|t| {
            let bad =
                |what: String| FormatError::malformed(path, format!("tensor '{}': {what}", t.name));
            let dtype = DType::from_ggml_type(t.ggml_type).ok_or_else(|| {
                FormatError::unsupported(
                    path,
                    format!("tensor '{}': ggml type id {}", t.name, t.ggml_type),
                )
            })?;
            // parse_header guarantees the element count fits a usize.
            let shape: Vec<usize> = t.ne.iter().rev().map(|&d| d as usize).collect();
            let row = shape.last().copied().unwrap_or(1);
            let rows: usize = shape[..shape.len().saturating_sub(1)].iter().product();
            let bytes = dtype
                .row_bytes(row)
                .and_then(|rb| rb.checked_mul(rows))
                .ok_or_else(|| {
                    bad(format!(
                        "rows of {row} are not whole {} blocks",
                        dtype.name()
                    ))
                })?;
            let start = h
                .data_start
                .checked_add(t.offset)
                .filter(|&s| s <= file_len as u64);
            let end = start
                .and_then(|s| s.checked_add(bytes as u64))
                .filter(|&e| e <= file_len as u64);
            let (Some(start), Some(end)) = (start, end) else {
                return Err(bad(format!(
                    "data at offset {} + {} bytes lies past the end of the file ({file_len} bytes)",
                    t.offset, bytes
                )));
            };
            Ok(TensorEntry {
                name: t.name.clone(),
                shape,
                dtype,
                layout: Layout::Plain,
                spans: vec![Span {
                    file,
                    start: start as usize,
                    end: end as usize,
                }],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names() {
        let p = Path::new("/m/model-00002-of-00003.gguf");
        assert_eq!(split_name(p), Some(("model".into(), 2, 3)));
        assert_eq!(
            part_path(p, "model", 1, 3),
            Path::new("/m/model-00001-of-00003.gguf")
        );
        assert_eq!(split_name(Path::new("model-2-of-3.gguf")), None);
        assert_eq!(split_name(Path::new("model-00004-of-00003.gguf")), None);
        assert_eq!(split_name(Path::new("llama-Q4_0.gguf")), None);
    }
}
