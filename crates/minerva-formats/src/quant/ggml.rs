//! ggml block quants (GGUF): one decoder per block type, written from ggml's block layouts.
//! Each takes whole blocks of one row and writes 32 or 256 values per block; the arithmetic
//! (which products are formed, in which order) follows ggml's reference dequantizers so the
//! f32 results are bit-identical to theirs.

use crate::dtype::DType;
use crate::quant::mxfp4::{e8m0_to_f32, E2M1};
use half::f16;

/// Decodes one row of ggml blocks; false when the dtype is not a ggml block type.
/// `src` holds whole blocks and `out` their values (`out.len() / block_elems` blocks).
pub fn dequant_row(dtype: DType, src: &[u8], out: &mut [f32]) -> bool {
    let decode: fn(&[u8], &mut [f32]) = match dtype {
        DType::Q4_0 => q4_0,
        DType::Q4_1 => q4_1,
        DType::Q5_0 => q5_0,
        DType::Q5_1 => q5_1,
        DType::Q8_0 => q8_0,
        DType::Q8_1 => q8_1,
        DType::Q2_K => q2_k,
        DType::Q3_K => q3_k,
        DType::Q4_K => q4_k,
        DType::Q5_K => q5_k,
        DType::Q6_K => q6_k,
        DType::Q8_K => q8_k,
        DType::MXFP4 => mxfp4,
        _ => return false,
    };
    let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
    for (block, o) in src.chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
        decode(block, o);
    }
    true
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Q4_0 {d: f16, qs[16]}: element j in the low nibble of qs[j], j+16 in the high; w = d·(q − 8).
fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        out[j] = d * ((q & 0xF) as i32 - 8) as f32;
        out[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
    }
}

/// Q4_1 {d: f16, m: f16, qs[16]}: w = d·q + m.
fn q4_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        out[j] = d * (q & 0xF) as f32 + m;
        out[j + 16] = d * (q >> 4) as f32 + m;
    }
}

/// The 5th bit of element j of a Q5 block: bit j of the little-endian u32 `qh`.
fn q5_high(qh: u32, j: usize) -> u8 {
    ((qh >> j) & 1) as u8
}

/// Q5_0 {d: f16, qh: u32, qs[16]}: w = d·(q − 16).
fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for (j, &q) in b[6..22].iter().enumerate() {
        out[j] = d * (((q & 0xF) | q5_high(qh, j) << 4) as i32 - 16) as f32;
        out[j + 16] = d * (((q >> 4) | q5_high(qh, j + 16) << 4) as i32 - 16) as f32;
    }
}

/// Q5_1 {d: f16, m: f16, qh: u32, qs[16]}: w = d·q + m.
fn q5_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    for (j, &q) in b[8..24].iter().enumerate() {
        out[j] = d * ((q & 0xF) | q5_high(qh, j) << 4) as f32 + m;
        out[j + 16] = d * ((q >> 4) | q5_high(qh, j + 16) << 4) as f32 + m;
    }
}

/// Q8_0 {d: f16, qs: i8[32]}: w = d·q.
fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = q as i8 as f32 * d;
    }
}

/// Q8_1 {d: f16, s: f16 (d·Σq, for dot products), qs: i8[32]}: w = d·q.
fn q8_1(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[4..36]) {
        *o = q as i8 as f32 * d;
    }
}

/// Q2_K {scales[16] (4-bit scale low, 4-bit min high), qs[64], d: f16, dmin: f16}: 16
/// sub-blocks of 16; element 32j + l (j = 4h + s) is bits 2s..2s+1 of qs[32h + l];
/// w = (d·scale)·q − dmin·min.
fn q2_k(b: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for (i, o) in out.chunks_exact_mut(16).enumerate() {
        let (dl, ml) = (d * (scales[i] & 0xF) as f32, dmin * (scales[i] >> 4) as f32);
        let j = i / 2;
        let (qs, shift) = (&qs[32 * (j / 4) + 16 * (i % 2)..][..16], 2 * (j % 4));
        for (o, &q) in o.iter_mut().zip(qs) {
            *o = dl * ((q >> shift) & 3) as f32 - ml;
        }
    }
}

/// Q3_K {hmask[32], qs[64], scales[12] (sixteen 6-bit signed scales, offset 32), d: f16}:
/// element 32j + l (j = 4h + s) has low bits 2s..2s+1 of qs[32h + l] and its high bit in bit j
/// of hmask[l]; a clear high bit means q − 4.
fn q3_k(b: &[u8], out: &mut [f32]) {
    let (hmask, qs, sc) = (&b[0..32], &b[32..96], &b[96..108]);
    let d = f16_at(b, 108);
    let mut scale = [0f32; 16];
    for (j, s) in scale.iter_mut().enumerate() {
        let low = (sc[j % 8] >> (4 * (j / 8))) & 0xF;
        let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        *s = d * ((low | high << 4) as i32 - 32) as f32;
    }
    for (j, o) in out.chunks_exact_mut(32).enumerate() {
        let (qs, shift) = (&qs[32 * (j / 4)..][..32], 2 * (j % 4));
        for (l, o) in o.iter_mut().enumerate() {
            let low = ((qs[l] >> shift) & 3) as i32;
            let high_clear = (hmask[l] >> j) & 1 == 0;
            *o = scale[2 * j + l / 16] * (low - if high_clear { 4 } else { 0 }) as f32;
        }
    }
}

