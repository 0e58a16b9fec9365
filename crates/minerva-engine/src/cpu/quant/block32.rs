//! Products over several weight rows or blocks at once, for the ggml block types of 32 values
//! with one scale (and min) each: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0. A row and a block at a time
//! spends most of its instructions on the float step (a scale decoded, broadcast, multiplied,
//! a min added) for every 32 values.
//!
//! - Eight rows at a time, for every token count. Each group's scales are decoded once for
//!   all the tokens of a chunk; its values are unpacked once per block for four tokens; each
//!   token's byte products end up summed by row in one register (a row per lane), and one
//!   float step scales all eight by their weight scales.
//! - Several tokens: the eight rows' values are turned once per block ([`transpose8`]) so
//!   that each token's products add up by row within the lanes. One token: each row's
//!   products are summed across the lanes ([`across`]), which costs less than the turn. Both
//!   give the same integers, so a token's products are the same bits alone or in a prompt.
//!
//! Every value is made unsigned, its offset folded into the min: Q4_0's `q − 8` is `q` with
//! the min `−8·d`, Q8_0's signed bytes are `q + 128` with the min `−128·d`. The min then
//! costs one multiply-add per eight rows against the activation block's `d·Σq`.

use super::blocks::{Block, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use super::dot::rows_loop;
use super::x86::{self, Avx2, Vnni};
use super::{QuantX, Rows};
use std::arch::x86_64::*;
use std::ops::Range;

/// Rows per pass.
pub(super) const R: usize = 8;
/// Tokens per pass, each with one accumulator for the eight rows (kernels whose `WIDE_PASS`
/// says so take twice as many).
const T: usize = 4;
/// Tokens whose activations stay in the caches while every group of rows passes over them.
const CHUNK: usize = 64;

/// A block type of 32 values with its scale (and min) as f16 at the block's start.
pub(super) trait Block32: Block {
    const BYTES: usize;
    /// Values reach past 127, where AVX2's byte products (pairs summed in i16) saturate.
    const WIDE: bool = false;
    /// Where the block's 16 bytes of nibbles start, for the types whose values are nibbles
    /// split in ggml's order (element j in the low nibble of byte j, j + 16 in its high one);
    /// 0 for the others. Two such rows unpack into one register pair: half the work.
    const NIBBLES_AT: usize = 0;
    /// Which row each lane of the summed products holds.
    const LANE_ROWS: [usize; R] = if Self::NIBBLES_AT > 0 {
        [0, 2, 4, 6, 1, 3, 5, 7]
    } else {
        [0, 1, 2, 3, 4, 5, 6, 7]
    };
    /// The block's 32 values, unsigned.
    ///
    /// # Safety
    /// `p` points at a whole block; the processor has AVX2.
    unsafe fn values32(p: *const u8) -> __m256i;
    /// The min as a multiple of the scale (Q4_0's −8), or None where the block stores its
    /// min as f16 after the scale.
    const OFFSET: Option<f32>;

    /// The min from the scale, or the stored one.
    #[inline(always)]
    unsafe fn min(d: __m256, stored: __m256) -> __m256 {
        match Self::OFFSET {
            Some(o) => _mm256_mul_ps(d, _mm256_set1_ps(o)),
            None => stored,
        }
    }

    /// Eight rows' scales and mins, of the blocks at `p + lanes[l]`.
    ///
    /// # Safety
    /// Each `p + lanes[l]` points at a whole block; the processor has AVX2 and F16C.
    #[inline(always)]
    unsafe fn scales8(p: *const u8, lanes: &[isize; R]) -> (__m256, __m256) {
        let (d, m) = halves(gather(p, lanes));
        (d, Self::min(d, m))
    }
}

/// The 32-bit words at `p + lanes[l]`, one per lane. Loaded one by one and interleaved:
/// `vpgatherdd` took 15 % of one-token products.
#[inline(always)]
pub(super) unsafe fn gather(p: *const u8, lanes: &[isize; R]) -> __m256i {
    let low = four(
        word(p, lanes[0]),
        word(p, lanes[1]),
        word(p, lanes[2]),
        word(p, lanes[3]),
    );
    let high = four(
        word(p, lanes[4]),
        word(p, lanes[5]),
        word(p, lanes[6]),
        word(p, lanes[7]),
    );
    _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(low), high)
}

