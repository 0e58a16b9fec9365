//! Matrix products against stored weights. The fast path multiplies the stored blocks in
//! integers (`quant`); the reference path, the oracle every fast kernel is tested against,
//! dequantizes rows to f32 block by block as they are read (never the whole tensor). Output
//! rows are spread over the cores with rayon.

use crate::backend::{Linear, MatView, VecRef};
use crate::cpu::quant::{self, packed::Turn, QuantX};
use crate::cpu::{map_tasks, PARALLEL_WORK};
use crate::error::{EngineError, Result};
use minerva_formats::{dequantize_rows, TensorData, TensorView};
use rayon::prelude::*;

/// Output rows decoded per task: enough work per task, a small buffer per task.
const ROWS_PER_TASK: usize = 16;

/// Dot product with several accumulators, so the compiler can vectorize it (inlined, so
/// that callers compiled for wider lanes get them).
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// Rows (stored dimension 0 after flattening the stack) per matrix of a weight, and row length.
fn matrix_dims(view: &TensorView) -> (usize, usize) {
    let s = &view.shape;
    let rows_per_matrix = if s.len() >= 2 { s[s.len() - 2] } else { 1 };
    (rows_per_matrix, view.row_len())
}

fn check(view: &TensorView, m: &MatView) -> Result<(usize, usize)> {
    let (rows, row_len) = matrix_dims(view);
    let matrices = view.rows() / rows.max(1);
    let (stored_out, stored_in) = if m.input_major {
        (row_len, rows)
    } else {
        (rows, row_len)
    };
    let last = m.offset + m.stride * m.out_dim.saturating_sub(1);
    if m.matrix >= matrices || stored_in != m.in_dim || (m.out_dim > 0 && last >= stored_out) {
        return Err(EngineError::Backend(format!(
            "view of '{}' (matrix {}, outputs {}+{}k for k<{}, input {}) does not fit its shape {:?}",
            view.name, m.matrix, m.offset, m.stride, m.out_dim, m.in_dim, view.shape
        )));
    }
    Ok((rows, row_len))
}

/// A bias vector as f32.
pub fn read_vec(view: &TensorView, v: &VecRef) -> Result<Vec<f32>> {
    let mut out = vec![0f32; view.row_len()];
    dequantize_rows(view, v.row, 1, &mut out)?;
    out.truncate(v.len);
    if out.len() != v.len {
        return Err(EngineError::Backend(format!(
            "'{}' has rows of {}, {} wanted",
            view.name,
            view.row_len(),
            v.len
        )));
    }
    Ok(out)
}

/// Buffers the fast products reuse from one call to the next: the quantized activations and
/// the products in row order before they are laid out by token.
#[derive(Default)]
pub struct Scratch {
    x: QuantX,
    by_row: Vec<f32>,
}

/// A weight as the backend holds it: its view, and how it is packed where it is
/// ([`quant::packed`]).
pub struct Matrix<'a> {
    pub view: TensorView<'a>,
    pub turn: Option<Turn>,
}

/// `out[t, j] = Σ_i x[t, i] · W[j, i] + b[j]` for `n` tokens; `x` is `[n, in]`, `out` `[n, out]`.
/// With `scratch`, block types that have an integer kernel take the fast path; without, or
/// for float weights, the f32 reference path.
pub fn linear(
    x: &[f32],
    n: usize,
    w: &Matrix,
    lin: &Linear,
    bias: Option<&TensorView>,
    out: &mut [f32],
    scratch: Option<&mut Scratch>,
) -> Result<()> {
    let (m, packed) = (&lin.w, w.turn.is_some());
    let w_view = &w.view;
    let (rows, row_len) = check(w_view, m)?;
    let (in_dim, out_dim) = (m.in_dim, m.out_dim);
    let x = &x[..n * in_dim];
    let out = &mut out[..n * out_dim];
    let fast = scratch
        .filter(|_| !m.input_major && in_dim.is_multiple_of(32))
        .and_then(|s| {
            let rows = quant::Rows::new(w_view, m.matrix * rows + m.offset, m.stride, packed)?;
            Some((s, quant::kernel(w_view.dtype, packed)?, rows))
        });
    if let (Some(turn), None) = (w.turn, &fast) {
        // A view the packed kernels cannot read (strided, or from inside a group): the
        // reference path on the bytes as stored. No model's views are of this kind.
        let TensorData::Plain(bytes) = w_view.data else {
            return Err(EngineError::Backend(format!("'{}' packed", w_view.name)));
        };
        let row_bytes = bytes.len() / w_view.rows().max(1);
        let plain = turn.unpack(bytes, row_bytes);
        let view = TensorView {
            data: TensorData::Plain(&plain),
            shape: w_view.shape.clone(),
            ..*w_view
        };
        let w = Matrix { view, turn: None };
        return linear(x, n, &w, lin, bias, out, None);
    }
    let w = w_view;
    if let Some((scratch, kernel, rows)) = fast {
        let unit = quant::unit_of(w.dtype);
        products(kernel, unit, &rows, x, n, in_dim, out_dim, scratch, out);
    } else if m.input_major {
        input_major(x, n, w, m, rows, row_len, out)?;
    } else {
        let base = m.matrix * rows;
        let work = n * out_dim * in_dim;
        let blocks: Vec<Vec<f32>> = map_tasks(out_dim.div_ceil(ROWS_PER_TASK), work, |blk| {
            let j0 = blk * ROWS_PER_TASK;
            let nr = ROWS_PER_TASK.min(out_dim - j0);
            let mut wrows = vec![0f32; nr * row_len];
            if m.stride == 1 {
                dequantize_rows(w, base + m.offset + j0, nr, &mut wrows)?;
            } else {
                for (r, dst) in wrows.chunks_exact_mut(row_len).enumerate() {
                    dequantize_rows(w, base + m.offset + (j0 + r) * m.stride, 1, dst)?;
                }
            }
            let mut res = vec![0f32; nr * n];
            for t in 0..n {
                let xt = &x[t * in_dim..(t + 1) * in_dim];
                for (r, wr) in wrows.chunks_exact(row_len).enumerate() {
                    res[t * nr + r] = dot(xt, wr);
                }
            }
            Ok(res)
        })
        .into_iter()
        .collect::<Result<_>>()?;
        for (blk, res) in blocks.iter().enumerate() {
            let j0 = blk * ROWS_PER_TASK;
            let nr = res.len() / n.max(1);
            for t in 0..n {
                out[t * out_dim + j0..t * out_dim + j0 + nr]
                    .copy_from_slice(&res[t * nr..(t + 1) * nr]);
            }
        }
    }
    if let (Some(bv), Some(b)) = (bias, lin.bias) {
        let b = read_vec(bv, &b)?;
        for row in out.chunks_exact_mut(out_dim) {
            for (o, bb) in row.iter_mut().zip(&b) {
                *o += bb;
            }
        }
    }
    Ok(())
}