/// The eight 6-bit (scale, min) pairs of Q4_K/Q5_K packed in 12 bytes.
#[inline]
pub fn k_scale_min(s: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (s[j] & 0x3F, s[j + 4] & 0x3F)
    } else {
        (
            (s[j + 4] & 0xF) | ((s[j - 4] >> 2) & 0x30),
            (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30),
        )
    }
}

/// Q4_K {d: f16, dmin: f16, scales[12], qs[128]}: 8 sub-blocks of 32; sub-block 2c + n is
/// nibble n of qs[32c .. 32c + 32]; w = (d·scale)·q − dmin·min.
fn q4_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, qs) = (&b[4..16], &b[16..144]);
    for (j, o) in out.chunks_exact_mut(32).enumerate() {
        let (s, m) = k_scale_min(sc, j);
        let (ds, dm) = (d * s as f32, dmin * m as f32);
        let (c, shift) = (j / 2, 4 * (j % 2));
        for (l, o) in o.iter_mut().enumerate() {
            *o = ds * ((qs[32 * c + l] >> shift) & 0xF) as f32 - dm;
        }
    }
}

/// Q5_K {d: f16, dmin: f16, scales[12], qh[32], qs[128]}: as Q4_K, with the 5th bit of element
/// l of sub-block j in bit j of qh[l].
fn q5_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for (j, o) in out.chunks_exact_mut(32).enumerate() {
        let (s, m) = k_scale_min(sc, j);
        let (ds, dm) = (d * s as f32, dmin * m as f32);
        let (c, shift) = (j / 2, 4 * (j % 2));
        for (l, o) in o.iter_mut().enumerate() {
            let q = ((qs[32 * c + l] >> shift) & 0xF) | ((qh[l] >> j) & 1) << 4;
            *o = ds * q as f32 - dm;
        }
    }
}

/// Q6_K {ql[128], qh[64], scales: i8[16], d: f16}: in each half h of 128 elements, element
/// 32s + l (l < 32) has low nibble (s / 2) of ql[64h + 32(s % 2) + l] and high 2 bits at 2s of
/// qh[32h + l]; w = (d·scale)·(q − 32) per sub-block of 16.
fn q6_k(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 208);
    let mut scale = [0f32; 16];
    for (s, &c) in scale.iter_mut().zip(&b[192..208]) {
        *s = d * c as i8 as f32;
    }
    for (h, o) in out.chunks_exact_mut(128).enumerate() {
        let (ql, qh) = (&b[64 * h..][..64], &b[128 + 32 * h..][..32]);
        for (s, o) in o.chunks_exact_mut(32).enumerate() {
            let (ql, low_shift) = (&ql[32 * (s % 2)..][..32], 4 * (s / 2));
            for (l, o) in o.iter_mut().enumerate() {
                let q = ((ql[l] >> low_shift) & 0xF) | ((qh[l] >> (2 * s)) & 3) << 4;
                *o = scale[8 * h + 2 * s + l / 16] * (q as i32 - 32) as f32;
            }
        }
    }
}

/// Q8_K {d: f32, qs: i8[256], bsums: i16[16] (sums for dot products)}: w = d·q.
fn q8_k(b: &[u8], out: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (o, &q) in out.iter_mut().zip(&b[4..260]) {
        *o = d * q as i8 as f32;
    }
}

/// MXFP4 {e: E8M0, qs[16]}: element j in the low nibble of qs[j], j+16 in the high.
/// ggml's code table holds integers, so code 8 (−0) decodes to +0: adding +0 does that.
fn mxfp4(b: &[u8], out: &mut [f32]) {
    let s = e8m0_to_f32(b[0]);
    for (j, &q) in b[1..17].iter().enumerate() {
        out[j] = E2M1[(q & 0xF) as usize] * s + 0.0;
        out[j + 16] = E2M1[(q >> 4) as usize] * s + 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_block_by_hand() {
        let mut b = [0u8; 18];
        b[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        b[2] = 0xF0; // element 0 → q 0 (−8), element 16 → q 15 (+7)
        let mut out = [0f32; 32];
        assert!(dequant_row(DType::Q4_0, &b, &mut out));
        assert_eq!((out[0], out[16], out[1]), (-4.0, 3.5, -4.0));
    }

    #[test]
    fn mxfp4_nibble_order() {
        let mut b = [0u8; 17];
        b[0] = 128; // scale 2
        b[1] = 0x72; // element 0 → code 2 (1.0), element 16 → code 7 (6.0)
        let mut out = [0f32; 32];
        assert!(dequant_row(DType::MXFP4, &b, &mut out));
        assert_eq!((out[0], out[16], out[1]), (2.0, 12.0, 0.0));
    }

    #[test]
    fn plain_types_are_not_blocks() {
        assert!(!dequant_row(DType::F32, &[0; 4], &mut [0f32; 1]));
    }
}
