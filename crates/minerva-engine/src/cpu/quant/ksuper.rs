//! The K-quants eight rows at a time, through [`block32::groups`]: Q4_K and Q5_K (one scale
//! and min per 32 values) and Q6_K (a scale per 16). Each 256-value block's scales and mins
//! are decoded for the eight rows at once, in vector lanes, and laid out by sub-block (eight
//! rows to a register). The activations share one scale per 256 values (as ggml's Q8_K), so
//! each sub-block's byte products are multiplied by the rows' scales in integers and the
//! block is scaled once; only Q4_K's and Q5_K's mins take a float step per sub-block.

use super::block32::{
    self, dot8, dot8t, dot8t_from, fetch_share, reg, transpose8, unit_scales, Dot4, Group, Pass8,
    R, SCALES,
};
use super::blocks::{Block, Q4K, Q5K, Q6K};
use super::QuantX;
use std::arch::x86_64::*;

/// Where a block's 32-byte vectors are read from: one row's block as stored, whose bytes
/// `o..o + 32` are values 0..32 of something, or eight rows' packed block
/// ([`super::packed`]), whose register `k` of the same vector holds values 4k..4k + 4 of each
/// row. Value-by-value unpacking reads either alike.
pub(super) trait Load {
    /// # Safety
    /// The vector at block offset `o` lies inside the block; the processor has AVX2.
    unsafe fn at(&self, o: usize) -> __m256i;
}

/// One row's block at a pointer.
pub(super) struct Stored(pub *const u8);

impl Load for Stored {
    #[inline(always)]
    unsafe fn at(&self, o: usize) -> __m256i {
        _mm256_loadu_si256(self.0.add(o) as *const __m256i)
    }
}

/// Register `k` of eight rows' packed block at a pointer: block byte `o + 4k` of each row
/// lies at `8·(o + 4k)`.
pub(super) struct Turned(pub *const u8, pub usize);

impl Load for Turned {
    #[inline(always)]
    unsafe fn at(&self, o: usize) -> __m256i {
        _mm256_loadu_si256(self.0.add(R * (o + 4 * self.1)) as *const __m256i)
    }
}

/// Eight rows' 32-bit words at block offset `o`: gathered from each row's block at
/// `p + lanes[l]`, or one load where the rows are packed.
#[inline(always)]
unsafe fn word8<const PACKED: bool>(p: *const u8, o: usize, lanes: &[isize; R]) -> __m256i {
    if PACKED {
        _mm256_loadu_si256(p.add(R * o) as *const __m256i)
    } else {
        block32::gather(p.add(o), lanes)
    }
}

/// A K-quant of 256 values in eight sub-blocks of 32, each with its own scale and min.
pub(super) trait Super: Block {
    const BYTES: usize;
    /// Whether odd sub-blocks are the high nibbles of bytes at [`Super::NIBBLES`]: they can
    /// then be read as `16·q` with one mask, the 16 taken out of the scale.
    const HIGH_NIBBLES: bool = false;
    /// Where the block's nibbles start.
    const NIBBLES: usize = 0;
    /// Sub-block `j`'s 32 values (unsigned, below 32), from the block's vectors.
    ///
    /// # Safety
    /// `l` reads a whole block; the processor has AVX2.
    unsafe fn sub<L: Load>(l: &L, j: usize) -> __m256i;
}

/// Sub-block `j` of nibbles at block offset `qs`: sub-blocks 2c and 2c + 1 are the low and
/// high nibbles of bytes 32c..32c + 32.
#[inline(always)]
unsafe fn nibbles<L: Load>(l: &L, qs: usize, j: usize) -> __m256i {
    let v = l.at(qs + 32 * (j / 2));
    let v = if j.is_multiple_of(2) {
        v
    } else {
        _mm256_srli_epi16::<4>(v)
    };
    _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
}

impl Super for Q4K {
    const BYTES: usize = 144;
    const HIGH_NIBBLES: bool = true;
    const NIBBLES: usize = 16;
    #[inline(always)]
    unsafe fn sub<L: Load>(l: &L, j: usize) -> __m256i {
        nibbles(l, Self::NIBBLES, j)
    }
}

impl Super for Q5K {
    const BYTES: usize = 176;
    #[inline(always)]
    unsafe fn sub<L: Load>(l: &L, j: usize) -> __m256i {
        // Bit j of each of the 32 bytes at 16 is the fifth bit, masked and ORed in (one
        // ternary-logic operation where AVX-512 is on).
        let at4 = to_bit4(l.at(16), j);
        _mm256_or_si256(
            nibbles(l, 48, j),
            _mm256_and_si256(at4, _mm256_set1_epi8(0x10)),
        )
    }
}

