//! AVX2 lanes and block unpackers. Products: `maddubs` on |w| and sign(x, w) (on w and x
//! directly where w is never negative), pairs summed by `madd` — or both in one `dpbusd` where
//! the processor has AVX-512 VNNI — so lanes 0–3 hold the first 16 values' sums and lanes 4–7
//! the rest, scaled by s0 and s1. Unpackers build the 32 values of a chunk in a register (nibbles split with
//! masks and shifts, 5th and 6th bits merged with byte masks, FP4 codes looked up with
//! `pshufb`): values written byte by byte and read back as a vector stall the load.

use super::blocks::{Block, RowSrc, Unpacked, E2M1_X2};
use super::dot::{rows_loop, Lanes};
use super::{QuantX, Rows};
use std::arch::x86_64::*;

/// |w| and sign(x, w): the unsigned × signed operands the byte products take.
#[inline(always)]
unsafe fn operands<B: Block>(w: __m256i, x: __m256i) -> (__m256i, __m256i) {
    if B::UNSIGNED {
        (w, x)
    } else {
        (_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
    }
}

/// The scales of a chunk's two halves as one register.
#[inline(always)]
unsafe fn scales<B: Block>(s0: f32, s1: f32) -> __m256 {
    if B::SCALE16 {
        _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(s0)), _mm_set1_ps(s1), 1)
    } else {
        _mm256_set1_ps(s0)
    }
}

/// The sum of the eight lanes.
#[inline(always)]
pub(super) unsafe fn hsum(acc: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

/// [`super::quantize_row`] in AVX2 lanes, with the same operations in the same order: the
/// same bits.
///
/// # Safety
/// The processor has AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_row(
    x: &[f32],
    unit: usize,
    q: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
    sums: &mut [i32],
) {
    let magic = _mm256_set1_ps(super::MAGIC);
    // SAFETY (of the closure's call): this function's caller guarantees AVX2.
    super::unit_amax(x, unit, d, |xb| unsafe { block_amax(xb) });
    for (xb, qb, d, s, halves) in super::row_blocks(x, q, d, s, sums) {
        let p = xb.as_ptr();
        let v = [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ];
        let amax = *d;
        *d = amax / 127.0;
        let inv = _mm256_set1_ps(if amax > 0.0 { 127.0 / amax } else { 0.0 });
        let mut i = [_mm256_setzero_si256(); 4];
        for (i, &v) in i.iter_mut().zip(&v) {
            let r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(v, inv), magic), magic);
            // Clamped as the packing below saturates, so that the sums are those of the
            // stored values even where x holds a NaN or an infinity (which convert to
            // i32::MIN).
            let c = _mm256_min_epi32(_mm256_cvttps_epi32(r), _mm256_set1_epi32(127));
            *i = _mm256_max_epi32(c, _mm256_set1_epi32(-128));
        }
        // Packing goes by 128-bit halves: put the four-byte groups back in order.
        let packed = _mm256_packs_epi16(
            _mm256_packs_epi32(i[0], i[1]),
            _mm256_packs_epi32(i[2], i[3]),
        );
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let bytes = _mm256_permutevar8x32_epi32(packed, order);
        _mm256_storeu_si256(qb.as_mut_ptr() as *mut __m256i, bytes);
        halves[0] = lane_sum(_mm256_add_epi32(i[0], i[1]));
        halves[1] = lane_sum(_mm256_add_epi32(i[2], i[3]));
        s[0] = *d * halves[0] as f32;
        s[1] = *d * halves[1] as f32;
    }
}

/// The largest magnitude of a block of 32 values.
///
/// # Safety
/// The processor has AVX2; `xb` holds 32 values.
#[target_feature(enable = "avx2")]
unsafe fn block_amax(xb: &[f32]) -> f32 {
    debug_assert!(xb.len() >= 32);
    let p = xb.as_ptr();
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let a = |i: usize| _mm256_and_ps(_mm256_loadu_ps(p.add(8 * i)), abs);
    let m = _mm256_max_ps(_mm256_max_ps(a(0), a(1)), _mm256_max_ps(a(2), a(3)));
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)))
}

/// The sum of the eight lanes.
#[inline(always)]
unsafe fn lane_sum(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
}

pub(super) struct Avx2;

