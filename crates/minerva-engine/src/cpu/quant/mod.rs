//! Products on the stored blocks: the activations are quantized once per product to 8 bits,
//! one f32 scale per 32 values (as ggml's Q8_0), or per 256 for the K-quants (as ggml's
//! Q8_K: [`unit_of`]); every weight block type is unpacked to small integers, and the
//! products run in integers with f32 scales. Only the reference path
//! (`matmul::linear_reference`) widens weights to f32.
//!
//! What the 8-bit activations cost: each value moves by at most half a step, `amax / 254` of
//! the values sharing its scale, so a product moves by at most `Σ_blocks amax_b / 254 · Σ|w|`
//! over the block — about 0.3 % of `Σ|w·x|` in the worst case for blocks of 32, more where
//! one large value sets the step of 256, and far less on average (the kernel tests bound it
//! per type with the unit's amax).

#[cfg(target_arch = "x86_64")]
mod block32;
mod blocks;
mod dot;
#[cfg(target_arch = "x86_64")]
mod ksuper;
pub mod packed;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod turned;
#[cfg(target_arch = "x86_64")]
mod x86;

use blocks::{Block, RowSrc};
use minerva_formats::{DType, TensorData, TensorView};
use std::ops::Range;

/// Activations as 8-bit blocks: `x ≈ d[block] · q`, and per 16 values `s = d · Σq` (for the
/// block types whose weights carry a min) and `Σq` itself (for those whose values are
/// offset, taken off in integers).
#[derive(Default)]
pub struct QuantX {
    pub n: usize,
    pub len: usize,
    /// Values that share one scale: 32, or 256 for the K-quants' products ([`unit_of`]).
    /// `d` is still stored per 32 values, the same for each 32 of a unit.
    pub unit: usize,
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub s: Vec<f32>,
    pub sums: Vec<i32>,
    /// Per 32 values, `s` of the two halves added: the term the eight-row passes scale
    /// their mins by, added once here rather than in every pass.
    pub s32: Vec<f32>,
    /// Per 16 values, `−32·Σq`: where Q6_K's sums start (its values are stored 32 up), so
    /// that its passes read the offset with one broadcast.
    pub q6_offsets: Vec<i32>,
}

impl QuantX {
    /// 32-value blocks per token.
    pub fn blocks(&self) -> usize {
        self.len / 32
    }

    /// Quantizes `n` rows of `len` values (a multiple of `unit`, 32 or 256), one scale per
    /// `unit` values, reusing the buffers; many rows are spread over the cores.
    pub fn quantize(&mut self, x: &[f32], n: usize, len: usize, unit: usize) {
        use rayon::prelude::*;
        debug_assert!(unit == 32 || unit == 256);
        debug_assert!(len.is_multiple_of(unit) && x.len() >= n * len);
        self.n = n;
        self.len = len;
        self.unit = unit;
        self.q.resize(n * len, 0);
        self.d.resize(n * len / 32, 0.0);
        self.s.resize(n * len / 16, 0.0);
        self.sums.resize(n * len / 16, 0);
        let rows = x[..n * len]
            .par_chunks(len)
            .zip(self.q.par_chunks_mut(len))
            .zip(self.d.par_chunks_mut(len / 32))
            .zip(self.s.par_chunks_mut(len / 16))
            .zip(self.sums.par_chunks_mut(len / 16));
        type Row<'a> = (
            (((&'a [f32], &'a mut [i8]), &'a mut [f32]), &'a mut [f32]),
            &'a mut [i32],
        );
        let one = |((((x, q), d), s), sums): Row| {
            #[cfg(target_arch = "x86_64")]
            if Lanes::chosen() != Lanes::Portable {
                // SAFETY: lanes other than the portable ones are chosen only where the
                // processor has AVX2.
                return unsafe { x86::quantize_row(x, unit, q, d, s, sums) };
            }
            quantize_row(x, unit, q, d, s, sums)
        };
        if n >= 8 {
            rows.for_each(one);
        } else {
            // A few rows are quicker on this thread than handed to others.
            rows.into_par_iter().with_min_len(n).for_each(one);
        }
        self.s32.clear();
        self.s32.extend(self.s.chunks_exact(2).map(|h| h[0] + h[1]));
        self.q6_offsets.clear();
        self.q6_offsets.extend(self.sums.iter().map(|&q| -32 * q));
    }
}

/// A row's blocks of 32 values with the places of their quantized values, scale, and sums
/// of halves (scaled, and as integers).
type RowBlock<'a> = (
    &'a [f32],
    &'a mut [i8],
    &'a mut f32,
    &'a mut [f32],
    &'a mut [i32],
);

