//! The K-quants eight rows at a time, through [`block32::groups`]: Q4_K and Q5_K (one scale
//! and min per 32 values) and Q6_K (a scale per 16). Each 256-value block's scales and mins
//! are decoded once per row and laid out by sub-block (eight rows to a register); each
//! sub-block of 32 then goes as a Q4_1 block does: the eight rows' byte products summed into
//! one register, one float step for the eight.

use super::block32::{self, dot8, fetch_share, scale8, Dot4, Group, Pass8, Run, R};
use super::blocks::{Block, RowSrc, Unpacked, Q4K, Q5K, Q6K};
use super::dot::rows_loop;
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

/// The kernel over 256-value blocks.
pub(super) struct BySuper<B>(std::marker::PhantomData<B>);

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
        // Scales and mins by sub-block, then row: one register per sub-block. (Decoded in
        // registers a row at a time and gathered by sub-block, prompts ran 5 % slower.)
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
                    let sums = dot8::<D>(&w, x.q.as_ptr().add(t * x.len + 32 * xb));
                    *a = scale8(*a, sums, d, m, x, t * xblocks + xb);
                }
            }
        }
        acc
    }
}

impl<B: Super> Run for BySuper<B> {
    #[inline(always)]
    unsafe fn run<L: Dot4 + super::dot::Lanes>(
        rows: &Rows,
        js: Range<usize>,
        x: &QuantX,
        out: &mut [f32],
    ) {
        // Every token count the same way: see `block32::ByBlock`'s `run`.
        let done = block32::groups::<Self, L>(rows, js.clone(), x, out);
        rows_loop::<B, L>(rows, js.start + done..js.end, x, &mut out[done * x.n..]);
    }
}

/// Q6_K, whose scales change every 16 values: eight rows at a time, each chunk's byte
/// products summed by row and half (four rows' halves to a register) and scaled by
/// `d·scale` per row and half.
pub(super) struct Q6;

const Q6K_BYTES: usize = 210;

/// Chunk `c` (of eight) of a Q6_K block's values: four low bits from a nibble of bytes 0..128,
/// two high bits from bytes 128..192.
#[inline(always)]
unsafe fn q6k_chunk(blk: *const u8, c: usize) -> __m256i {
    let (h, s) = (c / 4, c % 4);
    let ql = _mm256_loadu_si256(blk.add(64 * h + 32 * (s % 2)) as *const __m256i);
    let ql = if s < 2 {
        ql
    } else {
        _mm256_srli_epi16::<4>(ql)
    };
    let low = _mm256_and_si256(ql, _mm256_set1_epi8(0x0F));
    let qh = _mm256_loadu_si256(blk.add(128 + 32 * h) as *const __m256i);
    let top = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s as i32));
    let top = _mm256_and_si256(top, _mm256_set1_epi8(3));
    _mm256_or_si256(low, _mm256_slli_epi16::<4>(top))
}

/// Four rows' sums by half: lanes 0–3 the rows' first 16 values, 4–7 their last 16.
#[inline(always)]
unsafe fn by_half(v: &[__m256i]) -> __m256i {
    _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]))
}

impl Pass8 for Q6 {
    const LANE_ROWS: [usize; R] = [0, 1, 2, 3, 4, 5, 6, 7];
    fn row_bytes(len: usize) -> usize {
        len / 256 * Q6K_BYTES
    }
    #[inline(always)]
    unsafe fn pass<D: Dot4, const TT: usize>(
        g: &Group,
        ahead: *const u8,
        x: &QuantX,
        t0: usize,
    ) -> [__m256; TT] {
        let xblocks = x.blocks();
        // Rows 0–3 and 4–7: lanes 0–3 the chunks' first halves, 4–7 their second halves.
        let (mut low, mut high) = ([_mm256_setzero_ps(); TT], [_mm256_setzero_ps(); TT]);
        // d·scale by chunk, then four rows, then lane (half · 4 + row % 4).
        let mut sc = [[[0f32; 8]; 2]; 8];
        for b in 0..x.len / 256 {
            let p = g.p.add(b * Q6K_BYTES);
            fetch_share(ahead, b, Q6K_BYTES);
            for (r, &o) in g.off.iter().enumerate() {
                let blk = std::slice::from_raw_parts(p.offset(o), Q6K_BYTES);
                let d = super::blocks::f16_at(blk, 208);
                for (c, sc) in sc.iter_mut().enumerate() {
                    for h in 0..2 {
                        sc[r / 4][4 * h + r % 4] = d * blk[192 + 2 * c + h] as i8 as f32;
                    }
                }
            }
            for (c, sc) in sc.iter().enumerate() {
                let mut w = [_mm256_setzero_si256(); R];
                for (w, &o) in w.iter_mut().zip(&g.off) {
                    *w = q6k_chunk(p.offset(o), c);
                }
                let (s_low, s_high) = (
                    _mm256_loadu_ps(sc[0].as_ptr()),
                    _mm256_loadu_ps(sc[1].as_ptr()),
                );
                let xb = 8 * b + c;
                for k in 0..TT {
                    let t = t0 + k;
                    let xq = x.q.as_ptr().add(t * x.len + 32 * xb);
                    let xv = _mm256_loadu_si256(xq as *const __m256i);
                    let mut v = [_mm256_setzero_si256(); R];
                    for (v, &w) in v.iter_mut().zip(&w) {
                        *v = D::dot(w, xv);
                    }
                    let dx = _mm256_set1_ps(*x.d.get_unchecked(t * xblocks + xb));
                    // The offset −32 against d·Σq of each half.
                    let s = x.s.as_ptr().add(t * 2 * xblocks + 2 * xb);
                    let s = _mm256_insertf128_ps::<1>(
                        _mm256_castps128_ps256(_mm_set1_ps(*s)),
                        _mm_set1_ps(*s.add(1)),
                    );
                    let s = _mm256_mul_ps(s, _mm256_set1_ps(-32.0));
                    let lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(by_half(&v[..4])), dx, s);
                    let hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(by_half(&v[4..])), dx, s);
                    low[k] = _mm256_fmadd_ps(s_low, lo, low[k]);
                    high[k] = _mm256_fmadd_ps(s_high, hi, high[k]);
                }
            }
        }
        let mut out = [_mm256_setzero_ps(); TT];
        for ((o, l), h) in out.iter_mut().zip(low).zip(high) {
            *o = _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(l, h),
                _mm256_permute2f128_ps::<0x31>(l, h),
            );
        }
        out
    }
}

impl Run for Q6 {
    #[inline(always)]
    unsafe fn run<L: Dot4 + super::dot::Lanes>(
        rows: &Rows,
        js: Range<usize>,
        x: &QuantX,
        out: &mut [f32],
    ) {
        let done = block32::groups::<Self, L>(rows, js.clone(), x, out);
        rows_loop::<Q6K, L>(rows, js.start + done..js.end, x, &mut out[done * x.n..]);
    }
}
