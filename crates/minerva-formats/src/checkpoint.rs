//! A Checkpoint: the memory-mapped files of one model, its tensor table and its metadata.
//! Readers gather entries; this module checks every entry against the files before any view
//! of it can exist, so later stages never see an out-of-bounds or mis-sized tensor.

use crate::dtype::DType;
use crate::error::{FormatError, Result};
use crate::metadata::Metadata;
use crate::tensor::{TensorData, TensorView};
use memmap2::Mmap;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Gguf,
    Safetensors,
    Mlx,
}

impl Format {
    pub fn name(&self) -> &'static str {
        match self {
            Format::Gguf => "gguf",
            Format::Safetensors => "safetensors",
            Format::Mlx => "mlx",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelFile {
    pub path: PathBuf,
    pub size: u64,
}

/// A byte range of one mapped file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub file: usize,
    pub start: usize,
    pub end: usize,
}

/// How an entry's spans form a tensor (the order of `spans` follows the variant's fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// spans: [data]
    Plain,
    /// spans: [weight, scales, biases]
    MlxAffine { scale_dtype: DType },
    /// spans: [weight, scales]
    MlxMxfp4,
    /// spans: [blocks, scales]
    HfMxfp4,
}

/// One tensor as a reader found it: logical shape (outermost first) and where its bytes are.
#[derive(Debug, Clone)]
pub struct TensorEntry {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub layout: Layout,
    pub spans: Vec<Span>,
}

/// An opened model: the files stay mapped for the Checkpoint's life; views borrow from them.
pub struct Checkpoint {
    pub format: Format,
    /// Folder holding the model and its companions (config.json, tokenizer.json, ...).
    pub dir: PathBuf,
    pub files: Vec<ModelFile>,
    /// GGUF key/values (empty for SafeTensors and MLX).
    pub metadata: Metadata,
    /// config.json (SafeTensors and MLX folders).
    pub config: Option<serde_json::Value>,
    maps: Vec<Mapping>,
    entries: Vec<TensorEntry>,
    index: HashMap<String, usize>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("format", &self.format)
            .field("dir", &self.dir)
            .field("files", &self.files)
            .field("tensors", &self.entries.len())
            .finish()
    }
}

/// A mapped model file, shared by the checkpoint and the backends that read weights from it in
/// place (the CPU's), so that the file's pages are held once.
pub type Mapping = std::sync::Arc<Mmap>;

/// Maps a file read-only. Empty files cannot be mapped and hold no model anyway.
pub fn map_file(path: &Path) -> Result<Mmap> {
    let file = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
    let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
    if len == 0 {
        return Err(FormatError::malformed(path, "file is empty"));
    }
    // SAFETY: the map is read-only; a file changed underneath us by another process can give
    // wrong bytes, which every reader already treats as hostile input, but not unsafety in Rust
    // code that only reads through slices bounded by the map's length.
    unsafe { Mmap::map(&file) }.map_err(|e| FormatError::io(path, e))
}

/// Bytes of `n` elements of a plain dtype, or of `n / block` blocks of a quantized one.
fn expected_plain_bytes(dtype: DType, shape: &[usize]) -> Option<usize> {
    let row = shape.last().copied().unwrap_or(1);
    let rows = shape[..shape.len().saturating_sub(1)]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))?;
    rows.checked_mul(dtype.row_bytes(row)?)
}

impl Checkpoint {
    /// The mapped files, which views borrow from.
    pub fn mappings(&self) -> &[Mapping] {
        &self.maps
    }