fn row_blocks<'a>(
    x: &'a [f32],
    q: &'a mut [i8],
    d: &'a mut [f32],
    s: &'a mut [f32],
    sums: &'a mut [i32],
) -> impl Iterator<Item = RowBlock<'a>> {
    let blocks = x.chunks_exact(32).zip(q.chunks_exact_mut(32));
    let blocks = blocks.zip(d.iter_mut()).zip(s.chunks_exact_mut(2));
    let blocks = blocks.zip(sums.chunks_exact_mut(2));
    blocks.map(|((((x, q), d), s), sums)| (x, q, d, s, sums))
}

/// Which activation blocks a weight type's products take: 256 values to a scale for the
/// K-quants (as ggml's Q8_K), whose eight-row passes then sum a whole 256-value block in
/// integers; 32 for the others (as ggml's Q8_0).
pub fn unit_of(dtype: DType) -> usize {
    match dtype {
        DType::Q2_K | DType::Q3_K | DType::Q4_K | DType::Q5_K | DType::Q6_K => 256,
        _ => 32,
    }
}

/// The largest magnitude of each `unit` values of a row, from those of its 32-value blocks
/// (`block_amax`), written once per 32 values.
fn unit_amax(x: &[f32], unit: usize, amax: &mut [f32], block_amax: impl Fn(&[f32]) -> f32) {
    for (xu, au) in x.chunks_exact(unit).zip(amax.chunks_exact_mut(unit / 32)) {
        let m = xu.chunks_exact(32).map(&block_amax).fold(0f32, f32::max);
        au.fill(m);
    }
}

/// One row in blocks of 32: `d = amax / 127` (the amax of the block's `unit` values),
/// `q = round(x / d)` (to nearest, ties to even), and per 16 values `Σq` and `s = d · Σq`.
/// (`x86::quantize_row` gives the same bits on AVX2.)
fn quantize_row(
    x: &[f32],
    unit: usize,
    q: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
    sums: &mut [i32],
) {
    // The unit's amax goes through `d` before `d` is set from it.
    unit_amax(x, unit, d, |xb| xb.iter().fold(0f32, |m, v| m.max(v.abs())));
    for (xb, qb, d, s, halves) in row_blocks(x, q, d, s, sums) {
        let amax = *d;
        *d = amax / 127.0;
        let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
        let mut sums = [0i32; 2];
        for (i, (q, v)) in qb.iter_mut().zip(xb).enumerate() {
            *q = ((v * inv + MAGIC) - MAGIC) as i8;
            sums[i / 16] += *q as i32;
        }
        s[0] = *d * sums[0] as f32;
        s[1] = *d * sums[1] as f32;
        halves.copy_from_slice(&sums);
    }
}

/// Adding and taking away 1.5 · 2^23 rounds |v| < 2^22 to the nearest integer, ties to even,
/// in two adds (f32::round is a libm call on baseline x86-64).
const MAGIC: f32 = 12_582_912.0;

/// The weight rows a product reads: output `j` is stored row `base + j · stride`.
pub struct Rows<'a> {
    view: &'a TensorView<'a>,
    base: usize,
    stride: usize,
    /// Whether the rows are packed eight at a time ([`packed`]).
    packed: bool,
    /// Bytes per row of the packed values, and of the scales (and biases) of split packs.
    w_bytes: usize,
    s_bytes: usize,
    bits: u8,
    group: usize,
}