/// Lane 0 of each, in lanes 0–3.
#[inline(always)]
unsafe fn four(a: __m128i, b: __m128i, c: __m128i, d: __m128i) -> __m128i {
    _mm_unpacklo_epi64(_mm_unpacklo_epi32(a, b), _mm_unpacklo_epi32(c, d))
}

/// The 32-bit word at `p + o`, in lane 0.
#[inline(always)]
unsafe fn word(p: *const u8, o: isize) -> __m128i {
    _mm_cvtsi32_si128((p.offset(o) as *const i32).read_unaligned())
}

/// The two f16 halves of each 32-bit lane, as f32: (low halves, high halves).
#[inline(always)]
pub(super) unsafe fn halves(g: __m256i) -> (__m256, __m256) {
    // Low halves to the low 8 bytes of each 128-bit lane, high halves to the high 8 bytes.
    let order = _mm256_setr_epi8(
        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, //
        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
    );
    let v = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(g, order));
    (
        _mm256_cvtph_ps(_mm256_castsi256_si128(v)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(v)),
    )
}

#[inline(always)]
unsafe fn bytes<'a>(p: *const u8, n: usize) -> &'a [u8] {
    std::slice::from_raw_parts(p, n)
}

#[inline(always)]
unsafe fn q5_values(p: *const u8, qh_at: usize, qs_at: usize) -> __m256i {
    let qh = u32::from_le_bytes(*(p.add(qh_at) as *const [u8; 4]));
    let mut w = [_mm256_setzero_si256(); 8];
    x86::q5(bytes(p.add(qs_at), 16), qh, 0, &mut w);
    w[0]
}

impl Block32 for Q4_0 {
    const BYTES: usize = 18;
    const OFFSET: Option<f32> = Some(-8.0);
    const NIBBLES_AT: usize = 2;
    #[inline(always)]
    unsafe fn values32(p: *const u8) -> __m256i {
        x86::split16(bytes(p.add(2), 16))
    }
}

impl Block32 for Q4_1 {
    const BYTES: usize = 20;
    const OFFSET: Option<f32> = None;
    const NIBBLES_AT: usize = 4;
    #[inline(always)]
    unsafe fn values32(p: *const u8) -> __m256i {
        x86::split16(bytes(p.add(4), 16))
    }
}

impl Block32 for Q5_0 {
    const BYTES: usize = 22;
    const OFFSET: Option<f32> = Some(-16.0);
    #[inline(always)]
    unsafe fn values32(p: *const u8) -> __m256i {
        q5_values(p, 2, 6)
    }
}

impl Block32 for Q5_1 {
    const BYTES: usize = 24;
    const OFFSET: Option<f32> = None;
    #[inline(always)]
    unsafe fn values32(p: *const u8) -> __m256i {
        q5_values(p, 4, 8)
    }
}

impl Block32 for Q8_0 {
    const BYTES: usize = 34;
    const OFFSET: Option<f32> = Some(-128.0);
    const WIDE: bool = true;
    #[inline(always)]
    unsafe fn values32(p: *const u8) -> __m256i {
        _mm256_xor_si256(x86::load32(bytes(p.add(2), 32)), _mm256_set1_epi8(-128))
    }
}

/// Sums of unsigned × signed byte products, four to a 32-bit lane.
pub(super) trait Dot4 {
    /// Whether byte products are summed without saturating, so that unsigned values may
    /// reach 255 (VNNI's `vpdpbusd`; AVX2's pairs saturate in i16).
    const FULL_BYTES: bool;
    /// # Safety
    /// The processor has the lanes' features.
    unsafe fn dot(w: __m256i, x: __m256i) -> __m256i;
    /// `dot(w0, x0) + dot(w1, x1)`, for values below 16.
    ///
    /// # Safety
    /// As `dot`.
    unsafe fn dot2(w0: __m256i, x0: __m256i, w1: __m256i, x1: __m256i) -> __m256i;
    /// `acc + dot(w, x)`, for values below 128.
    ///
    /// # Safety
    /// As `dot`.
    unsafe fn dot_acc(acc: __m256i, w: __m256i, x: __m256i) -> __m256i;
}