    /// Builds a checkpoint from a reader's findings, checking every entry against the files:
    /// spans inside their file, sizes matching shape and dtype, no two tensors overlapping.
    pub fn from_parts(
        format: Format,
        dir: PathBuf,
        files: Vec<ModelFile>,
        maps: Vec<Mmap>,
        entries: Vec<TensorEntry>,
        metadata: Metadata,
        config: Option<serde_json::Value>,
    ) -> Result<Checkpoint> {
        let mut index = HashMap::with_capacity(entries.len());
        let mut claimed: Vec<(usize, usize, usize, usize)> = Vec::new(); // file, start, end, entry
        for (i, e) in entries.iter().enumerate() {
            let bad = |what: String| {
                let path = files
                    .get(e.spans.first().map_or(0, |s| s.file))
                    .map_or(dir.clone(), |f| f.path.clone());
                FormatError::malformed(path, format!("tensor '{}': {what}", e.name))
            };
            if index.insert(e.name.clone(), i).is_some() {
                return Err(bad("appears twice".into()));
            }
            let elements = e.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            if elements.is_none() {
                return Err(bad(format!("shape {:?} overflows", e.shape)));
            }
            let want_spans = match e.layout {
                Layout::Plain => 1,
                Layout::MlxAffine { .. } => 3,
                Layout::MlxMxfp4 | Layout::HfMxfp4 => 2,
            };
            if e.spans.len() != want_spans {
                return Err(bad(format!(
                    "{} buffers, expected {want_spans}",
                    e.spans.len()
                )));
            }
            for s in &e.spans {
                let map_len = maps
                    .get(s.file)
                    .map(|m| m.len())
                    .ok_or_else(|| bad("refers to a missing file".into()))?;
                if s.start > s.end || s.end > map_len {
                    return Err(bad(format!(
                        "data {}..{} lies outside the file ({} bytes)",
                        s.start, s.end, map_len
                    )));
                }
                if s.end > s.start {
                    claimed.push((s.file, s.start, s.end, i));
                }
            }
            let lens: Vec<usize> = e.spans.iter().map(|s| s.end - s.start).collect();
            let row = e.shape.last().copied().unwrap_or(1);
            let rows = elements.unwrap() / row.max(1);
            let check = |what: &str, got: usize, want: Option<usize>| -> Result<()> {
                match want {
                    Some(w) if w == got => Ok(()),
                    Some(w) => Err(bad(format!(
                        "{what} holds {got} bytes, shape {:?} as {} needs {w}",
                        e.shape,
                        e.dtype.name()
                    ))),
                    None => Err(bad(format!(
                        "shape {:?} does not fit dtype {}",
                        e.shape,
                        e.dtype.name()
                    ))),
                }
            };
            match e.layout {
                Layout::Plain => check("data", lens[0], expected_plain_bytes(e.dtype, &e.shape))?,
                Layout::MlxAffine { scale_dtype } => {
                    let DType::MlxAffine { bits, group } = e.dtype else {
                        return Err(bad("MLX affine layout with a non-MLX dtype".into()));
                    };
                    let (bits, group) = (bits as usize, group as usize);
                    if row % group != 0 || (row * bits) % 32 != 0 {
                        return Err(bad(format!("row of {row} is not a whole number of {group}-groups of {bits}-bit words")));
                    }
                    check("weight", lens[0], rows.checked_mul(row * bits / 8))?;
                    let groups = rows.checked_mul(row / group);
                    let sb = scale_dtype.block_bytes();
                    check("scales", lens[1], groups.and_then(|g| g.checked_mul(sb)))?;
                    check("biases", lens[2], groups.and_then(|g| g.checked_mul(sb)))?;
                }
                Layout::MlxMxfp4 | Layout::HfMxfp4 => {
                    if row % 32 != 0 {
                        return Err(bad(format!(
                            "row of {row} is not a whole number of 32-value blocks"
                        )));
                    }
                    check("packed values", lens[0], rows.checked_mul(row / 2))?;
                    check("scales", lens[1], rows.checked_mul(row / 32))?;
                }
            }
        }
        claimed.sort_unstable();
        for w in claimed.windows(2) {
            let (a, b) = (w[0], w[1]);
            if a.0 == b.0 && b.1 < a.2 {
                return Err(FormatError::malformed(
                    files[a.0].path.clone(),
                    format!(
                        "tensors '{}' and '{}' overlap",
                        entries[a.3].name, entries[b.3].name
                    ),
                ));
            }
        }
        Ok(Checkpoint {
            format,
            dir,
            files,
            metadata,
            config,
            maps: maps.into_iter().map(Mapping::new).collect(),
            entries,
            index,
        })
    }

    fn view<'a>(&'a self, e: &'a TensorEntry) -> TensorView<'a> {
        let bytes = |i: usize| {
            let s = e.spans[i];
            &self.maps[s.file][s.start..s.end]
        };
        let data = match e.layout {
            Layout::Plain => TensorData::Plain(bytes(0)),
            Layout::MlxAffine { scale_dtype } => TensorData::MlxAffine {
                weight: bytes(0),
                scales: bytes(1),
                biases: bytes(2),
                scale_dtype,
            },
            Layout::MlxMxfp4 => TensorData::MlxMxfp4 {
                weight: bytes(0),
                scales: bytes(1),
            },
            Layout::HfMxfp4 => TensorData::HfMxfp4 {
                blocks: bytes(0),
                scales: bytes(1),
            },
        };
        TensorView {
            name: &e.name,
            shape: e.shape.clone(),
            dtype: e.dtype,
            data,
        }
    }

    /// The tensor of this (logical) name, as stored.
    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        self.index.get(name).map(|&i| self.view(&self.entries[i]))
    }

    /// Every tensor, in the order the files list them.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.entries.iter().map(|e| self.view(e))
    }

    pub fn tensor_count(&self) -> usize {
        self.entries.len()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Bytes of all tensors as stored (scales and biases included).
    pub fn weights_bytes(&self) -> u64 {
        self.tensors().map(|t| t.stored_bytes() as u64).sum()
    }

    /// Logical weights: a packed 4-bit word counts as 8 values; scales and biases not counted.
    pub fn parameters(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| e.shape.iter().product::<usize>() as u64)
            .sum()
    }

    /// Path of a companion file in the model's folder, if it exists.
    pub fn companion(&self, name: &str) -> Option<PathBuf> {
        let p = self.dir.join(name);
        p.is_file().then_some(p)
    }

    /// The first model file (for messages about the model as a whole).
    pub fn main_path(&self) -> &Path {
        self.files
            .first()
            .map_or(self.dir.as_path(), |f| f.path.as_path())
    }
}
