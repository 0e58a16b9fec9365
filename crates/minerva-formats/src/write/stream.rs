//! Streaming tensor data into a pre-sized file: tensors are cut into row chunks that are
//! produced (generated, dequantized, quantized) and written in parallel at their final offsets,
//! so memory stays at a few chunks per thread whatever the model's size.

use super::{OutTensor, Progress, Source};
use crate::error::{FormatError, Result};
use crate::quantize;
use rayon::prelude::*;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// f32 values produced per chunk: large enough to amortize calls, small enough that a chunk
/// per thread costs little memory.
const CHUNK_VALUES: usize = 1 << 20;

/// A tensor placed in a file: the absolute offset of each of its buffers.
pub struct Placed<'t, 'a> {
    pub tensor: &'t OutTensor<'a>,
    pub offsets: Vec<u64>,
}

struct Job {
    tensor: usize,
    first: usize,
    rows: usize,
}

fn jobs(placed: &[Placed]) -> Vec<Job> {
    let mut out = Vec::new();
    for (i, p) in placed.iter().enumerate() {
        let t = p.tensor;
        let (rows, row_len) = (t.rows(), t.row_len().max(1));
        let align = t.align_rows.max(1);
        let per = (CHUNK_VALUES / row_len).max(1).div_ceil(align) * align;
        let mut first = 0;
        while first < rows {
            let n = per.min(rows - first);
            out.push(Job {
                tensor: i,
                first,
                rows: n,
            });
            first += n;
        }
    }
    out
}

fn run_job(file: &File, path: &Path, p: &Placed, job: &Job, progress: Progress) -> Result<()> {
    let t = p.tensor;
    let row_len = t.row_len();
    let per_row = quantize::row_buffer_bytes(t.dtype, row_len).ok_or_else(|| {
        FormatError::unsupported(
            path,
            format!(
                "tensor '{}': rows of {row_len} as {}",
                t.name,
                t.dtype.name()
            ),
        )
    })?;
    let mut bufs: Vec<Vec<u8>> = per_row.iter().map(|b| vec![0u8; b * job.rows]).collect();
    match &t.source {
        Source::Rows(f) => {
            let mut x = vec![0f32; job.rows * row_len];
            f(job.first, job.rows, &mut x)?;
            let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            quantize::encode_rows(t.dtype, &x, row_len, &mut views)
                .map_err(|e| FormatError::unsupported(path, format!("tensor '{}': {e}", t.name)))?;
        }
        Source::Stored(stored) => {
            for ((b, s), per) in bufs.iter_mut().zip(stored).zip(&per_row) {
                b.copy_from_slice(&s[job.first * per..(job.first + job.rows) * per]);
            }
        }
    }
    for ((b, off), per) in bufs.iter().zip(&p.offsets).zip(&per_row) {
        file.write_all_at(b, off + (job.first * per) as u64)
            .map_err(|e| FormatError::io(path, e))?;
        progress(b.len() as u64);
    }
    Ok(())
}

/// Writes every placed tensor's data; the header is the caller's.
pub fn write_data(file: &File, path: &Path, placed: &[Placed], progress: Progress) -> Result<()> {
    for p in placed {
        p.tensor.check(path)?;
    }
    jobs(placed)
        .par_iter()
        .try_for_each(|j| run_job(file, path, &placed[j.tensor], j, progress))
}