impl Dot4 for Vnni {
    const FULL_BYTES: bool = true;
    #[inline(always)]
    unsafe fn dot(w: __m256i, x: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x)
    }
    #[inline(always)]
    unsafe fn dot2(w0: __m256i, x0: __m256i, w1: __m256i, x1: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(Self::dot(w0, x0), w1, x1)
    }
    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, w, x)
    }
}

impl Dot4 for Avx2 {
    const FULL_BYTES: bool = false;
    #[inline(always)]
    unsafe fn dot(w: __m256i, x: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
    }
    #[inline(always)]
    unsafe fn dot2(w0: __m256i, x0: __m256i, w1: __m256i, x1: __m256i) -> __m256i {
        // Values below 16: four products of one i16 lane stay under 2^14.
        let pairs = _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0), _mm256_maddubs_epi16(w1, x1));
        _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
    }
    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        _mm256_add_epi32(acc, Self::dot(w, x))
    }
}

/// Eight rows' lanes summed: lane r of the result is the sum of `p[r]`'s lanes.
#[inline(always)]
pub(super) unsafe fn across(p: [__m256i; R]) -> __m256i {
    let a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    let b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    // a: rows 0–3 over lanes 0–3, then over lanes 4–7; b the same for rows 4–7.
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(a, b),
        _mm256_permute2x128_si256::<0x31>(a, b),
    )
}

/// Eight rows' values (a register each) against one activation block: the byte products
/// summed by row, a row per lane.
#[inline(always)]
pub(super) unsafe fn dot8<D: Dot4>(w: &[__m256i; R], xq: *const i8) -> __m256i {
    let xv = _mm256_loadu_si256(xq as *const __m256i);
    let mut p = [_mm256_setzero_si256(); R];
    for (p, &w) in p.iter_mut().zip(w) {
        *p = D::dot(w, xv);
    }
    across(p)
}

/// Eight rows' values (a register each) turned so that lane r of register k holds row r's
/// values 4k..4k + 4: each token's byte products then add up by row within the lanes, with
/// no sums across them ([`dot8t`]). Worth it where several tokens share the turn.
#[inline(always)]
pub(super) unsafe fn transpose8(w: &[__m256i; R]) -> [__m256i; R] {
    // Within each 128-bit half: pairs of rows by 32 bits, then quads by 64; then the halves.
    let mut u = [_mm256_setzero_si256(); R];
    for q in 0..2 {
        let r = 4 * q;
        let t = [
            _mm256_unpacklo_epi32(w[r], w[r + 1]),
            _mm256_unpackhi_epi32(w[r], w[r + 1]),
            _mm256_unpacklo_epi32(w[r + 2], w[r + 3]),
            _mm256_unpackhi_epi32(w[r + 2], w[r + 3]),
        ];
        // u[r + k]: values 4k.. (low half) and 4k + 16.. (high half) of rows r..r + 4.
        u[r] = _mm256_unpacklo_epi64(t[0], t[2]);
        u[r + 1] = _mm256_unpackhi_epi64(t[0], t[2]);
        u[r + 2] = _mm256_unpacklo_epi64(t[1], t[3]);
        u[r + 3] = _mm256_unpackhi_epi64(t[1], t[3]);
    }
    let mut out = [_mm256_setzero_si256(); R];
    for k in 0..4 {
        out[k] = _mm256_permute2x128_si256::<0x20>(u[k], u[4 + k]);
        out[4 + k] = _mm256_permute2x128_si256::<0x31>(u[k], u[4 + k]);
    }
    out
}

