//! Stored weight blocks unpacked to small integers: each block type writes its values as i8
//! with one scale (and, for types with an offset, one min) per 16 values, so that
//! `w = sc · q + mn`. The integer products then run the same way for every type.
//!
//! The layouts mirror the reference decoders in `minerva_formats::quant`; the kernel tests
//! check every type against them.

use minerva_formats::quant::ggml::k_scale_min;
use minerva_formats::quant::mlx::scalar_at;
use minerva_formats::quant::mxfp4::e8m0_to_f32;
use minerva_formats::DType;

/// One block's values as `w = sc[i / 16] · q[i] + mn[i / 16]`.
pub struct Unpacked {
    pub q: [i8; 256],
    pub sc: [f32; 16],
    pub mn: [f32; 16],
}

impl Unpacked {
    pub fn new() -> Unpacked {
        Unpacked {
            q: [0; 256],
            sc: [0.0; 16],
            mn: [0.0; 16],
        }
    }
}

/// Where one weight row's bytes are: the packed values, and for MLX and gpt-oss packs the
/// row's scales (and biases) in their own buffers.
#[derive(Clone, Copy)]
pub struct RowSrc<'a> {
    pub w: &'a [u8],
    pub scales: &'a [u8],
    pub biases: &'a [u8],
    pub scale_dtype: DType,
    pub bits: u8,
    pub group: usize,
}

/// A stored block type: how many values a block holds, whether it has mins, and how to
/// unpack block `b` of a row: its scales (and mins), and its values.
pub trait Block {
    const ELEMS: usize;
    const HAS_MIN: bool;
    /// Values are never negative (so products need no sign trick; all are ≤ 127).
    const UNSIGNED: bool = false;
    /// Scales change every 16 values, not every 32.
    const SCALE16: bool = false;
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked);
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]);

    /// For blocks of 32 with one scale: (scale, min) without going through `Unpacked`.
    #[inline(always)]
    fn scale_min(src: &RowSrc, b: usize) -> (f32, f32) {
        let mut u = Unpacked::new();
        Self::scales(src, b, &mut u);
        (u.sc[0], u.mn[0])
    }

    /// The values as AVX2 registers of 32, for the types that have a vector unpacker; the
    /// others unpack as above and load.
    ///
    /// # Safety
    /// The processor has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        super::x86::values_via_bytes::<Self>(src, b, w)
    }
}

/// An f16 scale as f32: exact for every finite f16 (normals and subnormals alike are
/// rescaled by 2^112); infinities and NaNs, which no real block holds, come out large and
/// finite. Cheaper than a checked conversion in the inner loop.
#[inline(always)]
pub fn f16_at(b: &[u8], at: usize) -> f32 {
    let h = u16::from_le_bytes([b[at], b[at + 1]]) as u32;
    let v = f32::from_bits((h & 0x7FFF) << 13) * f32::from_bits(0x7780_0000);
    f32::from_bits(v.to_bits() | (h & 0x8000) << 16)
}

/// Sets sub-blocks `first..first + n` (of 16 values) to one scale and min.
#[inline(always)]
fn set16(u: &mut Unpacked, first: usize, n: usize, sc: f32, mn: f32) {
    u.sc[first..first + n].fill(sc);
    u.mn[first..first + n].fill(mn);
}

/// Splits 16 bytes into 32 nibbles: element j from the low nibble of byte j, j + 16 from the
/// high one (the ggml order), each shifted by `off`.
#[inline(always)]
fn nibbles_split(qs: &[u8], off: i8, q: &mut [i8]) {
    for (j, &v) in qs[..16].iter().enumerate() {
        q[j] = (v & 0xF) as i8 - off;
        q[j + 16] = (v >> 4) as i8 - off;
    }
}

/// Splits 16 bytes into 32 values in pair order: element 2j low, 2j + 1 high (Hugging Face
/// and MLX packs), each through `table`.
#[inline(always)]
fn nibbles_pairs(qs: &[u8], q: &mut [i8], table: &[i8; 16]) {
    for (j, &v) in qs[..16].iter().enumerate() {
        q[2 * j] = table[(v & 0xF) as usize];
        q[2 * j + 1] = table[(v >> 4) as usize];
    }
}