/// Bit `bit` (0–7) of each byte moved to bit 4 of that byte, by one shift of 16-bit lanes
/// (which moves both bytes' bits alike; the caller masks what else moved in).
#[inline(always)]
unsafe fn to_bit4(v: __m256i, bit: usize) -> __m256i {
    if bit <= 4 {
        _mm256_sll_epi16(v, _mm_cvtsi32_si128(4 - bit as i32))
    } else {
        _mm256_srl_epi16(v, _mm_cvtsi32_si128(bit as i32 - 4))
    }
}

/// Byte `i` (0–3) of each lane, unsigned, as i32.
#[inline(always)]
unsafe fn byte_i32(v: __m256i, i: usize) -> __m256i {
    let top = _mm256_sll_epi32(v, _mm_cvtsi32_si128(24 - 8 * i as i32));
    _mm256_srli_epi32::<24>(top)
}

/// The top two bits of each byte, moved to bits 4–5.
#[inline(always)]
unsafe fn top_bits(v: __m256i) -> __m256i {
    let two = _mm256_and_si256(_mm256_srli_epi32::<6>(v), _mm256_set1_epi8(0x03));
    _mm256_slli_epi32::<4>(two)
}

/// Eight rows' Q4_K or Q5_K scales and mins, of the blocks at `p` ([`word8`]) (d and dmin
/// as f16, then twelve bytes of 6-bit scales and mins as ggml packs them), decoded in the
/// rows' lanes: at `16·j` sub-block j's scale as i32 (the bits in `sc`), at `16·j + 8` its
/// `−dmin·min` (the product `blocks::k_scales` makes), at [`D_AT`] the rows' `d`.
#[inline(always)]
unsafe fn k_scales8<const PACKED: bool>(p: *const u8, lanes: &[isize; R], sc: &mut [f32]) {
    let (d, dmin) = block32::halves(word8::<PACKED>(p, 0, lanes));
    let neg_dmin = _mm256_xor_ps(dmin, _mm256_set1_ps(-0.0));
    let (a0, a1, a2) = (
        word8::<PACKED>(p, 4, lanes),
        word8::<PACKED>(p, 8, lanes),
        word8::<PACKED>(p, 12, lanes),
    );
    let six = _mm256_set1_epi8(0x3F);
    let low4 = _mm256_set1_epi8(0x0F);
    // Sub-blocks 0–3: the low six bits of bytes 0–3 (scales) and 4–7 (mins). Sub-blocks 4–7:
    // a nibble of bytes 8–11, with the top two bits of bytes 0–3 (scales) or 4–7 (mins).
    let s = [
        _mm256_and_si256(a0, six),
        _mm256_or_si256(_mm256_and_si256(a2, low4), top_bits(a0)),
    ];
    let m = [
        _mm256_and_si256(a1, six),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi32::<4>(a2), low4),
            top_bits(a1),
        ),
    ];
    let at = sc.as_mut_ptr();
    _mm256_storeu_ps(at.add(D_AT), d);
    for j in 0..8 {
        let (s, m) = (s[j / 4], m[j / 4]);
        _mm256_storeu_si256(at.add(SCALES * j) as *mut __m256i, byte_i32(s, j % 4));
        let min = _mm256_cvtepi32_ps(byte_i32(m, j % 4));
        _mm256_storeu_ps(at.add(SCALES * j + R), _mm256_mul_ps(neg_dmin, min));
    }
}

/// Where a block's `d` lies among its decoded scales ([`k_scales8`], [`q6_scales8`]), after
/// the eight sub-blocks' or chunks'.
const D_AT: usize = 8 * SCALES;

