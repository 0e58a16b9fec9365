//! The kernels over rows packed eight at a time ([`super::packed`]) for the block types of 32
//! values: a block's eight scales are one load, and each register of values one load (and,
//! for nibbles, a split), already turned for [`dot8t`]. They compute the integers and float
//! steps of [`block32`]'s kernels over the same rows, so the same bits.

use super::block32::{self, dot8t, scale8, Block32, Dot4, Group, Pass8, R, SCALES};
use super::blocks::{Q4_0, Q4_1, Q8_0};
use super::QuantX;
use std::arch::x86_64::*;

/// A block type of 32 values whose kernel reads it packed.
pub(super) trait Turned32: Block32 {
    /// Bytes of the eight rows' scales (and mins) before their values.
    const HEAD: usize;
    /// The eight rows' scales and mins, from the packed block at `p`: by default eight f16
    /// scales side by side, the min their multiple.
    ///
    /// # Safety
    /// `p` points at a whole packed block; the processor has AVX2 and F16C.
    #[inline(always)]
    unsafe fn scales_at(p: *const u8) -> (__m256, __m256) {
        let d = f16x8(p);
        (d, Self::min(d, d))
    }
    /// The eight rows' values, from the packed block's values at `q`: register k holds
    /// values 4k..4k + 4 of row r in lane r, unsigned.
    ///
    /// # Safety
    /// `q` points at a whole packed block's values; the processor has AVX2.
    unsafe fn values_at(q: *const u8) -> [__m256i; R];
}

#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// Eight f16 scales side by side.
#[inline(always)]
unsafe fn f16x8(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// Nibbles in ggml's order (value j in the low nibble of byte j, j + 16 in its high one):
/// words k of the eight rows hold values 4k.. in their low nibbles and 4k + 16.. in their
/// high ones.
#[inline(always)]
unsafe fn nibbles(q: *const u8) -> [__m256i; R] {
    let m = _mm256_set1_epi8(0x0F);
    let mut w = [_mm256_setzero_si256(); R];
    for k in 0..R / 2 {
        let v = load(q.add(32 * k));
        w[k] = _mm256_and_si256(v, m);
        w[R / 2 + k] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m);
    }
    w
}

impl Turned32 for Q4_0 {
    const HEAD: usize = 2 * R;
    #[inline(always)]
    unsafe fn values_at(q: *const u8) -> [__m256i; R] {
        nibbles(q)
    }
}

impl Turned32 for Q4_1 {
    const HEAD: usize = 4 * R;
    #[inline(always)]
    unsafe fn scales_at(p: *const u8) -> (__m256, __m256) {
        // Each row's word is its scale and min.
        block32::halves(load(p))
    }
    #[inline(always)]
    unsafe fn values_at(q: *const u8) -> [__m256i; R] {
        nibbles(q)
    }
}

impl Turned32 for Q8_0 {
    const HEAD: usize = 2 * R;
    #[inline(always)]
    unsafe fn values_at(q: *const u8) -> [__m256i; R] {
        let mut w = [_mm256_setzero_si256(); R];
        for (k, w) in w.iter_mut().enumerate() {
            *w = _mm256_xor_si256(load(q.add(32 * k)), _mm256_set1_epi8(-128));
        }
        w
    }
}

/// The kernel over packed blocks of 32.
pub(super) struct Packed<B>(std::marker::PhantomData<B>);

impl<B: Turned32> Pass8 for Packed<B> {
    type Rest = B;
    const LANE_ROWS: [usize; R] = [0, 1, 2, 3, 4, 5, 6, 7];
    const UNIT: usize = 32;
    const BLOCK: usize = B::BYTES;
    const PACKED: bool = true;
    fn row_bytes(len: usize) -> usize {
        len / 32 * B::BYTES
    }
    #[inline(always)]
    unsafe fn scales(g: &Group, b: usize, sc: &mut [f32]) {
        let (d, mn) = B::scales_at(g.p.add(b * g.step));
        block32::put_scales(sc, d, mn);
    }
    #[inline(always)]
    unsafe fn pass<D: Dot4, const TT: usize>(
        g: &Group,
        ahead: *const u8,
        x: &QuantX,
        t0: usize,
        all: Option<&[f32]>,
    ) -> [__m256; TT] {
        let xblocks = x.blocks();
        let mut acc = [_mm256_setzero_ps(); TT];
        for b in 0..xblocks {
            let p = g.p.add(b * g.step);
            // The next group's share into L2: without, decode ran 3 % slower and prompts
            // 10 % (the hardware prefetchers alone fall behind).
            block32::fetch_share(ahead, b, B::BYTES);
            // One token reads the scales beside the values, with no store between.
            let (d, mn) = match all {
                Some(all) => {
                    let sc = all.get_unchecked(b * SCALES..);
                    (block32::reg(sc, 0), block32::reg(sc, 1))
                }
                None => B::scales_at(p),
            };
            let wt = B::values_at(p.add(B::HEAD));
            for (k, a) in acc.iter_mut().enumerate() {
                let t = t0 + k;
                let sums = dot8t::<D>(&wt, x.q.as_ptr().add(t * x.len + 32 * b), 0..R);
                *a = scale8(*a, sums, d, mn, x, t * xblocks + b);
            }
        }
        acc
    }
}