/// The bytes of block `b` of a row of `size`-byte blocks.
#[inline(always)]
pub fn block<'a>(src: &RowSrc<'a>, b: usize, size: usize) -> &'a [u8] {
    &src.w[b * size..(b + 1) * size]
}

/// The Q5 values: bit j of `qh` is the 5th bit of element j.
#[inline(always)]
fn q5_values(qs: &[u8], qh: u32, off: i8, q: &mut [i8]) {
    for (j, &v) in qs[..16].iter().enumerate() {
        let (h0, h1) = (((qh >> j) & 1) as u8, ((qh >> (j + 16)) & 1) as u8);
        q[j] = ((v & 0xF) | h0 << 4) as i8 - off;
        q[j + 16] = ((v >> 4) | h1 << 4) as i8 - off;
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub struct Q4_0;
impl Block for Q4_0 {
    const ELEMS: usize = 32;
    const HAS_MIN: bool = true;
    const UNSIGNED: bool = true;
    #[inline(always)]
    fn scale_min(src: &RowSrc, b: usize) -> (f32, f32) {
        let d = f16_at(block(src, b, 18), 0);
        (d, -8.0 * d)
    }
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let (sc, mn) = Self::scale_min(src, b);
        set16(u, 0, 2, sc, mn);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        nibbles_split(&block(src, b, 18)[2..], 0, q);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        super::x86::q4_0(block(src, b, 18), w)
    }
}

pub struct Q4_1;
impl Block for Q4_1 {
    const ELEMS: usize = 32;
    const HAS_MIN: bool = true;
    const UNSIGNED: bool = true;
    #[inline(always)]
    fn scale_min(src: &RowSrc, b: usize) -> (f32, f32) {
        let blk = block(src, b, 20);
        (f16_at(blk, 0), f16_at(blk, 2))
    }
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let (sc, mn) = Self::scale_min(src, b);
        set16(u, 0, 2, sc, mn);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        nibbles_split(&block(src, b, 20)[4..], 0, q);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        super::x86::q4_1(block(src, b, 20), w)
    }
}

pub struct Q5_0;
impl Block for Q5_0 {
    const ELEMS: usize = 32;
    const HAS_MIN: bool = true;
    const UNSIGNED: bool = true;
    #[inline(always)]
    fn scale_min(src: &RowSrc, b: usize) -> (f32, f32) {
        let d = f16_at(block(src, b, 22), 0);
        (d, -16.0 * d)
    }
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let (sc, mn) = Self::scale_min(src, b);
        set16(u, 0, 2, sc, mn);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        let blk = block(src, b, 22);
        q5_values(&blk[6..], u32_at(blk, 2), 0, q);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        let blk = block(src, b, 22);
        super::x86::q5(&blk[6..], u32_at(blk, 2), 0, w)
    }
}

pub struct Q5_1;
impl Block for Q5_1 {
    const ELEMS: usize = 32;
    const HAS_MIN: bool = true;
    const UNSIGNED: bool = true;
    #[inline(always)]
    fn scale_min(src: &RowSrc, b: usize) -> (f32, f32) {
        let blk = block(src, b, 24);
        (f16_at(blk, 0), f16_at(blk, 2))
    }
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let (sc, mn) = Self::scale_min(src, b);
        set16(u, 0, 2, sc, mn);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        let blk = block(src, b, 24);
        q5_values(&blk[8..], u32_at(blk, 4), 0, q);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        let blk = block(src, b, 24);
        super::x86::q5(&blk[8..], u32_at(blk, 4), 0, w)
    }
}

pub struct Q8_0;
impl Block for Q8_0 {
    const ELEMS: usize = 32;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn scale_min(src: &RowSrc, b: usize) -> (f32, f32) {
        (f16_at(block(src, b, 34), 0), 0.0)
    }
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let (sc, mn) = Self::scale_min(src, b);
        set16(u, 0, 2, sc, mn);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        for (q, &v) in q[..32].iter_mut().zip(&block(src, b, 34)[2..]) {
            *q = v as i8;
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        w[0] = super::x86::load32(&block(src, b, 34)[2..]);
    }
}