impl Lanes for Avx2 {
    type W = __m256i;
    type Acc = __m256;
    #[inline(always)]
    fn zero_w() -> __m256i {
        // SAFETY: AVX is implied by the AVX2 entry point that inlines this.
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    fn zero() -> __m256 {
        // SAFETY: as above.
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn unpack<B: Block>(src: &RowSrc, b: usize, _: &mut Unpacked, w: &mut [__m256i; 8]) {
        B::values_avx2(src, b, w)
    }
    #[inline(always)]
    unsafe fn chunk<B: Block>(acc: &mut __m256, w: __m256i, x: *const i8, s0: f32, s1: f32) {
        let (a, b) = operands::<B>(w, _mm256_loadu_si256(x as *const __m256i));
        // |w| ≤ 128 and |x| ≤ 127, so a pair of products (≤ 32,512) fits the i16 lanes.
        let p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scales::<B>(s0, s1), *acc);
    }
    #[inline(always)]
    unsafe fn sum(acc: __m256) -> f32 {
        hsum(acc)
    }
}

/// The same lanes with the byte products summed by one `dpbusd` (AVX-512 VNNI on 256 bits).
pub(super) struct Vnni;

impl Lanes for Vnni {
    type W = __m256i;
    type Acc = __m256;
    #[inline(always)]
    fn zero_w() -> __m256i {
        Avx2::zero_w()
    }
    #[inline(always)]
    fn zero() -> __m256 {
        Avx2::zero()
    }
    #[inline(always)]
    unsafe fn unpack<B: Block>(src: &RowSrc, b: usize, u: &mut Unpacked, w: &mut [__m256i; 8]) {
        Avx2::unpack::<B>(src, b, u, w)
    }
    #[inline(always)]
    unsafe fn chunk<B: Block>(acc: &mut __m256, w: __m256i, x: *const i8, s0: f32, s1: f32) {
        let (a, b) = operands::<B>(w, _mm256_loadu_si256(x as *const __m256i));
        let p32 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scales::<B>(s0, s1), *acc);
    }
    #[inline(always)]
    unsafe fn sum(acc: __m256) -> f32 {
        hsum(acc)
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn entry<B: Block>(rows: &Rows, js: std::ops::Range<usize>, x: &QuantX, out: &mut [f32]) {
    rows_loop::<B, Avx2>(rows, js, x, out)
}

#[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
unsafe fn entry_vnni<B: Block>(
    rows: &Rows,
    js: std::ops::Range<usize>,
    x: &QuantX,
    out: &mut [f32],
) {
    rows_loop::<B, Vnni>(rows, js, x, out)
}

/// AVX2 products for block type `B`; `super::kernel` hands it out only where `has_avx2()`.
pub fn avx2<B: Block>(rows: &Rows, js: std::ops::Range<usize>, x: &QuantX, out: &mut [f32]) {
    debug_assert!(has_avx2());
    // SAFETY: only reachable when the processor has AVX2 and FMA (see `super::pick`).
    unsafe { entry::<B>(rows, js, x, out) }
}

/// VNNI products for block type `B`; handed out only where `has_vnni()`.
pub fn vnni<B: Block>(rows: &Rows, js: std::ops::Range<usize>, x: &QuantX, out: &mut [f32]) {
    debug_assert!(has_vnni());
    // SAFETY: only reachable when the processor has AVX2, FMA and AVX-512 VNNI with VL.
    unsafe { entry_vnni::<B>(rows, js, x, out) }
}

pub fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

pub fn has_vnni() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// The types without a vector unpacker: bytes, then loads.
#[inline(always)]
pub unsafe fn values_via_bytes<B: Block + ?Sized>(src: &RowSrc, b: usize, w: &mut [__m256i; 8]) {
    let mut q = [0i8; 256];
    B::values(src, b, &mut q);
    for (c, w) in w[..B::ELEMS / 32].iter_mut().enumerate() {
        *w = _mm256_loadu_si256(q.as_ptr().add(32 * c) as *const __m256i);
    }
}

#[inline(always)]
pub unsafe fn load32(b: &[u8]) -> __m256i {
    debug_assert!(b.len() >= 32);
    _mm256_loadu_si256(b.as_ptr() as *const __m256i)
}

#[inline(always)]
unsafe fn low_nibbles(v: __m256i) -> __m256i {
    _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
}

#[inline(always)]
unsafe fn high_nibbles(v: __m256i) -> __m256i {
    _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F))
}