/// Eight rows' Q6_K scales, of the blocks at `p` ([`word8`]): at `16·c` chunk c's scales of
/// its first 16 values, at `16·c + 8` those of its last 16, as i32 (the bits in `sc`), a
/// row per lane; at [`D_AT`] the rows' `d`.
#[inline(always)]
unsafe fn q6_scales8<const PACKED: bool>(p: *const u8, lanes: &[isize; R], sc: &mut [f32]) {
    let d = if PACKED {
        // The eight rows' f16 d side by side after their words.
        _mm256_cvtph_ps(_mm_loadu_si128(p.add(R * 208) as *const __m128i))
    } else {
        // d is the f16 at 208, the high half of the word at 206 (the word at 208 would
        // reach past the block).
        block32::halves(block32::gather(p.add(206), lanes)).1
    };
    let at = sc.as_mut_ptr();
    _mm256_storeu_ps(at.add(D_AT), d);
    for k in 0..4 {
        // Scales 4k..4k + 4: chunks 2k and 2k + 1, two halves each.
        let w = word8::<PACKED>(p, 192 + 4 * k, lanes);
        for c in 0..2 {
            let chunk = 2 * k + c;
            for half in 0..2 {
                let byte = 2 * c + half;
                let top = _mm256_sll_epi32(w, _mm_cvtsi32_si128(24 - 8 * byte as i32));
                let scale = _mm256_srai_epi32::<24>(top);
                _mm256_storeu_si256(at.add(SCALES * chunk + R * half) as *mut __m256i, scale);
            }
        }
    }
}

/// Where a pass is: its group of rows, the next group's bytes to fetch ([`fetch_share`]), the
/// activations from token `t0` on, and block `b` with its decoded scales `sc`.
#[derive(Clone, Copy)]
struct Block256<'a> {
    g: &'a Group,
    ahead: *const u8,
    x: &'a QuantX,
    t0: usize,
    b: usize,
    sc: &'a [f32],
}

impl Block256<'_> {
    /// Each token's integer sums over the block, times the rows' `d` and the token's one
    /// activation scale for the 256 values ([`super::unit_of`]), into `acc`: the block's
    /// float step.
    #[inline(always)]
    unsafe fn scale<const TT: usize>(&self, sums: [__m256i; TT], acc: &mut [__m256; TT]) {
        let d = _mm256_loadu_ps(self.sc.as_ptr().add(D_AT));
        for (k, (a, s)) in acc.iter_mut().zip(sums).enumerate() {
            let dx = *self
                .x
                .d
                .get_unchecked((self.t0 + k) * self.x.blocks() + 8 * self.b);
            let ddx = _mm256_mul_ps(d, _mm256_set1_ps(dx));
            *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), ddx, *a);
        }
    }
}

/// The kernel over 256-value blocks, stored as in the file or packed eight rows at a time.
pub(super) struct BySuper<B, const PACKED: bool>(std::marker::PhantomData<B>);

impl<B: Super, const PACKED: bool> Pass8 for BySuper<B, PACKED> {
    type Rest = B;
    const LANE_ROWS: [usize; R] = [0, 1, 2, 3, 4, 5, 6, 7];
    const UNIT: usize = 256;
    const BLOCK: usize = B::BYTES;
    const PACKED: bool = PACKED;
    const WIDE_PASS: bool = true;
    const SCALE_FLOATS: usize = D_AT + R;
    fn row_bytes(len: usize) -> usize {
        len / 256 * B::BYTES
    }
    #[inline(always)]
    unsafe fn scales(g: &Group, b: usize, sc: &mut [f32]) {
        k_scales8::<PACKED>(g.p.add(b * g.step), &g.lanes, sc)
    }
    /// The activations share one scale per 256 values ([`super::unit_of`]), so a block's
    /// byte products are summed in integers, each sub-block's times its 6-bit scale, and
    /// scaled once; the mins go as before, a float step per sub-block.
    #[inline(always)]
    unsafe fn pass<D: Dot4, const TT: usize>(
        g: &Group,
        ahead: *const u8,
        x: &QuantX,
        t0: usize,
        all: Option<&[f32]>,
    ) -> [__m256; TT] {
        debug_assert_eq!(x.unit, 256);
        let mut acc = [_mm256_setzero_ps(); TT];
        let mut here = [0f32; D_AT + R];
        for b in 0..x.len / 256 {
            let sc = unit_scales::<Self>(g, b, all, &mut here);
            let at = Block256 {
                g,
                ahead,
                x,
                t0,
                b,
                sc,
            };
            let mut sums = [_mm256_setzero_si256(); TT];
            // Sub-blocks in pairs, so that each pair's shared bytes are loaded once (2c and
            // 2c + 1 are the low and high nibbles of Q4_K's and Q5_K's same bytes).
            for c in 0..4 {
                for j in [2 * c, 2 * c + 1] {
                    sub_pass::<B, D, TT, PACKED>(&at, j, &mut sums, &mut acc);
                }
            }
            at.scale(sums, &mut acc);
        }
        acc
    }
}

