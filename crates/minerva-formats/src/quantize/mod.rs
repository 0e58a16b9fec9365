//! Quantizers and float encoders on the CPU: f32 rows in, a dtype's stored buffers out. Every
//! dtype the writers produce goes through `encode_rows`; callers parallelize over row chunks.

pub mod ggml;
pub mod kquants;
pub mod mlx;
pub mod policy;

use crate::dtype::DType;
use crate::error::{FormatError, Result};
use half::{bf16, f16};

pub use policy::{QuantPolicy, QuantRecipe};

/// Round half to even, as the FPU does and ggml's `nearest_int` relies on. Adding 1.5·2^23
/// leaves the rounded integer in the low mantissa bits; this is much faster than
/// `f32::round_ties_even` on x86-64 without SSE4.1, where that becomes a library call.
#[inline(always)]
pub fn round_even(v: f32) -> f32 {
    if v.abs() < 4_194_304.0 {
        let t = v + 12_582_912.0;
        (((t.to_bits() & 0x007f_ffff) as i32) - 0x0040_0000) as f32
    } else {
        v.round_ties_even()
    }
}

/// Round half away from zero (C's `roundf`), exact for |v| < 2^31, without a library call.
#[inline(always)]
pub fn round_away(v: f32) -> f32 {
    if v.abs() < 2_147_483_520.0 {
        let i = v as i32;
        let frac = v - i as f32;
        (if frac >= 0.5 {
            i + 1
        } else if frac <= -0.5 {
            i - 1
        } else {
            i
        }) as f32
    } else {
        v.round()
    }
}

/// Scales and biases of MLX affine packs are stored as bf16 (mlx-lm's usual dtype).
pub const MLX_SCALE_DTYPE: DType = DType::BF16;

/// Byte length, per row of `row_len` values, of each buffer a dtype is stored in: one for plain
/// and ggml types; weight, scales, biases for MLX affine; weight, scales for mxfp4 packs.
pub fn row_buffer_bytes(dtype: DType, row_len: usize) -> Option<Vec<usize>> {
    Some(match dtype {
        DType::MlxAffine { bits, group } => {
            let g = group as usize;
            if !row_len.is_multiple_of(g) || !(row_len * bits as usize).is_multiple_of(32) {
                return None;
            }
            let s = row_len / g * MLX_SCALE_DTYPE.block_bytes();
            vec![row_len * bits as usize / 8, s, s]
        }
        DType::MlxMxfp4 | DType::HfMxfp4 => {
            if !row_len.is_multiple_of(32) {
                return None;
            }
            vec![row_len / 2, row_len / 32]
        }
        other => vec![other.row_bytes(row_len)?],
    })
}

/// Whether `encode_rows` can produce this dtype.
pub fn can_encode(dtype: DType) -> bool {
    use DType::*;
    matches!(
        dtype,
        F32 | F16
            | BF16
            | Q8_0
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q4_K
            | Q5_K
            | Q6_K
            | MXFP4
            | MlxMxfp4
            | HfMxfp4
    ) || matches!(dtype, MlxAffine { bits, group } if [2, 3, 4, 5, 6, 8].contains(&bits) && [32, 64, 128].contains(&group))
}

/// Encodes whole rows of `src` (`row_len` values each) into the dtype's buffers, which hold
/// exactly those rows (sizes from `row_buffer_bytes` times the row count).
pub fn encode_rows(
    dtype: DType,
    src: &[f32],
    row_len: usize,
    bufs: &mut [&mut [u8]],
) -> Result<()> {
    let per_row = row_buffer_bytes(dtype, row_len)
        .filter(|_| can_encode(dtype))
        .ok_or_else(|| {
            FormatError::unsupported(
                "quantizer",
                format!("encoding rows of {row_len} as {}", dtype.name()),
            )
        })?;
    let rows = src.len().checked_div(row_len).unwrap_or(0);
    let wrong_buffers = || {
        FormatError::malformed(
            "quantizer",
            format!("output buffers do not fit {rows} rows of {}", dtype.name()),
        )
    };
    if bufs.len() != per_row.len() || bufs.iter().zip(&per_row).any(|(b, &p)| b.len() != p * rows) {
        return Err(wrong_buffers());
    }
    let block = |f: fn(&[f32], &mut [u8]), n: usize, out: &mut [u8]| {
        let bb = dtype.block_bytes();
        for (x, o) in src.chunks_exact(n).zip(out.chunks_exact_mut(bb)) {
            f(x, o);
        }
    };
    match dtype {
        DType::F32 => {
            for (v, o) in src.iter().zip(bufs[0].chunks_exact_mut(4)) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::F16 => {
            for (v, o) in src.iter().zip(bufs[0].chunks_exact_mut(2)) {
                o.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (v, o) in src.iter().zip(bufs[0].chunks_exact_mut(2)) {
                o.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
            }
        }
        DType::Q8_0 => block(ggml::q8_0, 32, bufs[0]),
        DType::Q4_0 => block(ggml::q4_0, 32, bufs[0]),
        DType::Q4_1 => block(ggml::q4_1, 32, bufs[0]),
        DType::Q5_0 => block(ggml::q5_0, 32, bufs[0]),
        DType::Q5_1 => block(ggml::q5_1, 32, bufs[0]),
        DType::MXFP4 => block(ggml::mxfp4, 32, bufs[0]),
        DType::Q4_K => block(kquants::q4_k, 256, bufs[0]),
        DType::Q5_K => block(kquants::q5_k, 256, bufs[0]),
        DType::Q6_K => block(kquants::q6_k, 256, bufs[0]),
        DType::MlxAffine { bits, group } => {
            let [w, s, b] = bufs else {
                return Err(wrong_buffers());
            };
            for (r, x) in src.chunks_exact(row_len).enumerate() {
                let span = |p: usize| r * p..(r + 1) * p;
                mlx::affine_row(
                    x,
                    bits,
                    group as usize,
                    MLX_SCALE_DTYPE,
                    &mut w[span(per_row[0])],
                    &mut s[span(per_row[1])],
                    &mut b[span(per_row[2])],
                );
            }
        }
        // The same bytes: E2M1 codes, even element in the low nibble, then E8M0 scales.
        DType::MlxMxfp4 | DType::HfMxfp4 => {
            let [w, s] = bufs else {
                return Err(wrong_buffers());
            };
            for (r, x) in src.chunks_exact(row_len).enumerate() {
                mlx::mxfp4_row(
                    x,
                    &mut w[r * per_row[0]..(r + 1) * per_row[0]],
                    &mut s[r * per_row[1]..(r + 1) * per_row[1]],
                );
            }
        }
        _ => return Err(wrong_buffers()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_rounding_matches_std() {
        let mut vals = vec![
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -1.5,
            -2.5,
            0.49999997,
            -0.49999997,
            126.5,
            -127.5,
            3e6 + 0.5,
            1e9,
            -7.0,
            0.0,
            -0.0,
        ];
        let mut x = 0.123f32;
        for _ in 0..10_000 {
            x = (x * 7.31 + 0.77) % 300.0 - 150.0;
            vals.push(x);
            vals.push(x.trunc() + 0.5);
        }
        for v in vals {
            assert_eq!(round_even(v), v.round_ties_even(), "{v}");
            assert_eq!(round_away(v), v.round(), "{v}");
        }
    }
}