/// Turned rows ([`transpose8`]) against one activation block, registers `ks` of them: lane r
/// is row r's sum of byte products, the same integers as [`dot8`]'s.
#[inline(always)]
pub(super) unsafe fn dot8t<D: Dot4>(wt: &[__m256i; R], xq: *const i8, ks: Range<usize>) -> __m256i {
    // Two chains of sums, so that each waits on half as many products.
    let mut s = [_mm256_setzero_si256(); 2];
    for k in ks {
        let xk = _mm256_set1_epi32((xq.add(4 * k) as *const i32).read_unaligned());
        s[k % 2] = D::dot_acc(s[k % 2], wt[k], xk);
    }
    _mm256_add_epi32(s[0], s[1])
}

/// [`dot8t`]'s sums in one chain started from `init`: where many tokens give independent
/// chains, fewer operations than two chains joined.
#[inline(always)]
pub(super) unsafe fn dot8t_from<D: Dot4>(
    init: __m256i,
    wt: &[__m256i; R],
    xq: *const i8,
    ks: Range<usize>,
) -> __m256i {
    let mut s = init;
    for k in ks {
        let xk = _mm256_set1_epi32((xq.add(4 * k) as *const i32).read_unaligned());
        s = D::dot_acc(s, wt[k], xk);
    }
    s
}

/// `acc + sums · d · dx + mn · sx` for eight rows' integer sums against activation block
/// `xb` (of all tokens' blocks): its scale `dx` and `sx = dx·Σq` ([`QuantX::s32`]).
#[inline(always)]
pub(super) unsafe fn scale8(
    acc: __m256,
    sums: __m256i,
    d: __m256,
    mn: __m256,
    x: &QuantX,
    xb: usize,
) -> __m256 {
    let dx = _mm256_set1_ps(*x.d.get_unchecked(xb));
    let acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(d, dx), acc);
    _mm256_fmadd_ps(mn, _mm256_set1_ps(*x.s32.get_unchecked(xb)), acc)
}

/// Four registers of two rows each (lanes 0–3 one row, 4–7 the other) summed: lanes hold
/// rows 0, 2, 4, 6, 1, 3, 5, 7 (`NIBBLES_AT` types' `LANE_ROWS`).
#[inline(always)]
unsafe fn across_pairs(v: [__m256i; R / 2]) -> __m256i {
    _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]))
}

/// 16 activations in both halves of a register, against two rows' nibbles.
#[inline(always)]
unsafe fn both_halves(p: *const i8) -> __m256i {
    _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i))
}

/// Two rows' 16 bytes of nibbles, one per half.
#[inline(always)]
unsafe fn packed_pair(q0: *const u8, q1: *const u8) -> __m256i {
    _mm256_inserti128_si256::<1>(
        _mm256_castsi128_si256(_mm_loadu_si128(q0 as *const __m128i)),
        _mm_loadu_si128(q1 as *const __m128i),
    )
}

/// Low and high nibbles of each byte.
#[inline(always)]
unsafe fn split(v: __m256i) -> (__m256i, __m256i) {
    let m = _mm256_set1_epi8(0x0F);
    (
        _mm256_and_si256(v, m),
        _mm256_and_si256(_mm256_srli_epi16::<4>(v), m),
    )
}

/// Two rows' nibbles in two registers: (elements 0–15 of each, elements 16–31 of each).
#[inline(always)]
unsafe fn nibble_pair(q0: *const u8, q1: *const u8) -> (__m256i, __m256i) {
    split(packed_pair(q0, q1))
}

