//! gpt-oss experts as Hugging Face stores them: gate and up fused into `gate_up_proj` (gate in
//! the even, up in the odd places), with biases. Dense checkpoints hold each expert transposed
//! (`[E, hidden, 2F]`, `[E, F, hidden]`); OpenAI's MXFP4 checkpoint keeps the rows as they are
//! (`[E, 2F, hidden]`, `[E, hidden, F]`), packed as `X_blocks` + `X_scales`, and the rest bf16.

use super::model::{plain, ModelTensor, SharedRows};
use super::{OutTensor, RowFn, Source};
use crate::dtype::DType;
use crate::error::{FormatError, Result};
use crate::names::Role;
use std::path::Path;

/// The output tensors of one canonical expert tensor `t` of `layer` (gate takes its up from
/// `up(bias)`; up itself gives nothing, having been written with gate).
pub(super) fn hf_experts<'m, 'a: 'm>(
    t: &ModelTensor<'a>,
    up: impl Fn(bool) -> Option<&'m ModelTensor<'a>>,
    dtype: DType,
    layer: usize,
    path: &Path,
) -> Result<Vec<OutTensor<'a>>> {
    let base = format!("model.layers.{layer}.mlp.experts");
    let packed = dtype == DType::HfMxfp4;
    let dense = if packed { DType::BF16 } else { dtype };
    let missing = |what: &str| FormatError::malformed(path, format!("gpt-oss experts: {what}"));
    Ok(match (t.id.role, t.id.bias) {
        (Role::ExpGate, false) => {
            let up = up(false).ok_or_else(|| missing("gate without up"))?;
            let (e, f, hidden) = (t.shape[0], t.shape[1], t.shape[2]);
            let name = format!("{base}.gate_up_proj");
            let mut ot = if packed {
                OutTensor::new(
                    name,
                    vec![e, 2 * f, hidden],
                    dtype,
                    Source::Rows(interleaved_rows(t.rows.clone(), up.rows.clone(), hidden)),
                )
            } else {
                let mut ot = OutTensor::new(
                    name,
                    vec![e, hidden, 2 * f],
                    dtype,
                    Source::Rows(fused_gate_up(t.rows.clone(), up.rows.clone(), f, hidden)),
                );
                ot.align_rows = hidden;
                ot
            };
            if packed {
                ot.align_rows = 2;
            }
            vec![ot]
        }
        (Role::ExpGate, true) => {
            let up = up(true).ok_or_else(|| missing("gate bias without up bias"))?;
            let (e, f) = (t.shape[0], t.shape[1]);
            vec![OutTensor::new(
                format!("{base}.gate_up_proj_bias"),
                vec![e, 2 * f],
                dense,
                Source::Rows(interleaved(t.rows.clone(), up.rows.clone(), f)),
            )]
        }
        (Role::ExpDown, false) if packed => vec![OutTensor::new(
            format!("{base}.down_proj"),
            t.shape.clone(),
            dtype,
            Source::Rows(plain(&t.rows)),
        )],
        (Role::ExpDown, false) => {
            let (e, hidden, f) = (t.shape[0], t.shape[1], t.shape[2]);
            let mut ot = OutTensor::new(
                format!("{base}.down_proj"),
                vec![e, f, hidden],
                dtype,
                Source::Rows(transposed(t.rows.clone(), hidden, f)),
            );
            ot.align_rows = f;
            vec![ot]
        }
        (Role::ExpDown, true) => vec![OutTensor::new(
            format!("{base}.down_proj_bias"),
            t.shape.clone(),
            dense,
            match &t.stored {
                Some((sd, bufs)) if *sd == dense && !t.gguf_order => Source::Stored(bufs.clone()),
                _ => Source::Rows(plain(&t.rows)),
            },
        )],
        _ => Vec::new(),
    })
}

/// Rows of `[E, 2F, hidden]` from canonical gate and up `[E, F, hidden]`: row `2f` of an
/// expert is gate row `f`, row `2f + 1` up row `f` (rows are whole, so nothing transposes).
fn interleaved_rows<'a>(gate: SharedRows<'a>, up: SharedRows<'a>, hidden: usize) -> RowFn<'a> {
    Box::new(move |first, n, out| {
        for (r, o) in (first..first + n).zip(out.chunks_exact_mut(hidden)) {
            let src = if r % 2 == 0 { &gate } else { &up };
            src(r / 2, 1, o)?;
        }
        Ok(())
    })
}

/// gpt-oss `gate_up_proj` rows (expert e, input h) from canonical gate/up [E, F, hidden]:
/// gate in even and up in odd columns, transposed.
fn fused_gate_up<'a>(
    gate: SharedRows<'a>,
    up: SharedRows<'a>,
    f: usize,
    hidden: usize,
) -> RowFn<'a> {
    Box::new(move |first, n, out| {
        let (mut g, mut u) = (vec![0f32; f * hidden], vec![0f32; f * hidden]);
        for e in first / hidden..(first + n) / hidden {
            gate(e * f, f, &mut g)?;
            up(e * f, f, &mut u)?;
            let dst = &mut out[(e * hidden - first) * 2 * f..(e * hidden - first + hidden) * 2 * f];
            for r in 0..f {
                for c in 0..hidden {
                    dst[c * 2 * f + 2 * r] = g[r * hidden + c];
                    dst[c * 2 * f + 2 * r + 1] = u[r * hidden + c];
                }
            }
        }
        Ok(())
    })
}

/// Rows of two [E, F] tensors interleaved element by element into [E, 2F].
fn interleaved<'a>(a: SharedRows<'a>, b: SharedRows<'a>, f: usize) -> RowFn<'a> {
    Box::new(move |first, n, out| {
        let (mut x, mut y) = (vec![0f32; n * f], vec![0f32; n * f]);
        a(first, n, &mut x)?;
        b(first, n, &mut y)?;
        for i in 0..n * f {
            out[2 * i] = x[i];
            out[2 * i + 1] = y[i];
        }
        Ok(())
    })
}

/// Per expert, the transpose of a canonical [rows, cols] matrix: output rows are its columns.
fn transposed<'a>(src: SharedRows<'a>, rows: usize, cols: usize) -> RowFn<'a> {
    Box::new(move |first, n, out| {
        let mut m = vec![0f32; rows * cols];
        for e in first / cols..(first + n) / cols {
            src(e * rows, rows, &mut m)?;
            let dst = &mut out[(e * cols - first) * rows..(e * cols - first + cols) * rows];
            for r in 0..rows {
                for c in 0..cols {
                    dst[c * rows + r] = m[r * cols + c];
                }
            }
        }
        Ok(())
    })
}