/// Sub-block `j` of block `b` of [`BySuper`]'s pass: each token's byte products, times the
/// rows' scales, into its integer `sums`; its mins into `acc`. The integers stay below
/// 2^27 (eight sub-blocks of 32 values below 32, times 128, times 63).
#[inline(always)]
unsafe fn sub_pass<B: Super, D: Dot4, const TT: usize, const PACKED: bool>(
    at: &Block256,
    j: usize,
    sums: &mut [__m256i; TT],
    acc: &mut [__m256; TT],
) {
    let Block256 {
        g,
        ahead,
        x,
        t0,
        b,
        sc,
    } = *at;
    let xblocks = x.blocks();
    let p = g.p.add(b * g.step);
    // The next group a sub-block's share at a time: a block's share at once decoded 3 %
    // slower.
    fetch_share(ahead, 8 * b + j, B::BYTES / 8);
    // A high nibble as 16·q, where the products take values past 127: one operation
    // fewer per register, the 16 shifted out of the sums.
    let masked = B::HIGH_NIBBLES && D::FULL_BYTES && j % 2 == 1;
    let at = B::NIBBLES + 32 * (j / 2);
    let high = _mm256_set1_epi8(0xF0u8 as i8);
    // Plain loops, not `array::from_fn`: its closure would not inherit the target features.
    let mut w = [_mm256_setzero_si256(); R];
    if PACKED {
        for (k, w) in w.iter_mut().enumerate() {
            let l = Turned(p, k);
            *w = if masked {
                _mm256_and_si256(l.at(at), high)
            } else {
                B::sub(&l, j)
            };
        }
    } else {
        for (w, &o) in w.iter_mut().zip(&g.off) {
            let l = Stored(p.offset(o));
            *w = if masked {
                _mm256_and_si256(l.at(at), high)
            } else {
                B::sub(&l, j)
            };
        }
    }
    let xb = 8 * b + j;
    let scale = _mm256_castps_si256(reg(sc, 2 * j));
    let mins = reg(sc, 2 * j + 1);
    // Several tokens: the stored rows turned once (see `block32::transpose8`).
    let wt = if TT > 1 && !PACKED { transpose8(&w) } else { w };
    for (k, (s, a)) in sums.iter_mut().zip(acc.iter_mut()).enumerate() {
        let t = t0 + k;
        let xq = x.q.as_ptr().add(t * x.len + 32 * xb);
        let dot = if TT > 1 || PACKED {
            dot8t::<D>(&wt, xq, 0..R)
        } else {
            dot8::<D>(&w, xq)
        };
        let dot = if masked {
            _mm256_srai_epi32::<4>(dot)
        } else {
            dot
        };
        *s = _mm256_add_epi32(*s, _mm256_mullo_epi32(dot, scale));
        let sx = _mm256_set1_ps(*x.s32.get_unchecked(t * xblocks + xb));
        *a = _mm256_fmadd_ps(mins, sx, *a);
    }
}

/// Q6_K, whose scales change every 16 values: eight rows at a time, each chunk's byte
/// products summed by row and half, the offset −32 taken off and the halves scaled in
/// integers, then one float step per block; stored as in the file or packed.
pub(super) struct Q6<const PACKED: bool>;

const Q6K_BYTES: usize = 210;

/// Chunk `c` (of eight) of a Q6_K block's values: four low bits from a nibble of bytes 0..128,
/// two high bits from bytes 128..192.
#[inline(always)]
unsafe fn q6k_chunk<L: Load>(l: &L, c: usize) -> __m256i {
    let (h, s) = (c / 4, c % 4);
    let ql = l.at(64 * h + 32 * (s % 2));
    let ql = if s < 2 {
        ql
    } else {
        _mm256_srli_epi16::<4>(ql)
    };
    let low = _mm256_and_si256(ql, _mm256_set1_epi8(0x0F));
    // Bits 2s, 2s + 1 of each byte at 128 + 32h, moved to bits 4–5, masked and ORed in.
    let top = to_bit4(l.at(128 + 32 * h), 2 * s);
    _mm256_or_si256(low, _mm256_and_si256(top, _mm256_set1_epi8(0x30)))
}

/// Four rows' sums by half: lanes 0–3 the rows' first 16 values, 4–7 their last 16.
#[inline(always)]
unsafe fn by_half(v: &[__m256i]) -> __m256i {
    _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]))
}