/// Eight rows' nibbles, row r's at `q[r]`, turned as [`transpose8`] turns values:
/// register k holds values 4k..4k + 4 of each row, in the lanes' order of `across_pairs`
/// (rows 0, 2, 4, 6, 1, 3, 5, 7). The nibbles are turned while packed: half the shuffles.
#[inline(always)]
unsafe fn turned_nibbles(q: [*const u8; R]) -> [__m256i; R] {
    let a: [__m256i; 4] = [
        packed_pair(q[0], q[1]),
        packed_pair(q[2], q[3]),
        packed_pair(q[4], q[5]),
        packed_pair(q[6], q[7]),
    ];
    // Within each half: rows 0, 2 (or 1, 3) by 32 bits, with rows 4, 6 (5, 7) by 64.
    let (l01, h01) = (
        _mm256_unpacklo_epi32(a[0], a[1]),
        _mm256_unpackhi_epi32(a[0], a[1]),
    );
    let (l23, h23) = (
        _mm256_unpacklo_epi32(a[2], a[3]),
        _mm256_unpackhi_epi32(a[2], a[3]),
    );
    let packed = [
        _mm256_unpacklo_epi64(l01, l23),
        _mm256_unpackhi_epi64(l01, l23),
        _mm256_unpacklo_epi64(h01, h23),
        _mm256_unpackhi_epi64(h01, h23),
    ];
    // Byte j of a row holds values j (low nibble) and j + 16 (high).
    let mut out = [_mm256_setzero_si256(); R];
    for (k, &v) in packed.iter().enumerate() {
        (out[k], out[4 + k]) = split(v);
    }
    out
}

/// Where a group of eight rows is: the first row's bytes, each row's offset from it, and
/// the offsets as the lanes of the summed products order them.
pub(super) struct Group {
    pub p: *const u8,
    /// Bytes from a row's block to its next: the block's, or eight blocks' where packed.
    pub step: usize,
    pub off: [isize; R],
    pub lanes: [isize; R],
}

/// Floats of a group's decoded scales per 32 values of a row: two registers of eight rows.
pub(super) const SCALES: usize = 2 * R;

/// One kind of pass of eight rows over a few tokens, for [`groups`].
pub(super) trait Pass8 {
    /// The block type, for the rows left after the groups of eight.
    type Rest: Block;
    /// Which row each lane of a pass's results holds.
    const LANE_ROWS: [usize; R];
    /// Values per block: 32, or 256 for the K-quants.
    const UNIT: usize;
    /// Bytes per block of one row.
    const BLOCK: usize;
    /// Whether the pass reads rows packed eight at a time ([`super::packed`]).
    const PACKED: bool = false;
    /// Whether prompts go `2·T` tokens a pass: where unpacking a block costs more than its
    /// products with `T` tokens (the K-quants, whose values come from several fields), the
    /// wider pass shares each unpacking with twice as many.
    const WIDE_PASS: bool = false;
    /// Floats of a block's scales for the group's eight rows: [`SCALES`] per 32 values,
    /// unless the pass lays out more.
    const SCALE_FLOATS: usize = Self::UNIT / 32 * SCALES;
    /// Bytes of a stored row of `len` values.
    fn row_bytes(len: usize) -> usize;
    /// Block `b`'s scales (and mins) for the group's eight rows: `SCALE_FLOATS` floats laid
    /// out as `pass` reads them.
    ///
    /// # Safety
    /// The group's rows hold block `b`; `sc` has room; the processor has AVX2, FMA and F16C.
    unsafe fn scales(g: &Group, b: usize, sc: &mut [f32]);
    /// Eight rows against tokens `t0..t0 + TT`: lane l of result k is row `LANE_ROWS[l]`'s
    /// product with token `t0 + k`. The scales come from `all` (every block's, as `scales`
    /// lays them out one block after another) or, where that is None, are decoded block by
    /// block ([`unit_scales`]). Where `ahead` is not null, the next group's rows start there,
    /// contiguous, and are fetched into the cache meanwhile ([`fetch_share`]).
    ///
    /// # Safety
    /// The group's rows hold `x.len` values each; the processor has `D`'s features.
    unsafe fn pass<D: Dot4, const TT: usize>(
        g: &Group,
        ahead: *const u8,
        x: &QuantX,
        t0: usize,
        all: Option<&[f32]>,
    ) -> [__m256; TT];
}

/// Block `b`'s scales: from `all` where the group's were decoded for many tokens, or decoded
/// now into `here`. (One token decodes them as it goes: a loop of their own ahead of its one
/// pass ran Q8_0 decode 25 % slower.)
#[inline(always)]
pub(super) unsafe fn unit_scales<'a, P: Pass8>(
    g: &Group,
    b: usize,
    all: Option<&'a [f32]>,
    here: &'a mut [f32],
) -> &'a [f32] {
    match all {
        Some(all) => all.get_unchecked(b * P::SCALE_FLOATS..),
        None => {
            P::scales(g, b, here);
            here
        }
    }
}

