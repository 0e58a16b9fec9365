//! MLX quantization: affine packs (bits 2–8, scale and bias per group, values packed as an
//! LSB-first bit stream of u32 words) and mxfp4 (E2M1 codes, one E8M0 scale byte per 32).

use crate::dtype::DType;
use half::{bf16, f16};

/// Rounds a scale or bias to the dtype it is stored in.
fn stored(v: f32, dtype: DType) -> f32 {
    match dtype {
        DType::BF16 => bf16::from_f32(v).to_f32(),
        DType::F16 => f16::from_f32(v).to_f32(),
        _ => v,
    }
}

fn put(v: f32, dtype: DType, out: &mut [u8]) {
    match dtype {
        DType::BF16 => out.copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
        DType::F16 => out.copy_from_slice(&f16::from_f32(v).to_le_bytes()),
        _ => out.copy_from_slice(&v.to_le_bytes()),
    }
}

/// Writes `bits`-wide codes into an LSB-first bit stream.
fn pack_bits(codes: impl Iterator<Item = u32>, bits: u32, out: &mut [u8]) {
    out.fill(0);
    let mut pos = 0usize;
    for c in codes {
        let (byte, shift) = (pos / 8, pos % 8);
        let v = (c as u32) << shift;
        for k in 0..=((shift + bits as usize - 1) / 8) {
            out[byte + k] |= (v >> (8 * k)) as u8;
        }
        pos += bits as usize;
    }
}

/// One row of an MLX affine pack. Per group, the extreme of larger magnitude is represented
/// exactly (as mlx does); scale and bias are rounded to `scale_dtype` before the codes are
/// chosen, so codes are nearest for the values that will actually be decoded.
pub fn affine_row(x: &[f32], bits: u8, group: usize, scale_dtype: DType, weight: &mut [u8], scales: &mut [u8], biases: &mut [u8]) {
    let n_bins = ((1u32 << bits) - 1) as f32;
    let sb = scale_dtype.block_bytes();
    let mut codes = vec![0u32; x.len()];
    for (g, xs) in x.chunks_exact(group).enumerate() {
        let (lo, hi) = xs.iter().fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        let from_min = lo.abs() > hi.abs();
        let mut scale = ((hi - lo) / n_bins).max(1e-7);
        if !from_min {
            scale = -scale;
        }
        let edge = if from_min { lo } else { hi };
        let q0 = (edge / scale).round_ties_even();
        let (scale, bias) = if q0 != 0.0 { (edge / q0, edge) } else { (scale, 0.0) };
        let (s, b) = (stored(scale, scale_dtype), stored(bias, scale_dtype));
        put(s, scale_dtype, &mut scales[g * sb..(g + 1) * sb]);
        put(b, scale_dtype, &mut biases[g * sb..(g + 1) * sb]);
        let inv = if s != 0.0 { 1.0 / s } else { 0.0 };
        for (c, &v) in codes[g * group..(g + 1) * group].iter_mut().zip(xs) {
            *c = ((v - b) * inv).round_ties_even().clamp(0.0, n_bins) as u32;
        }
    }
    pack_bits(codes.into_iter(), bits as u32, weight);
}

/// One row of an MLX mxfp4 pack: element 2i in the low nibble of byte i, 2i+1 in the high.
/// Each block takes the better of the two candidate exponents.
pub fn mxfp4_row(x: &[f32], weight: &mut [u8], scales: &mut [u8]) {
    for (g, xs) in x.chunks_exact(32).enumerate() {
        let e = super::ggml::mxfp4_best_exponent(xs);
        scales[g] = e;
        let w = &mut weight[16 * g..16 * g + 16];
        for i in 0..16 {
            w[i] = super::ggml::mxfp4_code(xs[2 * i], e) | (super::ggml::mxfp4_code(xs[2 * i + 1], e) << 4);
        }
    }
}