pub struct Q2K;
impl Block for Q2K {
    const ELEMS: usize = 256;
    const HAS_MIN: bool = true;
    const UNSIGNED: bool = true;
    const SCALE16: bool = true;
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let blk = block(src, b, 84);
        let (d, dmin) = (f16_at(blk, 80), f16_at(blk, 82));
        for (i, &s) in blk[..16].iter().enumerate() {
            u.sc[i] = d * (s & 0xF) as f32;
            u.mn[i] = -dmin * (s >> 4) as f32;
        }
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        let qs = &block(src, b, 84)[16..80];
        for i in 0..16 {
            let j = i / 2;
            let (qs, shift) = (&qs[32 * (j / 4) + 16 * (i % 2)..][..16], 2 * (j % 4));
            for (q, &v) in q[16 * i..16 * i + 16].iter_mut().zip(qs) {
                *q = ((v >> shift) & 3) as i8;
            }
        }
    }
}

pub struct Q3K;
impl Block for Q3K {
    const ELEMS: usize = 256;
    const HAS_MIN: bool = false;
    const SCALE16: bool = true;
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let blk = block(src, b, 110);
        let (sc, d) = (&blk[96..108], f16_at(blk, 108));
        for (j, s) in u.sc.iter_mut().enumerate() {
            let low = (sc[j % 8] >> (4 * (j / 8))) & 0xF;
            let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
            *s = d * ((low | high << 4) as i32 - 32) as f32;
        }
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        let blk = block(src, b, 110);
        let (hmask, qs) = (&blk[0..32], &blk[32..96]);
        for j in 0..8 {
            let (qs, shift) = (&qs[32 * (j / 4)..][..32], 2 * (j % 4));
            for l in 0..32 {
                let low = ((qs[l] >> shift) & 3) as i8;
                let high_clear = (hmask[l] >> j) & 1 == 0;
                q[32 * j + l] = low - if high_clear { 4 } else { 0 };
            }
        }
    }
}

/// Q4_K and Q5_K scales: d and dmin, then eight packed (scale, min) pairs.
#[inline(always)]
fn k_scales(blk: &[u8], u: &mut Unpacked) {
    let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
    for j in 0..8 {
        let (s, m) = k_scale_min(&blk[4..16], j);
        set16(u, 2 * j, 2, d * s as f32, -dmin * m as f32);
    }
}