impl<const PACKED: bool> Pass8 for Q6<PACKED> {
    type Rest = Q6K;
    const LANE_ROWS: [usize; R] = [0, 1, 2, 3, 4, 5, 6, 7];
    const UNIT: usize = 256;
    const BLOCK: usize = Q6K_BYTES;
    const PACKED: bool = PACKED;
    const WIDE_PASS: bool = true;
    const SCALE_FLOATS: usize = D_AT + R;
    fn row_bytes(len: usize) -> usize {
        len / 256 * Q6K_BYTES
    }
    #[inline(always)]
    unsafe fn scales(g: &Group, b: usize, sc: &mut [f32]) {
        q6_scales8::<PACKED>(g.p.add(b * g.step), &g.lanes, sc)
    }
    #[inline(always)]
    unsafe fn pass<D: Dot4, const TT: usize>(
        g: &Group,
        ahead: *const u8,
        x: &QuantX,
        t0: usize,
        all: Option<&[f32]>,
    ) -> [__m256; TT] {
        debug_assert_eq!(x.unit, 256);
        let mut here = [0f32; D_AT + R];
        let mut acc = [_mm256_setzero_ps(); TT];
        for b in 0..x.len / 256 {
            let sc = unit_scales::<Self>(g, b, all, &mut here);
            let at = Block256 {
                g,
                ahead,
                x,
                t0,
                b,
                sc,
            };
            let mut sums = [_mm256_setzero_si256(); TT];
            // Written out by chunk, so that the bytes chunks share (each high-bit vector
            // four chunks, each low-bit vector two) are loaded once.
            for h in 0..2 {
                for s in 0..4 {
                    q6_chunk_pass::<D, TT, PACKED>(&at, 4 * h + s, &mut sums);
                }
            }
            // The integers stay below 2^27 (16 halves of 16 values of 32 · 128 · 128).
            at.scale(sums, &mut acc);
        }
        acc
    }
}

/// Chunk `c` of block `b` of [`Q6`]'s pass: each token's byte products, the offset taken
/// off and each half times its scale, into its integer `sums`.
#[inline(always)]
unsafe fn q6_chunk_pass<D: Dot4, const TT: usize, const PACKED: bool>(
    at: &Block256,
    c: usize,
    sums: &mut [__m256i; TT],
) {
    let Block256 {
        g,
        ahead,
        x,
        t0,
        b,
        sc,
    } = *at;
    let xblocks = x.blocks();
    let p = g.p.add(b * g.step);
    fetch_share(ahead, 8 * b + c, Q6K_BYTES / 8);
    let mut w = [_mm256_setzero_si256(); R];
    if PACKED {
        for (k, w) in w.iter_mut().enumerate() {
            *w = q6k_chunk(&Turned(p, k), c);
        }
    } else {
        for (w, &o) in w.iter_mut().zip(&g.off) {
            *w = q6k_chunk(&Stored(p.offset(o)), c);
        }
    }
    let xb = 8 * b + c;
    let s_low = _mm256_castps_si256(reg(sc, 2 * c));
    let s_high = _mm256_castps_si256(reg(sc, 2 * c + 1));
    let wt = if TT > 1 && !PACKED { transpose8(&w) } else { w };
    for (k, acc) in sums.iter_mut().enumerate() {
        let t = t0 + k;
        let xq = x.q.as_ptr().add(t * x.len + 32 * xb);
        // Each half's sums start from the offset −32·Σq of the token's values.
        let offsets = x.q6_offsets.as_ptr().add(t * 2 * xblocks + 2 * xb);
        let off = [
            _mm256_set1_epi32(*offsets),
            _mm256_set1_epi32(*offsets.add(1)),
        ];
        // Rows 0–7's sums over the chunk's first 16 values, then its last 16.
        let halves = if TT > 1 || PACKED {
            [
                dot8t_from::<D>(off[0], &wt, xq, 0..4),
                dot8t_from::<D>(off[1], &wt, xq, 4..R),
            ]
        } else {
            let xv = _mm256_loadu_si256(xq as *const __m256i);
            let mut v = [_mm256_setzero_si256(); R];
            for (v, &w) in v.iter_mut().zip(&w) {
                *v = D::dot(w, xv);
            }
            // Rows 0–3's halves, rows 4–7's, regrouped by half.
            let (r0, r4) = (by_half(&v[..4]), by_half(&v[4..]));
            [
                _mm256_add_epi32(_mm256_permute2x128_si256::<0x20>(r0, r4), off[0]),
                _mm256_add_epi32(_mm256_permute2x128_si256::<0x31>(r0, r4), off[1]),
            ]
        };
        let low = _mm256_mullo_epi32(halves[0], s_low);
        let high = _mm256_mullo_epi32(halves[1], s_high);
        *acc = _mm256_add_epi32(*acc, _mm256_add_epi32(low, high));
    }
}