/// A block's eight scales and mins, as the 32-value passes lay them out.
///
/// # Safety
/// `sc` holds [`SCALES`] floats; the processor has AVX.
#[inline(always)]
pub(super) unsafe fn put_scales(sc: &mut [f32], d: __m256, mn: __m256) {
    debug_assert!(sc.len() >= SCALES);
    _mm256_storeu_ps(sc.as_mut_ptr(), d);
    _mm256_storeu_ps(sc.as_mut_ptr().add(R), mn);
}

/// Register `i` of eight floats at `sc`.
#[inline(always)]
pub(super) unsafe fn reg(sc: &[f32], i: usize) -> __m256 {
    _mm256_loadu_ps(sc.as_ptr().add(R * i))
}

/// Share `i` of the next group's bytes (`bytes` per share for each row), into L2: eight
/// rows read side by side are not a stream the hardware prefetchers follow (fetching into
/// L1 gained less). Shares are rounded up to whole lines, so the fetches run ahead into the
/// group after the next; exact shares decoded slower.
#[inline(always)]
pub(super) unsafe fn fetch_share(ahead: *const u8, i: usize, bytes: usize) {
    if ahead.is_null() {
        return;
    }
    let lines = (R * bytes).div_ceil(64);
    for l in 0..lines {
        let at = ahead.wrapping_add((i * lines + l) * 64);
        _mm_prefetch::<_MM_HINT_T1>(at as *const i8);
    }
}

/// The kernel over blocks of 32 values.
pub(super) struct ByBlock<B>(std::marker::PhantomData<B>);

impl<B: Block32> Pass8 for ByBlock<B> {
    type Rest = B;
    const LANE_ROWS: [usize; R] = B::LANE_ROWS;
    const UNIT: usize = 32;
    const BLOCK: usize = B::BYTES;
    fn row_bytes(len: usize) -> usize {
        len / 32 * B::BYTES
    }
    /// The eight rows' scales, then their mins.
    #[inline(always)]
    unsafe fn scales(g: &Group, b: usize, sc: &mut [f32]) {
        let (d, mn) = B::scales8(g.p.add(b * g.step), &g.lanes);
        put_scales(sc, d, mn);
    }
    #[inline(always)]
    unsafe fn pass<D: Dot4, const TT: usize>(
        g: &Group,
        ahead: *const u8,
        x: &QuantX,
        t0: usize,
        all: Option<&[f32]>,
    ) -> [__m256; TT] {
        pass::<B, D, TT>(g, ahead, x, t0, all)
    }
}