/// 16 bytes → 32 nibbles, ggml order: element j low nibble of byte j, j + 16 its high one.
#[inline(always)]
pub(super) unsafe fn split16(b: &[u8]) -> __m256i {
    debug_assert!(b.len() >= 16);
    let v = _mm_loadu_si128(b.as_ptr() as *const __m128i);
    let m = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(v, m);
    let hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    _mm256_set_m128i(hi, lo)
}

/// 16 bytes → 32 nibbles, pair order: element 2j low nibble of byte j, 2j + 1 its high one.
#[inline(always)]
unsafe fn pairs16(b: &[u8]) -> __m256i {
    debug_assert!(b.len() >= 16);
    let v = _mm_loadu_si128(b.as_ptr() as *const __m128i);
    let m = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(v, m);
    let hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi))
}

/// Byte j is 0xFF where bit j of `bits` is set.
#[inline(always)]
unsafe fn bit_bytes(bits: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    // Every bit but bit j % 8 set in byte j: all ones exactly where bit j was.
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64);
    _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1))
}

/// FP4 codes (nibbles) → doubled E2M1 values.
#[inline(always)]
unsafe fn fp4(codes: __m256i) -> __m256i {
    let table = _mm_loadu_si128(E2M1_X2.as_ptr() as *const __m128i);
    _mm256_shuffle_epi8(_mm256_set_m128i(table, table), codes)
}

#[inline(always)]
pub unsafe fn q4_0(blk: &[u8], w: &mut [__m256i; 8]) {
    w[0] = split16(&blk[2..]);
}

#[inline(always)]
pub unsafe fn q4_1(blk: &[u8], w: &mut [__m256i; 8]) {
    w[0] = split16(&blk[4..]);
}

#[inline(always)]
pub unsafe fn q5(qs: &[u8], qh: u32, off: i8, w: &mut [__m256i; 8]) {
    let high = _mm256_and_si256(bit_bytes(qh), _mm256_set1_epi8(0x10));
    w[0] = _mm256_sub_epi8(_mm256_or_si256(split16(qs), high), _mm256_set1_epi8(off));
}

#[inline(always)]
pub unsafe fn q4_k(qs: &[u8], w: &mut [__m256i; 8]) {
    for c in 0..4 {
        let v = load32(&qs[32 * c..]);
        w[2 * c] = low_nibbles(v);
        w[2 * c + 1] = high_nibbles(v);
    }
}

#[inline(always)]
pub unsafe fn q5_k(qh: &[u8], qs: &[u8], w: &mut [__m256i; 8]) {
    let (h, one) = (load32(qh), _mm256_set1_epi8(1));
    for c in 0..4 {
        let v = load32(&qs[32 * c..]);
        for (k, nib) in [low_nibbles(v), high_nibbles(v)].into_iter().enumerate() {
            let j = 2 * c + k;
            let bit = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j as i32)), one);
            w[j] = _mm256_or_si256(nib, _mm256_slli_epi16(bit, 4));
        }
    }
}

#[inline(always)]
pub unsafe fn q6_k(blk: &[u8], w: &mut [__m256i; 8]) {
    let three = _mm256_set1_epi8(3);
    for h in 0..2 {
        let (ql0, ql1) = (load32(&blk[64 * h..]), load32(&blk[64 * h + 32..]));
        let qh = load32(&blk[128 + 32 * h..]);
        let low = [
            low_nibbles(ql0),
            low_nibbles(ql1),
            high_nibbles(ql0),
            high_nibbles(ql1),
        ];
        for (s, low) in low.into_iter().enumerate() {
            let top =
                _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s as i32)), three);
            w[4 * h + s] = _mm256_or_si256(low, _mm256_slli_epi16(top, 4));
        }
    }
}

#[inline(always)]
pub unsafe fn mxfp4(qs: &[u8], w: &mut [__m256i; 8]) {
    w[0] = fp4(split16(qs));
}

#[inline(always)]
pub unsafe fn pairs_mxfp4(qs: &[u8], w: &mut [__m256i; 8]) {
    w[0] = fp4(pairs16(qs));
}

#[inline(always)]
pub unsafe fn mlx4(qs: &[u8], w: &mut [__m256i; 8]) {
    w[0] = pairs16(qs);
}

#[inline(always)]
pub unsafe fn mlx8(qs: &[u8], w: &mut [__m256i; 8]) {
    w[0] = _mm256_xor_si256(load32(qs), _mm256_set1_epi8(-128));
}
