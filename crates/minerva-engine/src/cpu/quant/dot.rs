//! The integer products: weight blocks unpacked once per tile of tokens, multiplied in 8-bit
//! against the quantized activations, accumulated in f32. One loop, written once, runs with
//! two kinds of lanes: AVX2 (`x86`, chosen at run time where the processor has it) and a
//! portable one that the compiler vectorizes for the target it builds for (NEON on aarch64).

use super::blocks::{Block, RowSrc, Unpacked};
use super::{QuantX, Rows};

/// Tokens whose products share one unpacked weight block.
const TILE: usize = 8;

/// How a block's values are held, and how 32 products of i8 weights and i8 activations are
/// summed and scaled into an accumulator:
/// `acc += s0 · Σ_{i<16} w_i x_i + s1 · Σ_{16≤i<32} w_i x_i`.
pub(super) trait Lanes {
    /// 32 unpacked values.
    type W: Copy;
    type Acc: Copy;
    fn zero_w() -> Self::W;
    fn zero() -> Self::Acc;
    /// # Safety
    /// The processor has the lanes' features.
    unsafe fn unpack<B: Block>(src: &RowSrc, b: usize, u: &mut Unpacked, w: &mut [Self::W; 8]);
    /// `B` says whether `w` is never negative and whether s1 may differ from s0.
    ///
    /// # Safety
    /// `x` points at 32 readable bytes; the processor has the lanes' features.
    unsafe fn chunk<B: Block>(acc: &mut Self::Acc, w: Self::W, x: *const i8, s0: f32, s1: f32);
    /// # Safety
    /// The processor has the lanes' features.
    unsafe fn sum(acc: Self::Acc) -> f32;
}

/// Rows `js` of the weight against every token of `x`: `out[(j − js.start) · n + t]`.
///
/// # Safety
/// The processor has `L`'s features; `x` holds whole 32-value blocks of the rows' length.
#[inline(always)]
pub(super) unsafe fn rows_loop<B: Block, L: Lanes>(
    rows: &Rows,
    js: std::ops::Range<usize>,
    x: &QuantX,
    out: &mut [f32],
) {
    let n = x.n;
    for (jj, j) in js.enumerate() {
        let src = rows.src(j);
        let o = &mut out[jj * n..(jj + 1) * n];
        let mut t0 = 0;
        while t0 + TILE <= n {
            tile::<B, L, TILE>(&src, x, t0, &mut o[t0..t0 + TILE]);
            t0 += TILE;
        }
        for t in t0..n {
            tile::<B, L, 1>(&src, x, t, &mut o[t..t + 1]);
        }
    }
}

/// One row against tokens `t0..t0 + TT`; a const tile size keeps the accumulators in
/// registers.
#[inline(always)]
unsafe fn tile<B: Block, L: Lanes, const TT: usize>(
    src: &RowSrc,
    x: &QuantX,
    t0: usize,
    out: &mut [f32],
) {
    let (chunks, subs, xblocks) = (B::ELEMS / 32, B::ELEMS / 16, x.blocks());
    let mut u = Unpacked::new();
    let mut w = [L::zero_w(); 8];
    let mut acc = [L::zero(); TT];
    let mut mins = [0f32; TT];
    for b in 0..x.len / B::ELEMS {
        L::unpack::<B>(src, b, &mut u, &mut w);
        if B::ELEMS == 32 {
            // One scale per block: kept in registers, with the min against the block's sum.
            let (sc, mn) = B::scale_min(src, b);
            for (k, a) in acc.iter_mut().enumerate() {
                let t = t0 + k;
                let dx = *x.d.get_unchecked(t * xblocks + b);
                let xq = x.q.as_ptr().add(t * x.len + 32 * b);
                L::chunk::<B>(a, w[0], xq, sc * dx, sc * dx);
                if B::HAS_MIN {
                    let s = x.s.as_ptr().add(t * 2 * xblocks + 2 * b);
                    mins[k] += mn * (*s + *s.add(1));
                }
            }
            continue;
        }
        B::scales(src, b, &mut u);
        for (c, &wc) in w[..chunks].iter().enumerate() {
            let (s0, s1) = (u.sc[2 * c], u.sc[2 * c + 1]);
            let xb = b * chunks + c;
            for (k, a) in acc.iter_mut().enumerate() {
                let t = t0 + k;
                let dx = *x.d.get_unchecked(t * xblocks + xb);
                let xq = x.q.as_ptr().add(t * x.len + 32 * xb);
                L::chunk::<B>(a, wc, xq, s0 * dx, s1 * dx);
            }
        }
        if B::HAS_MIN {
            for (k, m) in mins.iter_mut().enumerate() {
                let s = std::slice::from_raw_parts(
                    x.s.as_ptr().add((t0 + k) * 2 * xblocks + b * subs),
                    subs,
                );
                // Eight partial sums, so the compiler keeps them in one vector register.
                let mut part = [0f32; 8];
                for (i, (mn, sx)) in u.mn[..subs].iter().zip(s).enumerate() {
                    part[i % 8] += mn * sx;
                }
                *m += part.iter().sum::<f32>();
            }
        }
    }
    for k in 0..TT {
        out[k] = L::sum(acc[k]) + mins[k];
    }
}

/// Plain Rust lanes: two i32 sums per 32 values.
struct Portable;

impl Lanes for Portable {
    type W = [i8; 32];
    type Acc = f32;
    fn zero_w() -> [i8; 32] {
        [0; 32]
    }
    fn zero() -> f32 {
        0.0
    }
    #[inline(always)]
    unsafe fn unpack<B: Block>(src: &RowSrc, b: usize, u: &mut Unpacked, w: &mut [[i8; 32]; 8]) {
        B::values(src, b, &mut u.q);
        for (c, w) in w[..B::ELEMS / 32].iter_mut().enumerate() {
            w.copy_from_slice(&u.q[32 * c..32 * c + 32]);
        }
    }
    #[inline(always)]
    unsafe fn chunk<B: Block>(acc: &mut f32, w: [i8; 32], x: *const i8, s0: f32, s1: f32) {
        let x = std::slice::from_raw_parts(x, 32);
        let half = |r: std::ops::Range<usize>| -> i32 {
            w[r.clone()]
                .iter()
                .zip(&x[r])
                .map(|(&a, &b)| a as i32 * b as i32)
                .sum()
        };
        *acc += half(0..16) as f32 * s0 + half(16..32) as f32 * s1;
    }
    #[inline(always)]
    unsafe fn sum(acc: f32) -> f32 {
        acc
    }
}

/// Portable products for block type `B`.
pub fn portable<B: Block>(rows: &Rows, js: std::ops::Range<usize>, x: &QuantX, out: &mut [f32]) {
    // SAFETY: the portable lanes need no processor feature; `linear` checked x's shape.
    unsafe { rows_loop::<B, Portable>(rows, js, x, out) }
}
