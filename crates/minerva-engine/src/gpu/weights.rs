//! Weights on the GPU in their stored layout: the bytes of a `TensorView` (GGUF blocks, MLX
//! words + scales + biases, MXFP4 codes + scales, plain floats) copied as they are, never
//! dequantized; GGUF's Q4_0, Q8_0, MXFP4 and Q6_K blocks with their scales apart (`BlockSplit`). A tensor larger than the adapter's storage binding limit is split by rows into
//! parts, each with its own buffers.

use super::context::GpuContext;
use super::error::{GpuError, GpuResult};
use super::gather::Gather;
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

/// A view's GPU buffers, each as the bytes it is gathered from and the bytes of those per row,
/// and the MLX scale dtype.
type Components<'a> = (Vec<(&'a [u8], Gather)>, Vec<usize>, Option<DType>);

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
            if let Some(split) = BlockSplit::of(dtype) {
                // Whole blocks per row: `row_bytes` said so.
                let (codes, scales) = split.gathers();
                return Ok((vec![(b, codes), (b, scales)], vec![rb, rb], None));
            }
            (vec![(b, Gather::All)], vec![rb], None)
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
                vec![
                    (weight, Gather::All),
                    (scales, Gather::All),
                    (biases, Gather::All),
                ],
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
            (
                vec![(weight, Gather::All), (scales, Gather::All)],
                vec![cols / 2, groups],
                None,
            )
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
    if BlockSplit::of(dtype).is_some_and(BlockSplit::half_scales) {
        // f16 scales apart from the codes.
        d.insert("HALF_SCALES".into(), String::new());
    }
    if matches!(dtype, DType::MXFP4 | DType::MlxMxfp4 | DType::HfMxfp4) {
        // E2M1 codes: the decode products may take them in packed f16 (PACKED_F16).
        d.insert("E2M1".into(), String::new());
    }
    Some(d)
}

fn storage_buffer(
    ctx: &GpuContext,
    label: &str,
    source: (&[u8], Gather),
) -> GpuResult<wgpu::Buffer> {
    // Padded to whole vec4s: kernels read words (blocks like Q5_0's are 22 bytes), and f32
    // vectors (norm weights) as vec4s. The padding is written as zeros.
    let bytes = source.1.packed_len(source.0.len());
    let size = (bytes.div_ceil(16).max(1) * 16) as u64;
    ctx.weight_buffer(label, source, size)
}

/// GGUF blocks held on the GPU as their codes (w0) and their scale apart (w1): Q4_0 and Q8_0
/// (an f16 scale, then 32 values' codes), MXFP4 (an E8M0 byte, then 32 values' codes), Q3_K and
/// Q6_K (108 and 208 bytes of codes and sub-block scales, then an f16 for 256 values). Stored in
/// place, 18-, 34-, 17-, 110- and 210-byte blocks put most words across a word boundary, so the kernels
/// read each word with two loads and shifts (benches/GPU.md, entries 75 and 82). The codes keep
/// GGUF's order (blocks_ggml.wgsl, blocks_kquant.wgsl).
#[derive(Clone, Copy)]
enum BlockSplit {
    Q4_0,
    Q8_0,
    Mxfp4,
    Q3K,
    Q6K,
}

impl BlockSplit {
    fn of(dtype: DType) -> Option<BlockSplit> {
        match dtype {
            DType::Q4_0 => Some(BlockSplit::Q4_0),
            DType::Q8_0 => Some(BlockSplit::Q8_0),
            DType::MXFP4 => Some(BlockSplit::Mxfp4),
            DType::Q3_K => Some(BlockSplit::Q3K),
            DType::Q6_K => Some(BlockSplit::Q6K),
            _ => None,
        }
    }

    /// Where in a block its scale and its codes lie: (block bytes, scale offset and bytes, codes
    /// offset and bytes).
    fn layout(self) -> (usize, (usize, usize), (usize, usize)) {
        match self {
            BlockSplit::Q4_0 => (18, (0, 2), (2, 16)),
            BlockSplit::Q8_0 => (34, (0, 2), (2, 32)),
            BlockSplit::Mxfp4 => (17, (0, 1), (1, 16)),
            BlockSplit::Q3K => (110, (108, 2), (0, 108)),
            BlockSplit::Q6K => (210, (208, 2), (0, 208)),
        }
    }

    /// Whether the scales held apart are f16 (read by `half_scale`, weights.wgsl): all but
    /// MXFP4's E8M0 bytes.
    fn half_scales(self) -> bool {
        !matches!(self, BlockSplit::Mxfp4)
    }

    /// How the codes and the scales are gathered from the blocks (on their way through the
    /// staging ring, so that the split costs no pass of its own).
    fn gathers(self) -> (Gather, Gather) {
        let (stride, (scale_at, scale), (codes_at, codes)) = self.layout();
        let field = |off, len| Gather::Field { stride, off, len };
        (field(codes_at, codes), field(scale_at, scale))
    }
}

impl GpuWeight {
    /// Copies `view` to the GPU as stored, but for the GGUF blocks of `BlockSplit`, whose
    /// scales are stored apart from their codes: one layout that every kernel reads.
    /// `row_align` keeps parts whole multiples of that many rows (the rows of one expert, so an
    /// expert never straddles two parts).
    pub fn upload(ctx: &GpuContext, view: &TensorView, row_align: usize) -> GpuResult<GpuWeight> {
        let bad = |reason: String| GpuError::Unsupported {
            tensor: view.name.to_string(),
            reason,
        };
        let (bufs, row_bytes, scale_dtype) = components(view)?;
        let rows = view.rows();
        let cols = view.row_len();
        for ((b, _), rb) in bufs.iter().zip(&row_bytes) {
            if rows.checked_mul(*rb) != Some(b.len()) {
                return Err(bad(format!(
                    "{} bytes stored where {rows} rows need {}",
                    b.len(),
                    rows.saturating_mul(*rb)
                )));
            }
        }
        let widest = bufs
            .iter()
            .zip(&row_bytes)
            .map(|((_, g), rb)| g.packed_len(*rb))
            .max()
            .unwrap_or(1)
            .max(1);
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
                .map(|((b, g), rb)| {
                    storage_buffer(ctx, view.name, (&b[first * rb..(first + n) * rb], *g))
                })
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