/// [`Pass8::pass`] over blocks of 32.
#[inline(always)]
unsafe fn pass<B: Block32, D: Dot4, const TT: usize>(
    g: &Group,
    ahead: *const u8,
    x: &QuantX,
    t0: usize,
    all: Option<&[f32]>,
) -> [__m256; TT] {
    let xblocks = x.blocks();
    let mut acc = [_mm256_setzero_ps(); TT];
    let mut here = [0f32; SCALES];
    for b in 0..xblocks {
        let p = g.p.add(b * g.step);
        fetch_share(ahead, b, B::BYTES);
        // Plain loops, not `array::from_fn`: its closure would not inherit the target
        // features, and each value would become a call.
        let sc = unit_scales::<ByBlock<B>>(g, b, all, &mut here);
        let (d, mn) = (reg(sc, 0), reg(sc, 1));
        if TT > 1 {
            // Several tokens: the rows turned once, in the lanes' order.
            let wt = if B::NIBBLES_AT > 0 {
                let mut q = [std::ptr::null(); R];
                for (r, q) in q.iter_mut().enumerate() {
                    *q = p.offset(g.off[r]).add(B::NIBBLES_AT);
                }
                turned_nibbles(q)
            } else {
                let mut w = [_mm256_setzero_si256(); R];
                for (w, &o) in w.iter_mut().zip(&g.lanes) {
                    *w = B::values32(p.offset(o));
                }
                transpose8(&w)
            };
            for (k, a) in acc.iter_mut().enumerate() {
                let t = t0 + k;
                let sums = dot8t::<D>(&wt, x.q.as_ptr().add(t * x.len + 32 * b), 0..R);
                *a = scale8(*a, sums, d, mn, x, t * xblocks + b);
            }
            continue;
        }
        let mut w = [_mm256_setzero_si256(); R];
        if B::NIBBLES_AT > 0 {
            for i in 0..R / 2 {
                let at = |r: usize| p.offset(g.off[r]).add(B::NIBBLES_AT);
                (w[2 * i], w[2 * i + 1]) = nibble_pair(at(2 * i), at(2 * i + 1));
            }
        } else {
            for (w, &o) in w.iter_mut().zip(&g.off) {
                *w = B::values32(p.offset(o));
            }
        }
        for (k, a) in acc.iter_mut().enumerate() {
            let t = t0 + k;
            let xq = x.q.as_ptr().add(t * x.len + 32 * b);
            let sums = if B::NIBBLES_AT > 0 {
                let (lo, hi) = (both_halves(xq), both_halves(xq.add(16)));
                let mut v = [_mm256_setzero_si256(); R / 2];
                for (i, v) in v.iter_mut().enumerate() {
                    *v = D::dot2(w[2 * i], lo, w[2 * i + 1], hi);
                }
                across_pairs(v)
            } else {
                dot8::<D>(&w, xq)
            };
            *a = scale8(*a, sums, d, mn, x, t * xblocks + b);
        }
    }
    acc
}

/// Rows `js` of `rows` in groups of eight, every token of `x`, into `out[(j − js.start)·n + t]`;
/// returns how many rows it did (the rest, fewer than eight, are left). Packed rows come in
/// whole groups: `js` starts at one, and a last group cut short by `js` is run whole, its
/// extra rows' products dropped.
#[inline(always)]
pub(super) unsafe fn groups<P: Pass8, D: Dot4>(
    rows: &Rows,
    js: Range<usize>,
    x: &QuantX,
    out: &mut [f32],
) -> usize {
    let n = x.n;
    let (count, done) = if P::PACKED {
        (js.len().div_ceil(R), js.len())
    } else {
        (js.len() / R, js.len() / R * R)
    };
    let group = |g: usize| -> Group {
        let first = js.start + g * R;
        let p = rows.w_ptr(first);
        if P::PACKED {
            let step = R * P::BLOCK;
            return Group {
                p,
                step,
                off: [0; R],
                lanes: [0; R],
            };
        }
        let off: [isize; R] = std::array::from_fn(|r| rows.w_ptr(first + r).offset_from(p));
        let lanes = P::LANE_ROWS.map(|r| off[r]);
        Group {
            p,
            step: P::BLOCK,
            off,
            lanes,
        }
    };
    let all: Vec<Group> = (0..count).map(group).collect();
    let mut put = |g: usize, t0: usize, acc: &[__m256]| {
        for (k, a) in acc.iter().enumerate() {
            // A transmute, not a store: an intrinsic in a closure would be a call.
            let lanes: [f32; R] = std::mem::transmute(*a);
            for (&r, v) in P::LANE_ROWS.iter().zip(lanes) {
                if g * R + r < done {
                    out[(g * R + r) * n + t0 + k] = v;
                }
            }
        }
    };
    // Where rows follow each other, the next group's bytes start where this group's end;
    // packed groups always do. (Fetched ahead, packed K-quant rows decoded 20–45 % faster:
    // their passes read a block's parts out of order, which the hardware prefetchers do not
    // follow.)
    let row_bytes = P::row_bytes(x.len);
    let contiguous = |g: &Group| {
        g.off
            .iter()
            .enumerate()
            .all(|(r, &o)| o == (r * row_bytes) as isize)
    };
    let aheads: Vec<*const u8> = (0..all.len())
        .map(|g| match all.get(g + 1) {
            // Packed groups fetch on past the task's last, into the next task's first.
            _ if P::PACKED => rows
                .packed_group(js.start + (g + 1) * R)
                .unwrap_or(std::ptr::null()),
            Some(next) if contiguous(next) => next.p,
            _ => std::ptr::null(),
        })
        .collect();
    if n == 1 {
        for (gi, g) in all.iter().enumerate() {
            put(gi, 0, &P::pass::<D, 1>(g, aheads[gi], x, 0, None));
        }
        return done;
    }
    // Every group's scales, decoded once for the tokens of a chunk.
    let per = P::SCALE_FLOATS;
    let mut sc = vec![0f32; x.len / P::UNIT * per];
    for c0 in (0..n).step_by(CHUNK) {
        let c1 = (c0 + CHUNK).min(n);
        for (gi, g) in all.iter().enumerate() {
            for (b, at) in sc.chunks_exact_mut(per).enumerate() {
                P::scales(g, b, at);
            }
            let sc = Some(&sc[..]);
            let mut t = c0;
            let mut ahead = aheads[gi];
            if P::WIDE_PASS {
                while t + 2 * T <= c1 {
                    put(gi, t, &P::pass::<D, { 2 * T }>(g, ahead, x, t, sc));
                    ahead = std::ptr::null();
                    t += 2 * T;
                }
            }
            while t + T <= c1 {
                put(gi, t, &P::pass::<D, T>(g, ahead, x, t, sc));
                ahead = std::ptr::null();
                t += T;
            }
            match c1 - t {
                3 => put(gi, t, &P::pass::<D, 3>(g, ahead, x, t, sc)),
                2 => put(gi, t, &P::pass::<D, 2>(g, ahead, x, t, sc)),
                1 => put(gi, t, &P::pass::<D, 1>(g, ahead, x, t, sc)),
                _ => {}
            }
        }
    }
    done
}