impl<'a> Rows<'a> {
    /// The rows, or None where the kernels cannot read them: a packed matrix is read only
    /// in whole groups of eight, from a group's first row on.
    pub fn new(
        view: &'a TensorView<'a>,
        base: usize,
        stride: usize,
        packed: bool,
    ) -> Option<Rows<'a>> {
        if packed && (stride != 1 || !base.is_multiple_of(packed::ROWS)) {
            return None;
        }
        let row = view.row_len();
        let (w_bytes, s_bytes, bits, group) = match (view.data, view.dtype) {
            (TensorData::Plain(_), dt) => (dt.row_bytes(row)?, 0, 0, 0),
            (TensorData::MlxAffine { scale_dtype, .. }, DType::MlxAffine { bits, group }) => {
                let group = group as usize;
                if !(2..=8).contains(&bits) || group == 0 || !group.is_multiple_of(32) {
                    return None;
                }
                let s = (row / group) * scale_dtype.block_bytes();
                (row * bits as usize / 8, s, bits, group)
            }
            (TensorData::MlxMxfp4 { .. } | TensorData::HfMxfp4 { .. }, _) => {
                (row / 2, row / 32, 4, 32)
            }
            _ => return None,
        };
        Some(Rows {
            view,
            base,
            stride,
            packed,
            w_bytes,
            s_bytes,
            bits,
            group,
        })
    }

    /// Where output `j`'s packed values start: `src(j).w`, without building the rest. Where
    /// the rows are packed, where the group of output `j` (a multiple of eight) starts.
    #[cfg(target_arch = "x86_64")]
    fn w_ptr(&self, j: usize) -> *const u8 {
        match self.view.data {
            TensorData::Plain(b) if self.packed => {
                let r = self.base + j;
                debug_assert!(r.is_multiple_of(packed::ROWS));
                b[r * self.w_bytes..].as_ptr()
            }
            TensorData::Plain(b) => b[(self.base + j * self.stride) * self.w_bytes..].as_ptr(),
            _ => self.src(j).w.as_ptr(),
        }
    }

    /// Where the packed group from output `j` on starts, if the matrix holds it: the bytes a
    /// task's last group fetches ahead, the next task's (which the pool's other threads may
    /// run, but which stream on from this one's).
    #[cfg(target_arch = "x86_64")]
    fn packed_group(&self, j: usize) -> Option<*const u8> {
        match self.view.data {
            TensorData::Plain(b) if self.packed => {
                let r = self.base + j;
                let end = (r + packed::ROWS) * self.w_bytes;
                (end <= b.len()).then(|| b[r * self.w_bytes..].as_ptr())
            }
            _ => None,
        }
    }

    fn src(&self, j: usize) -> RowSrc<'a> {
        debug_assert!(!self.packed, "packed rows are read eight at a time");
        let r = self.base + j * self.stride;
        let at = |b: &'a [u8], per: usize| &b[r * per..(r + 1) * per];
        let (w, scales, biases, scale_dtype) = match self.view.data {
            TensorData::Plain(b) => (at(b, self.w_bytes), &[][..], &[][..], DType::F32),
            TensorData::MlxAffine {
                weight,
                scales,
                biases,
                scale_dtype,
            } => (
                at(weight, self.w_bytes),
                at(scales, self.s_bytes),
                at(biases, self.s_bytes),
                scale_dtype,
            ),
            TensorData::MlxMxfp4 { weight: w, scales }
            | TensorData::HfMxfp4 { blocks: w, scales } => (
                at(w, self.w_bytes),
                at(scales, self.s_bytes),
                &[][..],
                DType::U8,
            ),
        };
        RowSrc {
            w,
            scales,
            biases,
            scale_dtype,
            bits: self.bits,
            group: self.group,
        }
    }
}

/// Products of rows `js` with every token of `x`, into `out[(j − js.start) · n + t]`.
pub type Kernel = fn(&Rows, Range<usize>, &QuantX, &mut [f32]);

/// The instruction sets a kernel's lanes use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lanes {
    /// AVX2 with AVX-512 VNNI byte products (on 256 bits).
    Vnni,
    Avx2,
    /// Plain Rust that the compiler vectorizes for the target it builds for.
    Portable,
}

impl Lanes {
    /// Every kind of lanes this processor can run, best first.
    pub fn available() -> Vec<Lanes> {
        let mut all = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if x86::has_vnni() {
                all.push(Lanes::Vnni);
            }
            if x86::has_avx2() {
                all.push(Lanes::Avx2);
            }
        }
        all.push(Lanes::Portable);
        all
    }

    /// The best available, or the one `MINERVA_CPU_LANES` (vnni, avx2, portable) names where
    /// this processor has it; read once.
    pub fn chosen() -> Lanes {
        static CHOSEN: std::sync::OnceLock<Lanes> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let all = Lanes::available();
            let want = std::env::var("MINERVA_CPU_LANES").unwrap_or_default();
            all.iter()
                .copied()
                .find(|l| l.name() == want)
                .unwrap_or(all[0])
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Lanes::Vnni => "vnni",
            Lanes::Avx2 => "avx2",
            Lanes::Portable => "portable",
        }
    }
}

fn pick<B: Block>(lanes: Lanes) -> Kernel {
    match lanes {
        #[cfg(target_arch = "x86_64")]
        Lanes::Vnni => x86::vnni::<B>,
        #[cfg(target_arch = "x86_64")]
        Lanes::Avx2 => x86::avx2::<B>,
        _ => dot::portable::<B>,
    }
}

