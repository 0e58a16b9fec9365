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
        let v = c << shift;
        for k in 0..=((shift + bits as usize - 1) / 8) {
            out[byte + k] |= (v >> (8 * k)) as u8;
        }
        pos += bits as usize;
    }
}

/// Codes of a group for a (stored) scale and bias, and their squared error.
fn affine_codes(xs: &[f32], s: f32, b: f32, n_bins: f32, codes: &mut [u32]) -> f32 {
    let inv = if s != 0.0 { 1.0 / s } else { 0.0 };
    let mut err = 0f32;
    for (c, &v) in codes.iter_mut().zip(xs) {
        let q = super::round_even((v - b) * inv).clamp(0.0, n_bins);
        *c = q as u32;
        let d = s * q + b - v;
        err += d * d;
    }
    err
}

/// One row of an MLX affine pack. Per group, three candidates (mlx's own choice, which
/// represents the extreme of larger magnitude exactly; plain min–max; and a least-squares refit
/// of the better one's codes) are rounded to `scale_dtype` and the one with the smallest error
/// for the values actually decoded is kept.
pub fn affine_row(
    x: &[f32],
    bits: u8,
    group: usize,
    scale_dtype: DType,
    weight: &mut [u8],
    scales: &mut [u8],
    biases: &mut [u8],
) {
    let n_bins = ((1u32 << bits) - 1) as f32;
    let sb = scale_dtype.block_bytes();
    let mut codes = vec![0u32; x.len()];
    let mut trial = vec![0u32; group];
    for (g, xs) in x.chunks_exact(group).enumerate() {
        let (lo, hi) = xs
            .iter()
            .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        let from_min = lo.abs() > hi.abs();
        let mut scale = ((hi - lo) / n_bins).max(1e-7);
        if !from_min {
            scale = -scale;
        }
        let edge = if from_min { lo } else { hi };
        let q0 = super::round_even(edge / scale);
        let (ms, mb) = if q0 != 0.0 {
            (edge / q0, edge)
        } else {
            (scale, 0.0)
        };
        let out = &mut codes[g * group..(g + 1) * group];
        let mut best = (stored(ms, scale_dtype), stored(mb, scale_dtype));
        let mut best_err = affine_codes(xs, best.0, best.1, n_bins, out);
        let mut consider = |s: f32, b: f32, out: &mut [u32], trial: &mut [u32]| {
            let (s, b) = (stored(s, scale_dtype), stored(b, scale_dtype));
            let e = affine_codes(xs, s, b, n_bins, trial);
            if e < best_err {
                best_err = e;
                best = (s, b);
                out.copy_from_slice(trial);
            }
        };
        consider(((hi - lo) / n_bins).max(1e-7), lo, out, &mut trial);
        // Least squares of x ≈ s·q + b over the current best codes.
        let n = group as f32;
        let (mut sq, mut sqq, mut sx, mut sqx) = (0f32, 0f32, 0f32, 0f32);
        for (&c, &v) in out.iter().zip(xs) {
            let q = c as f32;
            sq += q;
            sqq += q * q;
            sx += v;
            sqx += q * v;
        }
        let det = n * sqq - sq * sq;
        if det > 0.0 {
            consider(
                (n * sqx - sq * sx) / det,
                (sqq * sx - sq * sqx) / det,
                out,
                &mut trial,
            );
        }
        put(best.0, scale_dtype, &mut scales[g * sb..(g + 1) * sb]);
        put(best.1, scale_dtype, &mut biases[g * sb..(g + 1) * sb]);
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
            w[i] = super::ggml::mxfp4_code(xs[2 * i], e)
                | (super::ggml::mxfp4_code(xs[2 * i + 1], e) << 4);
        }
    }
}
