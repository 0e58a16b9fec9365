//! Prompts (two tokens or more) eight weight rows at a time for the K-quants with one scale
//! and min per 32 values, Q4_K and Q5_K, through [`block32::groups`]: each 256-value block's
//! scales and mins are decoded once per row and laid out by sub-block (eight rows to a
//! register), then each sub-block of 32 goes as a Q4_1 block does: the eight rows' byte
//! products summed into one register, one float step for the eight.

use super::block32::{self, across, fetch_share, Dot4, Group, Pass8, R};
use super::blocks::{Block, RowSrc, Unpacked, Q4K, Q5K};
use super::dot::rows_loop;
use super::x86::{self, Avx2, Vnni};
use super::{QuantX, Rows};
use minerva_formats::DType;
use std::arch::x86_64::*;
use std::ops::Range;

/// A K-quant of 256 values in eight sub-blocks of 32, each with its own scale and min.
pub(super) trait Super: Block {
    const BYTES: usize;
    /// Sub-block `j`'s 32 values (unsigned, below 32).
    ///
    /// # Safety
    /// `blk` points at a whole block; the processor has AVX2.
    unsafe fn sub(blk: *const u8, j: usize) -> __m256i;
}

/// Sub-block `j` of nibbles at `qs`: sub-blocks 2c and 2c + 1 are the low and high nibbles
/// of bytes 32c..32c + 32.
#[inline(always)]
unsafe fn nibbles(qs: *const u8, j: usize) -> __m256i {
    let v = _mm256_loadu_si256(qs.add(32 * (j / 2)) as *const __m256i);
    let v = if j.is_multiple_of(2) {
        v
    } else {
        _mm256_srli_epi16::<4>(v)
    };
    _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
}

impl Super for Q4K {
    const BYTES: usize = 144;
    #[inline(always)]
    unsafe fn sub(blk: *const u8, j: usize) -> __m256i {
        nibbles(blk.add(16), j)
    }
}

impl Super for Q5K {
    const BYTES: usize = 176;
    #[inline(always)]
    unsafe fn sub(blk: *const u8, j: usize) -> __m256i {
        // Bit j of each of the 32 bytes at 16 is the fifth bit.
        let qh = _mm256_loadu_si256(blk.add(16) as *const __m256i);
        let bit = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32));
        let bit = _mm256_and_si256(bit, _mm256_set1_epi8(1));
        _mm256_or_si256(nibbles(blk.add(48), j), _mm256_slli_epi16::<4>(bit))
    }
}

/// The pass over 256-value blocks.
struct BySuper<B>(std::marker::PhantomData<B>);

impl<B: Super> Pass8 for BySuper<B> {
    const LANE_ROWS: [usize; R] = [0, 1, 2, 3, 4, 5, 6, 7];
    fn row_bytes(len: usize) -> usize {
        len / 256 * B::BYTES
    }
    #[inline(always)]
    unsafe fn pass<D: Dot4, const TT: usize>(
        g: &Group,
        ahead: *const u8,
        x: &QuantX,
        t0: usize,
    ) -> [__m256; TT] {
        let xblocks = x.blocks();
        let mut acc = [_mm256_setzero_ps(); TT];
        let mut u = Unpacked::new();
        // Scales and mins by sub-block, then row: one register per sub-block.
        let (mut sc, mut mn) = ([[0f32; R]; 8], [[0f32; R]; 8]);
        for b in 0..x.len / 256 {
            let p = g.p.add(b * B::BYTES);
            fetch_share(ahead, b, B::BYTES);
            for (r, &o) in g.off.iter().enumerate() {
                let src = RowSrc {
                    w: std::slice::from_raw_parts(p.offset(o), B::BYTES),
                    scales: &[],
                    biases: &[],
                    scale_dtype: DType::F32,
                    bits: 0,
                    group: 0,
                };
                B::scales(&src, 0, &mut u);
                for j in 0..8 {
                    (sc[j][r], mn[j][r]) = (u.sc[2 * j], u.mn[2 * j]);
                }
            }
            for j in 0..8 {
                // Plain loops, not `array::from_fn`: its closure would not inherit the
                // target features.
                let mut w = [_mm256_setzero_si256(); R];
                for (w, &o) in w.iter_mut().zip(&g.off) {
                    *w = B::sub(p.offset(o), j);
                }
                let d = _mm256_loadu_ps(sc[j].as_ptr());
                let m = _mm256_loadu_ps(mn[j].as_ptr());
                let xb = 8 * b + j;
                for (k, a) in acc.iter_mut().enumerate() {
                    let t = t0 + k;
                    let xq = x.q.as_ptr().add(t * x.len + 32 * xb);
                    let xv = _mm256_loadu_si256(xq as *const __m256i);
                    let mut v = [_mm256_setzero_si256(); R];
                    for (v, &w) in v.iter_mut().zip(&w) {
                        *v = D::dot(w, xv);
                    }
                    let sums = _mm256_cvtepi32_ps(across(v));
                    let dx = _mm256_set1_ps(*x.d.get_unchecked(t * xblocks + xb));
                    let s = x.s.as_ptr().add(t * 2 * xblocks + 2 * xb);
                    *a = _mm256_fmadd_ps(sums, _mm256_mul_ps(d, dx), *a);
                    *a = _mm256_fmadd_ps(m, _mm256_set1_ps(*s + *s.add(1)), *a);
                }
            }
        }
        acc
    }
}

#[inline(always)]
unsafe fn run<B: Super, L: Dot4 + super::dot::Lanes>(
    rows: &Rows,
    js: Range<usize>,
    x: &QuantX,
    out: &mut [f32],
) {
    // One token goes a row at a time: one stream that the hardware prefetchers follow.
    let done = if x.n >= 2 {
        block32::groups::<BySuper<B>, L>(rows, js.clone(), x, out)
    } else {
        0
    };
    rows_loop::<B, L>(rows, js.start + done..js.end, x, &mut out[done * x.n..]);
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn entry_vnni<B: Super>(rows: &Rows, js: Range<usize>, x: &QuantX, out: &mut [f32]) {
    run::<B, Vnni>(rows, js, x, out)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn entry_avx2<B: Super>(rows: &Rows, js: Range<usize>, x: &QuantX, out: &mut [f32]) {
    run::<B, Avx2>(rows, js, x, out)
}

/// VNNI products for K-quant `B`; handed out only where `x86::has_vnni()`.
pub fn vnni<B: Super>(rows: &Rows, js: Range<usize>, x: &QuantX, out: &mut [f32]) {
    debug_assert!(x86::has_vnni());
    // SAFETY: only reachable when the processor has AVX2, FMA, F16C and AVX-512 VNNI with VL.
    unsafe { entry_vnni::<B>(rows, js, x, out) }
}

/// AVX2 products for K-quant `B`; handed out only where `x86::has_avx2()`.
pub fn avx2<B: Super>(rows: &Rows, js: Range<usize>, x: &QuantX, out: &mut [f32]) {
    debug_assert!(x86::has_avx2());
    // SAFETY: only reachable when the processor has AVX2, FMA and F16C.
    unsafe { entry_avx2::<B>(rows, js, x, out) }
}
