//! Writers for GGUF files, SafeTensors folders and MLX folders. Each takes a list of tensors
//! whose rows are produced on demand (`Source`) and streams them to disk through the same
//! chunked parallel path; `model` turns a whole model into each format's names and layouts.

pub mod atomic;
pub mod from_checkpoint;
pub mod gguf;
mod gpt_oss;
pub mod model;
pub mod safetensors;
pub mod stream;
pub mod tokenizer;

use crate::dtype::DType;
use crate::error::{FormatError, Result};
use crate::quantize;
use std::path::Path;

pub use atomic::AtomicOutput;

/// Called with the number of bytes just written (from any thread).
pub type Progress<'p> = &'p (dyn Fn(u64) + Sync);

/// Produces f32 rows `first .. first + n` of a tensor into `out` (`n · row_len` values).
pub type RowFn<'a> = Box<dyn Fn(usize, usize, &mut [f32]) -> Result<()> + Send + Sync + 'a>;

/// Where a tensor's bytes come from.
pub enum Source<'a> {
    /// f32 rows, encoded to the tensor's dtype while writing.
    Rows(RowFn<'a>),
    /// Bytes already in the tensor's dtype and layout, one slice per buffer (copied as is).
    Stored(Vec<&'a [u8]>),
}

/// One tensor to write: its stored name, logical shape (outermost first), dtype and data.
pub struct OutTensor<'a> {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub source: Source<'a>,
    /// Chunks of rows handed to the source are multiples of this (a source that transposes
    /// needs whole matrices).
    pub align_rows: usize,
}

impl<'a> OutTensor<'a> {
    pub fn new(
        name: impl Into<String>,
        shape: Vec<usize>,
        dtype: DType,
        source: Source<'a>,
    ) -> Self {
        OutTensor {
            name: name.into(),
            shape,
            dtype,
            source,
            align_rows: 1,
        }
    }

    pub fn row_len(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    pub fn rows(&self) -> usize {
        let n = self.shape.len();
        if n == 0 {
            1
        } else {
            self.shape[..n - 1].iter().product()
        }
    }

    /// Bytes of each stored buffer.
    pub fn buffer_bytes(&self) -> Option<Vec<usize>> {
        let per_row = quantize::row_buffer_bytes(self.dtype, self.row_len())?;
        per_row.iter().map(|b| b.checked_mul(self.rows())).collect()
    }

    /// Checks that the dtype can hold the shape and that stored bytes have the right sizes.
    pub fn check(&self, path: &Path) -> Result<()> {
        let bad = |what: String| {
            FormatError::unsupported(path, format!("tensor '{}': {what}", self.name))
        };
        let sizes = self.buffer_bytes().ok_or_else(|| {
            bad(format!(
                "shape {:?} cannot be stored as {}",
                self.shape,
                self.dtype.name()
            ))
        })?;
        match &self.source {
            Source::Rows(_) if !quantize::can_encode(self.dtype) => {
                Err(bad(format!("no encoder for {}", self.dtype.name())))
            }
            Source::Stored(b)
                if b.len() != sizes.len() || b.iter().zip(&sizes).any(|(s, &n)| s.len() != n) =>
            {
                Err(bad(format!(
                    "stored bytes do not match shape {:?} as {}",
                    self.shape,
                    self.dtype.name()
                )))
            }
            _ => Ok(()),
        }
    }
}
