//! MLX packs: affine (bits 2–8, scale and bias per group) and mxfp4.

use crate::dtype::DType;

/// Decodes one row of an MLX affine pack: w = scale·q + bias per group.
pub fn dequant_affine_row(bits: u8, group: usize, weight: &[u8], scales: &[u8], biases: &[u8], scale_dtype: DType, out: &mut [f32]) {
    let _ = (bits, group, weight, scales, biases, scale_dtype, out);
}

/// Decodes one row of an MLX mxfp4 pack.
pub fn dequant_mxfp4_row(weight: &[u8], scales: &[u8], out: &mut [f32]) {
    let _ = (weight, scales, out);
}
