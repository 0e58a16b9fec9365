//! MLX packs: affine (bits 2–8, scale and bias per group) and mxfp4.

use crate::dtype::DType;
use half::{bf16, f16};

/// Element `i` of a buffer of scales or biases stored as `dtype` (BF16, F16 or F32).
#[inline]
pub fn scalar_at(dtype: DType, bytes: &[u8], i: usize) -> f32 {
    match dtype {
        DType::BF16 => bf16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
        DType::F16 => f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
        DType::F32 => f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()),
        // Readers accept only the three types above; anything else decodes as NaN, not a panic.
        _ => f32::NAN,
    }
}

/// Decodes one row of an MLX affine pack: w = scale·q + bias per group.
///
/// The packed row is one little-endian bit stream: value k occupies bits k·bits .. (k+1)·bits,
/// so 3-, 5- and 6-bit values may straddle byte and u32 word boundaries.
pub fn dequant_affine_row(
    bits: u8,
    group: usize,
    weight: &[u8],
    scales: &[u8],
    biases: &[u8],
    scale_dtype: DType,
    out: &mut [f32],
) {
    let bits = bits as u32;
    let mask = (1u64 << bits) - 1;
    let mut bytes = weight.iter();
    let (mut acc, mut held) = (0u64, 0u32);
    for (g, chunk) in out.chunks_exact_mut(group).enumerate() {
        let scale = scalar_at(scale_dtype, scales, g);
        let bias = scalar_at(scale_dtype, biases, g);
        for o in chunk {
            while held < bits {
                acc |= (*bytes.next().unwrap_or(&0) as u64) << held;
                held += 8;
            }
            let q = (acc & mask) as f32;
            acc >>= bits;
            held -= bits;
            *o = scale * q + bias;
        }
    }
}

/// Decodes one row of an MLX mxfp4 pack. Each little-endian u32 holds 8 E2M1 codes from the
/// least significant nibble, so byte i carries element 2i low and 2i+1 high: byte for byte the
/// same order as the gpt-oss Hugging Face blocks, with one E8M0 scale per 32 values.
pub fn dequant_mxfp4_row(weight: &[u8], scales: &[u8], out: &mut [f32]) {
    super::mxfp4::dequant_hf_row(weight, scales, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_bit_values_cross_words() {
        // 32 values of 3 bits = 96 bits = 3 words; value 10 spans bits 30..33 (words 0 and 1).
        let q: Vec<u64> = (0..32).map(|k| (k * 5 + 3) % 8).collect();
        let mut stream = [0u8; 12];
        for (k, &v) in q.iter().enumerate() {
            for b in 0..3 {
                if v >> b & 1 == 1 {
                    let bit = k * 3 + b;
                    stream[bit / 8] |= 1 << (bit % 8);
                }
            }
        }
        let scales = 2.0f32.to_le_bytes();
        let biases = (-1.0f32).to_le_bytes();
        let mut out = [0f32; 32];
        dequant_affine_row(3, 32, &stream, &scales, &biases, DType::F32, &mut out);
        let want: Vec<f32> = q.iter().map(|&v| 2.0 * v as f32 - 1.0).collect();
        assert_eq!(out.to_vec(), want);
    }
}
