//! Weights on the GPU in their stored layout: the bytes of a `TensorView` (GGUF blocks, MLX
//! words + scales + biases, MXFP4 codes + scales, plain floats) copied as they are, never
//! dequantized. A tensor larger than the adapter's storage binding limit is split by rows into
//! parts, each with its own buffers.

use super::context::GpuContext;
use super::error::{GpuError, GpuResult};
use super::shader::{defines, Defines};
use minerva_formats::{DType, TensorData, TensorView};

/// Rows `first_row .. first_row + rows` of a weight, in up to three buffers (w0, w1, w2).
pub struct WeightPart {
    pub first_row: usize,
    pub rows: usize,
    pub buffers: Vec<wgpu::Buffer>,
}

impl WeightPart {
    /// The part's buffers bound as a decoder reads them (w0, w1, w2 at bindings 0, 1, 2).
    pub fn entries(&self) -> Vec<(u32, &wgpu::Buffer)> {
        self.buffers
            .iter()
            .enumerate()
            .map(|(i, b)| (i as u32, b))
            .collect()
    }
}

pub struct GpuWeight {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Element type of MLX affine scales and biases.
    pub scale_dtype: Option<DType>,
    pub rows: usize,
    pub cols: usize,
    pub parts: Vec<WeightPart>,
}

/// A view's stored buffers, the bytes each holds per row, and the MLX scale dtype.
type Components<'a> = (Vec<&'a [u8]>, Vec<usize>, Option<DType>);

fn components<'a>(view: &TensorView<'a>) -> GpuResult<Components<'a>> {
    let cols = view.row_len();
    let bad = |reason: String| GpuError::Unsupported {
        tensor: view.name.to_string(),
        reason,
    };
    let dtype = view.dtype;
    let whole = |n: usize, unit: usize, what: &str| -> GpuResult<usize> {
        if !n.is_multiple_of(unit) {
            return Err(bad(format!(
                "{what}: row of {n} values is not a whole number of {unit}-value groups"
            )));
        }
        Ok(n / unit)
    };
    Ok(match view.data {
        TensorData::Plain(b) => {
            let supported = matches!(
                dtype,
                DType::F32
                    | DType::F16
                    | DType::BF16
                    | DType::Q4_0
                    | DType::Q4_1
                    | DType::Q5_0
                    | DType::Q5_1
                    | DType::Q8_0
                    | DType::Q2_K
                    | DType::Q3_K
                    | DType::Q4_K
                    | DType::Q5_K
                    | DType::Q6_K
                    | DType::MXFP4
            );
            if !supported {
                return Err(bad(format!("dtype {} has no GPU kernel", dtype.name())));
            }
            let rb = dtype
                .row_bytes(cols)
                .ok_or_else(|| bad(format!("{} row of {cols} values", dtype.name())))?;
            (vec![b], vec![rb], None)
        }
        TensorData::MlxAffine {
            weight,
            scales,
            biases,
            scale_dtype,
        } => {
            let DType::MlxAffine { bits, group } = dtype else {
                return Err(bad("MLX affine data with another dtype".into()));
            };
            if !matches!(bits, 2 | 3 | 4 | 5 | 6 | 8) || !matches!(group, 32 | 64 | 128) {
                return Err(bad(format!("MLX affine {bits} bits, group {group}")));
            }
            if !matches!(scale_dtype, DType::F16 | DType::BF16 | DType::F32) {
                return Err(bad(format!("MLX scales of {}", scale_dtype.name())));
            }
            let groups = whole(cols, group as usize, "MLX affine")?;
            let sb = groups * scale_dtype.block_bytes();
            (
                vec![weight, scales, biases],
                vec![cols * bits as usize / 8, sb, sb],
                Some(scale_dtype),
            )
        }
        TensorData::MlxMxfp4 { weight, scales }
        | TensorData::HfMxfp4 {
            blocks: weight,
            scales,
        } => {
            let groups = whole(cols, 32, "MXFP4")?;
            (vec![weight, scales], vec![cols / 2, groups], None)
        }
    })
}