pub struct Q4K;
impl Block for Q4K {
    const ELEMS: usize = 256;
    const HAS_MIN: bool = true;
    const UNSIGNED: bool = true;
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        k_scales(block(src, b, 144), u);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        let qs = &block(src, b, 144)[16..];
        for c in 0..4 {
            let q = &mut q[64 * c..64 * c + 64];
            for (l, &v) in qs[32 * c..32 * c + 32].iter().enumerate() {
                q[l] = (v & 0xF) as i8;
                q[l + 32] = (v >> 4) as i8;
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        super::x86::q4_k(&block(src, b, 144)[16..], w)
    }
}

pub struct Q5K;
impl Block for Q5K {
    const ELEMS: usize = 256;
    const HAS_MIN: bool = true;
    const UNSIGNED: bool = true;
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        k_scales(block(src, b, 176), u);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        let blk = block(src, b, 176);
        let (qh, qs) = (&blk[16..48], &blk[48..176]);
        for j in 0..8 {
            let (c, shift) = (j / 2, 4 * (j % 2));
            for l in 0..32 {
                let v = ((qs[32 * c + l] >> shift) & 0xF) | ((qh[l] >> j) & 1) << 4;
                q[32 * j + l] = v as i8;
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        let blk = block(src, b, 176);
        super::x86::q5_k(&blk[16..48], &blk[48..176], w)
    }
}

pub struct Q6K;
impl Block for Q6K {
    const ELEMS: usize = 256;
    const HAS_MIN: bool = true;
    const UNSIGNED: bool = true;
    const SCALE16: bool = true;
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let blk = block(src, b, 210);
        let d = f16_at(blk, 208);
        for ((s, m), &c) in u.sc.iter_mut().zip(&mut u.mn).zip(&blk[192..208]) {
            *s = d * c as i8 as f32;
            *m = -32.0 * *s;
        }
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        let blk = block(src, b, 210);
        for h in 0..2 {
            let (ql, qh) = (&blk[64 * h..][..64], &blk[128 + 32 * h..][..32]);
            for s in 0..4 {
                let (ql, low_shift) = (&ql[32 * (s % 2)..][..32], 4 * (s / 2));
                let q = &mut q[128 * h + 32 * s..][..32];
                for l in 0..32 {
                    let v = ((ql[l] >> low_shift) & 0xF) | ((qh[l] >> (2 * s)) & 3) << 4;
                    q[l] = v as i8;
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        super::x86::q6_k(block(src, b, 210), w)
    }
}

/// E2M1 codes doubled, so every value is an integer: 0.5 → 1, …, 6 → 12 (the scale is halved).
pub const E2M1_X2: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

pub struct Mxfp4;
impl Block for Mxfp4 {
    const ELEMS: usize = 32;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn scale_min(src: &RowSrc, b: usize) -> (f32, f32) {
        (e8m0_to_f32(block(src, b, 17)[0]) * 0.5, 0.0)
    }
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let (sc, mn) = Self::scale_min(src, b);
        set16(u, 0, 2, sc, mn);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        for (j, &v) in block(src, b, 17)[1..].iter().enumerate() {
            q[j] = E2M1_X2[(v & 0xF) as usize];
            q[j + 16] = E2M1_X2[(v >> 4) as usize];
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        super::x86::mxfp4(&block(src, b, 17)[1..], w)
    }
}

/// MLX mxfp4 and gpt-oss Hugging Face blocks: pairs order, scales in their own buffer.
pub struct PairsMxfp4;
impl Block for PairsMxfp4 {
    const ELEMS: usize = 32;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn scale_min(src: &RowSrc, b: usize) -> (f32, f32) {
        (e8m0_to_f32(src.scales[b]) * 0.5, 0.0)
    }
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let (sc, mn) = Self::scale_min(src, b);
        set16(u, 0, 2, sc, mn);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        nibbles_pairs(block(src, b, 16), q, &E2M1_X2);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        super::x86::pairs_mxfp4(block(src, b, 16), w)
    }
}

/// MLX affine packs of 2–8 bits in blocks of 32 values (groups are 32 or more, so a block
/// lies in one group). Values are a little-endian bit stream; 8-bit values are stored as
/// q − 128 with the bias raised by 128 · scale, so they fit an i8.
pub struct MlxAffine;
impl Block for MlxAffine {
    const ELEMS: usize = 32;
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn scale_min(src: &RowSrc, b: usize) -> (f32, f32) {
        let g = b * 32 / src.group.max(1);
        let scale = scalar_at(src.scale_dtype, src.scales, g);
        let bias = scalar_at(src.scale_dtype, src.biases, g);
        // 8-bit values are stored as q − 128 (see `values`).
        let shift = if src.bits == 8 { 128.0 * scale } else { 0.0 };
        (scale, bias + shift)
    }
    #[inline(always)]
    fn scales(src: &RowSrc, b: usize, u: &mut Unpacked) {
        let (sc, mn) = Self::scale_min(src, b);
        set16(u, 0, 2, sc, mn);
    }
    #[inline(always)]
    fn values(src: &RowSrc, b: usize, q: &mut [i8; 256]) {
        let bits = src.bits as usize;
        let bytes = block(src, b, 4 * bits);
        match bits {
            4 => {
                for (j, &v) in bytes.iter().enumerate() {
                    q[2 * j] = (v & 0xF) as i8;
                    q[2 * j + 1] = (v >> 4) as i8;
                }
            }
            8 => {
                for (q, &v) in q[..32].iter_mut().zip(bytes) {
                    *q = (v ^ 0x80) as i8;
                }
            }
            _ => {
                let mask = (1u64 << bits) - 1;
                let (mut acc, mut held, mut next) = (0u64, 0usize, bytes.iter());
                for q in &mut q[..32] {
                    while held < bits {
                        acc |= (*next.next().unwrap_or(&0) as u64) << held;
                        held += 8;
                    }
                    *q = (acc & mask) as i8;
                    acc >>= bits;
                    held -= bits;
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn values_avx2(src: &RowSrc, b: usize, w: &mut [std::arch::x86_64::__m256i; 8]) {
        match src.bits {
            4 => super::x86::mlx4(block(src, b, 16), w),
            8 => super::x86::mlx8(block(src, b, 32), w),
            _ => super::x86::values_via_bytes::<Self>(src, b, w),
        }
    }
}
