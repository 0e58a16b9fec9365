//! ggml's 32-value block quants (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and GGUF MXFP4, one block at a
//! time. Q8_0 and Q4_0 round exactly like llama.cpp's reference quantizer so that the bytes match.

use half::f16;

fn put_f16(dst: &mut [u8], v: f32) {
    dst.copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// The value of largest magnitude, with its sign (the first one on ties).
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// Q8_0: f16 scale amax/127, 32 signed bytes rounded half away from zero.
pub fn q8_0(x: &[f32], out: &mut [u8]) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(&mut out[..2], d);
    for (o, &v) in out[2..34].iter_mut().zip(x) {
        *o = super::round_away(v * id) as i8 as u8;
    }
}

/// Q4_0: the scale maps the signed extreme to −8; codes 0..15 around 8.
pub fn q4_0(x: &[f32], out: &mut [u8]) {
    let (_, max) = signed_absmax(x);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(&mut out[..2], d);
    let code = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    for j in 0..16 {
        out[2 + j] = code(x[j]) | (code(x[j + 16]) << 4);
    }
}

/// Q4_1: scale and minimum, codes 0..15.
pub fn q4_1(x: &[f32], out: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(&mut out[..2], d);
    put_f16(&mut out[2..4], min);
    let code = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    for j in 0..16 {
        out[4 + j] = code(x[j]) | (code(x[j + 16]) << 4);
    }
}

/// Packs 5-bit codes: low nibbles as in Q4_0, the fifth bits in a little-endian u32.
fn pack5(codes: &[u8; 32], qh: &mut [u8], qs: &mut [u8]) {
    let mut high = 0u32;
    for j in 0..16 {
        let (a, b) = (codes[j], codes[j + 16]);
        qs[j] = (a & 0x0F) | ((b & 0x0F) << 4);
        high |= (((a & 0x10) >> 4) as u32) << j;
        high |= (((b & 0x10) >> 4) as u32) << (j + 16);
    }
    qh.copy_from_slice(&high.to_le_bytes());
}

/// Q5_0: the signed extreme maps to −16; codes 0..31 around 16.
pub fn q5_0(x: &[f32], out: &mut [u8]) {
    let (_, max) = signed_absmax(x);
    let d = max / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(&mut out[..2], d);
    let mut codes = [0u8; 32];
    for (c, &v) in codes.iter_mut().zip(x) {
        *c = ((v * id + 16.5) as i8).min(31) as u8;
    }
    let (qh, qs) = out[2..22].split_at_mut(4);
    pack5(&codes, qh, qs);
}

/// Q5_1: scale and minimum, codes 0..31.
pub fn q5_1(x: &[f32], out: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(&mut out[..2], d);
    put_f16(&mut out[2..4], min);
    let mut codes = [0u8; 32];
    for (c, &v) in codes.iter_mut().zip(x) {
        *c = (((v - min) * id + 0.5) as u8).min(31);
    }
    let (qh, qs) = out[4..24].split_at_mut(4);
    pack5(&codes, qh, qs);
}

/// E2M1 magnitudes doubled, so that a half-step scale keeps them integral.
const E2M1_X2: [f32; 8] = [0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0];

/// Shared exponent of an MXFP4 block: the largest value lands in E2M1's top binade (4..6).
pub fn mxfp4_exponent(x: &[f32]) -> u8 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    if amax > 0.0 {
        (amax.log2().floor() - 2.0 + 127.0).clamp(0.0, 254.0) as u8
    } else {
        0
    }
}

/// Nearest E2M1 code of `v` for a block exponent `e`. Ties go to the smaller magnitude and
/// values that round to zero get the +0 code, as llama.cpp's search picks the first best code.
pub fn mxfp4_code(v: f32, e: u8) -> u8 {
    let half = match e {
        0 => f32::from_bits(0x0010_0000),
        1 => f32::from_bits(0x0020_0000),
        _ => f32::from_bits(((e as u32) - 1) << 23),
    };
    let a = v.abs();
    // Midpoints between neighbouring doubled magnitudes, scaled: exact, as the scale is 2^k.
    let mut idx = 0u8;
    for k in 0..7 {
        if a > (E2M1_X2[k] + E2M1_X2[k + 1]) * 0.5 * half {
            idx = k as u8 + 1;
        }
    }
    if idx == 0 {
        0
    } else if v < 0.0 {
        idx | 8
    } else {
        idx
    }
}

/// The better of the two exponents that can represent a block's largest value (llama.cpp's,
/// which may clip it to 6·scale, and the next one up, which never clips): the one with the
/// smaller squared error.
pub fn mxfp4_best_exponent(x: &[f32]) -> u8 {
    let e = mxfp4_exponent(x);
    if e >= 254 || x.iter().all(|v| *v == 0.0) {
        return e;
    }
    let err = |e: u8| -> f32 {
        let scale = crate::quant::mxfp4::e8m0_to_f32(e);
        x.iter()
            .map(|&v| {
                let c = mxfp4_code(v, e);
                let q = crate::quant::mxfp4::E2M1[c as usize] * scale;
                (q - v) * (q - v)
            })
            .sum()
    };
    if err(e + 1) < err(e) {
        e + 1
    } else {
        e
    }
}

/// GGUF MXFP4: exponent byte, then element j in the low nibble and j+16 in the high nibble.
pub fn mxfp4(x: &[f32], out: &mut [u8]) {
    let e = mxfp4_exponent(x);
    out[0] = e;
    for j in 0..16 {
        out[1 + j] = mxfp4_code(x[j], e) | (mxfp4_code(x[j + 16], e) << 4);
    }
}