/// The DECODER include and defines that read `dtype` (see kernels/blocks_*.wgsl).
pub fn decoder_defines(dtype: DType, scale_dtype: Option<DType>) -> Option<Defines> {
    let (file, flag) = match dtype {
        DType::F32 => ("blocks_float.wgsl", "DT_F32"),
        DType::F16 => ("blocks_float.wgsl", "DT_F16"),
        DType::BF16 => ("blocks_float.wgsl", "DT_BF16"),
        DType::Q4_0 => ("blocks_ggml.wgsl", "DT_Q4_0"),
        DType::Q4_1 => ("blocks_ggml.wgsl", "DT_Q4_1"),
        DType::Q5_0 => ("blocks_ggml.wgsl", "DT_Q5_0"),
        DType::Q5_1 => ("blocks_ggml.wgsl", "DT_Q5_1"),
        DType::Q8_0 => ("blocks_ggml.wgsl", "DT_Q8_0"),
        DType::MXFP4 => ("blocks_ggml.wgsl", "DT_MXFP4"),
        DType::Q2_K => ("blocks_kquant.wgsl", "DT_Q2_K"),
        DType::Q3_K => ("blocks_kquant.wgsl", "DT_Q3_K"),
        DType::Q4_K => ("blocks_kquant.wgsl", "DT_Q4_K"),
        DType::Q5_K => ("blocks_kquant.wgsl", "DT_Q5_K"),
        DType::Q6_K => ("blocks_kquant.wgsl", "DT_Q6_K"),
        DType::MlxMxfp4 | DType::HfMxfp4 => ("blocks_mx.wgsl", "DT_MX"),
        DType::MlxAffine { bits, group } => {
            let scale = match scale_dtype? {
                DType::F32 => "SCALE_F32",
                DType::BF16 => "SCALE_BF16",
                _ => "SCALE_F16",
            };
            return Some(defines(&[
                ("DECODER", "blocks_mlx.wgsl".into()),
                ("BITS", format!("{bits}u")),
                ("GROUP", format!("{group}u")),
                (scale, String::new()),
            ]));
        }
        _ => return None,
    };
    let mut d = defines(&[("DECODER", file.into()), (flag, String::new())]);
    if matches!(
        dtype,
        DType::MXFP4
            | DType::MlxMxfp4
            | DType::HfMxfp4
            | DType::Q4_0
            | DType::Q5_0
            | DType::Q8_0
            | DType::Q3_K
            | DType::Q6_K
    ) {
        // One scale per part and no offset: the products apply it once per part (unit.wgsl).
        d.insert("SCALED_PARTS".into(), String::new());
    }
    if matches!(dtype, DType::MXFP4 | DType::MlxMxfp4 | DType::HfMxfp4) {
        // E2M1 codes: the decode products may take them in packed f16 (PACKED_F16).
        d.insert("E2M1".into(), String::new());
    }
    Some(d)
}

fn storage_buffer(ctx: &GpuContext, label: &str, bytes: &[u8]) -> GpuResult<wgpu::Buffer> {
    // Padded to whole vec4s: kernels read words (blocks like Q4_0's are 18 bytes), and f32
    // vectors (norm weights) as vec4s. The padding is written as zeros.
    let size = (bytes.len().div_ceil(16).max(1) * 16) as u64;
    ctx.weight_buffer(label, bytes, size)
}

/// GGUF MXFP4 blocks (a scale byte, then 16 bytes of codes) split into the blocks' codes, 16
/// bytes each, and their scale bytes apart: a 17-byte block put every word of codes across a
/// word boundary, so the kernels read each part with two loads and shifts, and its scale with a
/// third (benches/GPU.md, entry 75). The codes keep GGUF's order (blocks_ggml.wgsl).
fn mxfp4_split(blocks: &[u8], codes: &mut [u8], scales: &mut [u8]) {
    use rayon::prelude::*;
    const BLOCKS_PER_TASK: usize = 1 << 14;
    codes
        .par_chunks_mut(16 * BLOCKS_PER_TASK)
        .zip(scales.par_chunks_mut(BLOCKS_PER_TASK))
        .zip(blocks.par_chunks(17 * BLOCKS_PER_TASK))
        .for_each(|((codes, scales), blocks)| {
            for ((out, scale), block) in codes
                .chunks_exact_mut(16)
                .zip(scales.iter_mut())
                .zip(blocks.chunks_exact(17))
            {
                *scale = block[0];
                out.copy_from_slice(&block[1..]);
            }
        });
}