/// Output rows per task: a few tasks per thread, so uneven ones even out; in whole groups
/// of eight, which the kernels take together (and packed rows need).
fn rows_per_task(out_dim: usize) -> usize {
    let per = out_dim / (8 * rayon::current_num_threads().max(1));
    per.max(1).next_multiple_of(quant::packed::ROWS)
}

/// The integer products over output rows, on the thread pool when the work is worth it;
/// `unit` values of the activations share a scale ([`quant::unit_of`]).
#[allow(clippy::too_many_arguments)]
fn products(
    kernel: quant::Kernel,
    unit: usize,
    rows: &quant::Rows,
    x: &[f32],
    n: usize,
    in_dim: usize,
    out_dim: usize,
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    scratch.x.quantize(x, n, in_dim, unit);
    let per = rows_per_task(out_dim);
    let xq = &scratch.x;
    let run = |(i, o): (usize, &mut [f32])| {
        let j0 = i * per;
        kernel(rows, j0..j0 + o.len() / n, xq, o)
    };
    // Integer products are several times as fast as f32 ones, but with the pool's threads
    // awake through a step (`run_awake`) a split pays from a quarter of the f32 threshold.
    let parallel = n * out_dim * in_dim >= PARALLEL_WORK / 4;
    // One token's products are already in output order; several are computed by row and
    // then laid out by token.
    let dst = if n == 1 {
        &mut out[..]
    } else {
        scratch.by_row.resize(n * out_dim, 0.0);
        &mut scratch.by_row[..]
    };
    if parallel {
        dst.par_chunks_mut(per * n).enumerate().for_each(run);
    } else {
        dst.chunks_mut(per * n).enumerate().for_each(run);
    }
    if n > 1 {
        let by_row = &scratch.by_row;
        out.par_chunks_mut(out_dim).enumerate().for_each(|(t, o)| {
            for (j, v) in o.iter_mut().enumerate() {
                *v = by_row[j * n + t];
            }
        });
    }
}

/// The `[in, out]` case: stored rows are inputs, so each task takes a range of inputs and
/// adds its partial sums; the partials are then summed.
fn input_major(
    x: &[f32],
    n: usize,
    w: &TensorView,
    m: &MatView,
    rows: usize,
    row_len: usize,
    out: &mut [f32],
) -> Result<()> {
    let (in_dim, out_dim) = (m.in_dim, m.out_dim);
    let tasks = rayon::current_num_threads().max(1);
    let per = in_dim.div_ceil(tasks).max(1);
    let partials: Vec<Vec<f32>> = map_tasks(in_dim.div_ceil(per), n * out_dim * in_dim, |c| {
        let i0 = c * per;
        let ni = per.min(in_dim - i0);
        let mut wrows = vec![0f32; ni * row_len];
        dequantize_rows(w, m.matrix * rows + i0, ni, &mut wrows)?;
        let mut acc = vec![0f32; n * out_dim];
        for t in 0..n {
            let a = &mut acc[t * out_dim..(t + 1) * out_dim];
            for (i, wr) in wrows.chunks_exact(row_len).enumerate() {
                let xi = x[t * in_dim + i0 + i];
                for (j, o) in a.iter_mut().enumerate() {
                    *o += xi * wr[m.offset + j * m.stride];
                }
            }
        }
        Ok(acc)
    })
    .into_iter()
    .collect::<Result<_>>()?;
    out.fill(0.0);
    for p in &partials {
        for (o, v) in out.iter_mut().zip(p) {
            *o += v;
        }
    }
    Ok(())
}