/// [`pick`] for the block types of 32 values that have a kernel over eight rows at a time.
#[cfg(target_arch = "x86_64")]
fn pick32<B: block32::Block32>(lanes: Lanes) -> Kernel {
    match lanes {
        Lanes::Vnni => block32::vnni::<block32::ByBlock<B>>,
        Lanes::Avx2 if !B::WIDE => block32::avx2::<block32::ByBlock<B>>,
        _ => pick::<B>(lanes),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn pick32<B: Block>(lanes: Lanes) -> Kernel {
    pick::<B>(lanes)
}

/// [`pick`] for the K-quants that have a kernel over eight rows at a time for prompts.
#[cfg(target_arch = "x86_64")]
fn pick_super<B: ksuper::Super>(lanes: Lanes) -> Kernel {
    match lanes {
        Lanes::Vnni => block32::vnni::<ksuper::BySuper<B, false>>,
        Lanes::Avx2 => block32::avx2::<ksuper::BySuper<B, false>>,
        _ => pick::<B>(lanes),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn pick_super<B: Block>(lanes: Lanes) -> Kernel {
    pick::<B>(lanes)
}

/// Q6_K, whose one-token kernel takes a block's eight chunks in one register.
fn pick_q6k(lanes: Lanes) -> Kernel {
    match lanes {
        #[cfg(target_arch = "x86_64")]
        Lanes::Vnni => block32::vnni::<ksuper::Q6<false>>,
        #[cfg(target_arch = "x86_64")]
        Lanes::Avx2 => block32::avx2::<ksuper::Q6<false>>,
        _ => pick::<blocks::Q6K>(lanes),
    }
}

/// The integer kernel for a stored dtype on the chosen lanes, or None where only the
/// reference path decodes it (f32/f16/bf16 weights, whose products stay in f32); for rows
/// packed eight at a time where `packed`.
pub fn kernel(dtype: DType, packed: bool) -> Option<Kernel> {
    if packed {
        packed_kernel_on(dtype, Lanes::chosen())
    } else {
        kernel_on(dtype, Lanes::chosen())
    }
}

/// The kernel over rows packed eight at a time, for the types and lanes that
/// [`packed::packs`] packs.
pub fn packed_kernel_on(dtype: DType, lanes: Lanes) -> Option<Kernel> {
    #[cfg(target_arch = "x86_64")]
    {
        use block32::{avx2, vnni};
        use blocks::{Q4K, Q5K};
        use ksuper::{BySuper, Q6};
        use turned::Packed;
        let k: Kernel = match (dtype, lanes) {
            (DType::Q4_K, Lanes::Vnni) => vnni::<BySuper<Q4K, true>>,
            (DType::Q4_K, Lanes::Avx2) => avx2::<BySuper<Q4K, true>>,
            (DType::Q5_K, Lanes::Vnni) => vnni::<BySuper<Q5K, true>>,
            (DType::Q5_K, Lanes::Avx2) => avx2::<BySuper<Q5K, true>>,
            (DType::Q6_K, Lanes::Vnni) => vnni::<Q6<true>>,
            (DType::Q6_K, Lanes::Avx2) => avx2::<Q6<true>>,
            (DType::Q4_0, Lanes::Vnni) => vnni::<Packed<blocks::Q4_0>>,
            (DType::Q4_0, Lanes::Avx2) => avx2::<Packed<blocks::Q4_0>>,
            (DType::Q4_1, Lanes::Vnni) => vnni::<Packed<blocks::Q4_1>>,
            (DType::Q4_1, Lanes::Avx2) => avx2::<Packed<blocks::Q4_1>>,
            (DType::Q8_0, Lanes::Vnni) => vnni::<Packed<blocks::Q8_0>>,
            _ => return None,
        };
        Some(k)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, lanes);
        None
    }
}

/// [`kernel`] on given lanes (which the processor must have: see [`Lanes::available`]).
pub fn kernel_on(dtype: DType, lanes: Lanes) -> Option<Kernel> {
    Some(match dtype {
        DType::Q4_0 => pick32::<blocks::Q4_0>(lanes),
        DType::Q4_1 => pick32::<blocks::Q4_1>(lanes),
        DType::Q5_0 => pick32::<blocks::Q5_0>(lanes),
        DType::Q5_1 => pick32::<blocks::Q5_1>(lanes),
        DType::Q8_0 => pick32::<blocks::Q8_0>(lanes),
        DType::Q2_K => pick::<blocks::Q2K>(lanes),
        DType::Q3_K => pick::<blocks::Q3K>(lanes),
        DType::Q4_K => pick_super::<blocks::Q4K>(lanes),
        DType::Q5_K => pick_super::<blocks::Q5K>(lanes),
        DType::Q6_K => pick_q6k(lanes),
        DType::MXFP4 => pick::<blocks::Mxfp4>(lanes),
        DType::MlxMxfp4 | DType::HfMxfp4 => pick::<blocks::PairsMxfp4>(lanes),
        DType::MlxAffine { .. } => pick::<blocks::MlxAffine>(lanes),
        _ => return None,
    })
}