impl GpuWeight {
    /// Copies `view` to the GPU as stored, but for GGUF MXFP4, whose blocks' scales are stored
    /// apart from their codes (`mxfp4_split`): one layout that every kernel reads. `row_align`
    /// keeps parts whole multiples of that many rows (the rows of one expert, so an expert
    /// never straddles two parts).
    pub fn upload(ctx: &GpuContext, view: &TensorView, row_align: usize) -> GpuResult<GpuWeight> {
        if let (DType::MXFP4, TensorData::Plain(blocks)) = (view.dtype, &view.data) {
            if view.row_len().is_multiple_of(32) && blocks.len().is_multiple_of(17) {
                let n = blocks.len() / 17;
                return ctx.with_conversion(n * 17, |buf| {
                    let (codes, scales) = buf.split_at_mut(n * 16);
                    mxfp4_split(blocks, codes, scales);
                    // Codes and scales apart, as MLX mxfp4 packs hold them (`components`
                    // reads the two buffers by this variant), the codes in GGUF's order (the
                    // dtype).
                    let split = TensorView {
                        name: view.name,
                        shape: view.shape.clone(),
                        dtype: DType::MXFP4,
                        data: TensorData::MlxMxfp4 {
                            weight: codes,
                            scales,
                        },
                    };
                    Self::upload_as_stored(ctx, &split, row_align)
                });
            }
        }
        Self::upload_as_stored(ctx, view, row_align)
    }

    fn upload_as_stored(
        ctx: &GpuContext,
        view: &TensorView,
        row_align: usize,
    ) -> GpuResult<GpuWeight> {
        let bad = |reason: String| GpuError::Unsupported {
            tensor: view.name.to_string(),
            reason,
        };
        let (bufs, row_bytes, scale_dtype) = components(view)?;
        let rows = view.rows();
        let cols = view.row_len();
        for (b, rb) in bufs.iter().zip(&row_bytes) {
            if rows.checked_mul(*rb) != Some(b.len()) {
                return Err(bad(format!(
                    "{} bytes stored where {rows} rows need {}",
                    b.len(),
                    rows.saturating_mul(*rb)
                )));
            }
        }
        let widest = row_bytes.iter().copied().max().unwrap_or(1).max(1);
        let limit = ctx.caps.max_binding.min(ctx.caps.max_buffer) as usize;
        // Keep one word of slack: the padded copy may round up.
        let mut per_part = (limit.saturating_sub(4) / widest).min(rows.max(1));
        let align = row_align.max(1);
        if per_part < rows {
            per_part -= per_part % align;
        }
        if per_part == 0 {
            return Err(bad(format!(
                "{align} rows of {widest} bytes exceed the adapter's storage binding limit of {limit} bytes"
            )));
        }
        let mut parts = Vec::new();
        let mut first = 0;
        while first < rows || (rows == 0 && parts.is_empty()) {
            let n = per_part.min(rows - first);
            let buffers = bufs
                .iter()
                .zip(&row_bytes)
                .map(|(b, rb)| storage_buffer(ctx, view.name, &b[first * rb..(first + n) * rb]))
                .collect::<GpuResult<Vec<_>>>()?;
            parts.push(WeightPart {
                first_row: first,
                rows: n,
                buffers,
            });
            first += n;
            if n == 0 {
                break;
            }
        }
        ctx.check()?;
        let w = GpuWeight {
            name: view.name.to_string(),
            dtype: view.dtype,
            shape: view.shape.clone(),
            scale_dtype,
            rows,
            cols,
            parts,
        };
        ctx.count_weight_bytes(w.gpu_bytes());
        Ok(w)
    }

    /// Bytes the weight occupies on the GPU.
    pub fn gpu_bytes(&self) -> u64 {
        self.parts
            .iter()
            .flat_map(|p| &p.buffers)
            .map(|b| b.size())
            .sum()
    }

    /// Whether `other` is split into parts of the same rows (weights of one shape and dtype
    /// uploaded with the same alignment are).
    pub fn same_parts(&self, other: &GpuWeight) -> bool {
        self.parts.len() == other.parts.len()
            && self
                .parts
                .iter()
                .zip(&other.parts)
                .all(|(a, b)| (a.first_row, a.rows) == (b.first_row, b.rows))
    }

    pub fn decoder(&self) -> Defines {
        decoder_defines(self.dtype, self.scale_dtype).expect("checked at upload")
    }
}
