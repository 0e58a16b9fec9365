//! Dequantization to f32 on the CPU for every dtype: the reference that GPU kernels and
//! writers are checked against, and how the CPU backend reads weights row by row.

use crate::dtype::DType;
use crate::error::{FormatError, Result};
use crate::quant;
use crate::tensor::{TensorData, TensorView};
use half::{bf16, f16};

/// Decodes one row of a plain (non-block) dtype.
fn plain_row(dtype: DType, src: &[u8], out: &mut [f32]) -> bool {
    macro_rules! conv {
        ($n:expr, $f:expr) => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact($n)) {
                *o = $f(c.try_into().unwrap());
            }
        };
    }
    match dtype {
        DType::F32 => conv!(4, f32::from_le_bytes),
        DType::F16 => conv!(2, |b| f16::from_le_bytes(b).to_f32()),
        DType::BF16 => conv!(2, |b| bf16::from_le_bytes(b).to_f32()),
        DType::F64 => conv!(8, |b| f64::from_le_bytes(b) as f32),
        DType::I64 => conv!(8, |b| i64::from_le_bytes(b) as f32),
        DType::I32 => conv!(4, |b| i32::from_le_bytes(b) as f32),
        DType::I16 => conv!(2, |b| i16::from_le_bytes(b) as f32),
        DType::U64 => conv!(8, |b| u64::from_le_bytes(b) as f32),
        DType::U32 => conv!(4, |b| u32::from_le_bytes(b) as f32),
        DType::U16 => conv!(2, |b| u16::from_le_bytes(b) as f32),
        DType::I8 => conv!(1, |b: [u8; 1]| b[0] as i8 as f32),
        DType::U8 | DType::Bool => conv!(1, |b: [u8; 1]| b[0] as f32),
        _ => return false,
    }
    true
}

/// Decodes rows `first .. first + n` of `view` into `out` (`n * row_len` values).
pub fn dequantize_rows(view: &TensorView, first: usize, n: usize, out: &mut [f32]) -> Result<()> {
    let row = view.row_len();
    let bad = |what: String| FormatError::malformed(view.name, what);
    if first.checked_add(n).is_none_or(|end| end > view.rows()) || out.len() != n * row {
        return Err(bad(format!(
            "rows {first}..{} of {} (output of {} values) requested",
            first.saturating_add(n),
            view.rows(),
            out.len()
        )));
    }
    let slice = |buf: &[u8], per_row: usize, r: usize| -> std::ops::Range<usize> {
        let _ = buf;
        (first + r) * per_row..(first + r + 1) * per_row
    };
    match view.data {
        TensorData::Plain(bytes) => {
            let rb = view
                .dtype
                .row_bytes(row)
                .ok_or_else(|| bad("row is not whole blocks".into()))?;
            for (r, o) in out.chunks_exact_mut(row.max(1)).enumerate() {
                let src = &bytes[slice(bytes, rb, r)];
                if !plain_row(view.dtype, src, o) && !quant::ggml::dequant_row(view.dtype, src, o) {
                    return Err(FormatError::unsupported(
                        view.name,
                        format!("dequantizing {}", view.dtype.name()),
                    ));
                }
            }
        }
        TensorData::MlxAffine {
            weight,
            scales,
            biases,
            scale_dtype,
        } => {
            let DType::MlxAffine { bits, group } = view.dtype else {
                return Err(bad("MLX affine data with another dtype".into()));
            };
            let (wb, gb) = (
                row * bits as usize / 8,
                row / group as usize * scale_dtype.block_bytes(),
            );
            for (r, o) in out.chunks_exact_mut(row).enumerate() {
                quant::mlx::dequant_affine_row(
                    bits,
                    group as usize,
                    &weight[slice(weight, wb, r)],
                    &scales[slice(scales, gb, r)],
                    &biases[slice(biases, gb, r)],
                    scale_dtype,
                    o,
                );
            }
        }
        TensorData::MlxMxfp4 { weight, scales } => {
            for (r, o) in out.chunks_exact_mut(row).enumerate() {
                quant::mlx::dequant_mxfp4_row(
                    &weight[slice(weight, row / 2, r)],
                    &scales[slice(scales, row / 32, r)],
                    o,
                );
            }
        }
        TensorData::HfMxfp4 { blocks, scales } => {
            for (r, o) in out.chunks_exact_mut(row).enumerate() {
                quant::mxfp4::dequant_hf_row(
                    &blocks[slice(blocks, row / 2, r)],
                    &scales[slice(scales, row / 32, r)],
                    o,
                );
            }
        }
    }
    Ok(())
}

/// The whole tensor as f32 (tests, writers and small tensors; the engine reads rows).
pub fn dequantize(view: &TensorView) -> Result<Vec<f32>> {
    let mut out = vec![0f32; view.elements()];
    dequantize_rows(view, 0, view.rows(), &mut out)?;
    Ok(out)
}
