//! Products on the stored blocks: the activations are quantized once per product to 8-bit
//! blocks of 32 (one f32 scale each, as ggml's Q8_0), every weight block type is unpacked to
//! small integers, and the products run in integers with f32 scales. Only the reference path
//! (`matmul::linear_reference`) widens weights to f32.
//!
//! What the 8-bit activations cost: each value moves by at most half a step, `amax / 254` of
//! its block, so a product moves by at most `Σ_blocks amax_b / 254 · Σ|w|` over the block —
//! about 0.3 % of `Σ|w·x|` in the worst case and far less on average (the kernel tests bound
//! it per type).

mod blocks;
mod dot;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use blocks::{Block, RowSrc};
use minerva_formats::{DType, TensorData, TensorView};
use std::ops::Range;

/// Activations as 8-bit blocks: `x ≈ d[block] · q`, and per 16 values `s = d · Σq` (for the
/// block types whose weights carry a min).
#[derive(Default)]
pub struct QuantX {
    pub n: usize,
    pub len: usize,
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub s: Vec<f32>,
}

impl QuantX {
    /// 32-value blocks per token.
    pub fn blocks(&self) -> usize {
        self.len / 32
    }

    /// Quantizes `n` rows of `len` values (a multiple of 32), reusing the buffers.
    pub fn quantize(&mut self, x: &[f32], n: usize, len: usize) {
        debug_assert!(len.is_multiple_of(32) && x.len() >= n * len);
        self.n = n;
        self.len = len;
        self.q.resize(n * len, 0);
        self.d.resize(n * len / 32, 0.0);
        self.s.resize(n * len / 16, 0.0);
        let blocks = x[..n * len]
            .chunks_exact(32)
            .zip(self.q.chunks_exact_mut(32))
            .zip(self.d.iter_mut())
            .zip(self.s.chunks_exact_mut(2));
        for (((xb, qb), d), s) in blocks {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            *d = amax / 127.0;
            let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
            let mut sums = [0i32; 2];
            for (i, (q, v)) in qb.iter_mut().zip(xb).enumerate() {
                *q = (v * inv).round() as i8;
                sums[i / 16] += *q as i32;
            }
            s[0] = *d * sums[0] as f32;
            s[1] = *d * sums[1] as f32;
        }
    }
}

/// The weight rows a product reads: output `j` is stored row `base + j · stride`.
pub struct Rows<'a> {
    view: &'a TensorView<'a>,
    base: usize,
    stride: usize,
    /// Bytes per row of the packed values, and of the scales (and biases) of split packs.
    w_bytes: usize,
    s_bytes: usize,
    bits: u8,
    group: usize,
}

impl<'a> Rows<'a> {
    pub fn new(view: &'a TensorView<'a>, base: usize, stride: usize) -> Option<Rows<'a>> {
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
            w_bytes,
            s_bytes,
            bits,
            group,
        })
    }

    fn src(&self, j: usize) -> RowSrc<'a> {
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

fn pick<B: Block>() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return x86::avx2::<B>;
    }
    dot::portable::<B>
}

/// The integer kernel for a stored dtype, or None where only the reference path decodes it
/// (f32/f16/bf16 weights, whose products stay in f32).
pub fn kernel(dtype: DType) -> Option<Kernel> {
    Some(match dtype {
        DType::Q4_0 => pick::<blocks::Q4_0>(),
        DType::Q4_1 => pick::<blocks::Q4_1>(),
        DType::Q5_0 => pick::<blocks::Q5_0>(),
        DType::Q5_1 => pick::<blocks::Q5_1>(),
        DType::Q8_0 => pick::<blocks::Q8_0>(),
        DType::Q2_K => pick::<blocks::Q2K>(),
        DType::Q3_K => pick::<blocks::Q3K>(),
        DType::Q4_K => pick::<blocks::Q4K>(),
        DType::Q5_K => pick::<blocks::Q5K>(),
        DType::Q6_K => pick::<blocks::Q6K>(),
        DType::MXFP4 => pick::<blocks::Mxfp4>(),
        DType::MlxMxfp4 | DType::HfMxfp4 => pick::<blocks::PairsMxfp4>(),
        DType::MlxAffine { .. } => pick::<blocks::MlxAffine>(),
        _ => return None,
    })
}

/// The portable kernel for a dtype (the kernel tests compare it with the dispatched one).
pub fn portable_kernel(dtype: DType) -> Option<Kernel> {
    Some(match dtype {
        DType::Q4_0 => dot::portable::<blocks::Q4_0>,
        DType::Q4_1 => dot::portable::<blocks::Q4_1>,
        DType::Q5_0 => dot::portable::<blocks::Q5_0>,
        DType::Q5_1 => dot::portable::<blocks::Q5_1>,
        DType::Q8_0 => dot::portable::<blocks::Q8_0>,
        DType::Q2_K => dot::portable::<blocks::Q2K>,
        DType::Q3_K => dot::portable::<blocks::Q3K>,
        DType::Q4_K => dot::portable::<blocks::Q4K>,
        DType::Q5_K => dot::portable::<blocks::Q5K>,
        DType::Q6_K => dot::portable::<blocks::Q6K>,
        DType::MXFP4 => dot::portable::<blocks::Mxfp4>,
        DType::MlxMxfp4 | DType::HfMxfp4 => dot::portable::<blocks::PairsMxfp4>,
        DType::MlxAffine { .. } => dot::portable::<blocks::MlxAffine>,
        _ => return None,
    })
}

/// Which lanes the dispatched kernels use on this processor (for `describe` lines).
pub fn lanes() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx2() {
        return "avx2";
    }
    "portable"
}