/// Kernel `P`'s rows `js` against every token of `x`, into `out[(j − js.start)·n + t]`: the
/// groups of eight, then the rest a row at a time. Every token count goes the same way, so
/// that a token's products do not depend on which others share its step: a prompt's tokens
/// and the same tokens decoded one at a time give the same bits (a server that reuses a
/// conversation's cache relies on it).
///
/// # Safety
/// The processor has `L`'s features; `x` holds whole blocks of the rows' length.
#[inline(always)]
unsafe fn run<P: Pass8, L: Dot4 + super::dot::Lanes>(
    rows: &Rows,
    js: Range<usize>,
    x: &QuantX,
    out: &mut [f32],
) {
    let done = groups::<P, L>(rows, js.clone(), x, out);
    rows_loop::<P::Rest, L>(rows, js.start + done..js.end, x, &mut out[done * x.n..]);
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn entry_vnni<K: Pass8>(rows: &Rows, js: Range<usize>, x: &QuantX, out: &mut [f32]) {
    run::<K, Vnni>(rows, js, x, out)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn entry_avx2<K: Pass8>(rows: &Rows, js: Range<usize>, x: &QuantX, out: &mut [f32]) {
    run::<K, Avx2>(rows, js, x, out)
}

/// Kernel `K` on VNNI lanes; handed out only where `x86::has_vnni()`.
pub fn vnni<K: Pass8>(rows: &Rows, js: Range<usize>, x: &QuantX, out: &mut [f32]) {
    debug_assert!(x86::has_vnni());
    // SAFETY: only reachable when the processor has AVX2, FMA, F16C and AVX-512 VNNI with VL.
    unsafe { entry_vnni::<K>(rows, js, x, out) }
}

/// Kernel `K` on AVX2 lanes; handed out only where `x86::has_avx2()` (and, for the 32-value
/// types, not `WIDE`).
pub fn avx2<K: Pass8>(rows: &Rows, js: Range<usize>, x: &QuantX, out: &mut [f32]) {
    debug_assert!(x86::has_avx2());
    // SAFETY: only reachable when the processor has AVX2, FMA and F16C.
    unsafe { entry_avx2::<K>(rows, js, x, out) }
}
