//! The GPU ops: each builds the `Dispatch`es of one operation over given buffers (pipelines from
//! the cache, a small uniform of static parameters, the bind group). Built once, recorded into
//! every step's compute pass; values that change per step (position, token count) come from the
//! shared `Step` uniform.

use super::context::GpuContext;
use super::error::{GpuError, GpuResult};
use super::pipelines::{Dispatch, Pipelines};
use super::shader::{defines, Defines};
use super::weights::{GpuWeight, WeightPart};
use bytemuck::{Pod, Zeroable};
use minerva_formats::DType;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Per-step values every kernel may read, written once per step.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable, Default)]
pub struct Step {
    pub pos0: u32,
    pub tokens: u32,
    pub _pad: [u32; 2],
}

/// Splits `n` workgroups over x and y (each ≤ 65535).
fn grid2(n: u32) -> (u32, u32) {
    if n <= 65535 {
        (n, 1)
    } else {
        (65535, n.div_ceil(65535))
    }
}

/// Bindings of weight `i`'s buffers in `matvec_multi.wgsl` (its decoder instance's w0, w1, w2
/// moved to 10·i on).
fn multi_weight_entries(i: usize, part: &WeightPart) -> Vec<(u32, &wgpu::Buffer)> {
    part.buffers
        .iter()
        .enumerate()
        .map(|(j, b)| (10 * i as u32 + j as u32, b))
        .collect()
}

/// A product's dispatches behind the quantization of its x, if it has one.
fn with_quantization(quantized: Option<QuantizedX>, products: Vec<Dispatch>) -> Vec<Dispatch> {
    quantized
        .and_then(|q| q.dispatch)
        .into_iter()
        .chain(products)
        .collect()
}

fn with(mut d: Defines, extra: &[(&str, String)]) -> Defines {
    for (k, v) in extra {
        d.insert(k.to_string(), v.clone());
    }
    d
}

/// A buffer region of f32 values: the buffer, the element offset, the elements between rows.
#[derive(Clone, Copy)]
pub struct Region<'a> {
    pub buf: &'a wgpu::Buffer,
    pub offset: u32,
    pub stride: u32,
}

impl<'a> Region<'a> {
    pub fn new(buf: &'a wgpu::Buffer, offset: u32, stride: u32) -> Self {
        Region {
            buf,
            offset,
            stride,
        }
    }
}

/// Mixture-of-experts addressing for a matvec over an [experts, rows, cols] weight.
#[derive(Clone, Copy)]
pub struct ExpertSel<'a> {
    /// Expert id of each batch item.
    pub ids: &'a wgpu::Buffer,
    /// Batch item z reads input vector z / x_div (k for gate/up, 1 for down).
    pub x_div: u32,
}

/// Mixture-of-experts addressing for the prefill product over an [experts, rows, cols] weight:
/// the items grouped by expert in tiles (`Ops::moe_group`).
#[derive(Clone, Copy)]
pub struct ExpertTiles<'a> {
    /// Item indices, expert by expert.
    pub order: &'a wgpu::Buffer,
    /// Per tile: expert, first position in `order`, items (0: an empty tile).
    pub tiles: &'a wgpu::Buffer,
    /// Tiles launched: `moe_max_tiles` of the item and expert counts.
    pub max_tiles: u32,
    /// Item i reads input vector i / x_div (k for gate/up, 1 for down).
    pub x_div: u32,
}

/// Which matrix of a weight, and which of its outputs, a product uses: output j is stored
/// output `offset + j · stride` of matrix `matrix` (experts: the matrix comes from the ids).
/// `input_major` weights store each matrix as [in_dim][outputs] (float dtypes only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatSel {
    pub matrix: usize,
    pub offset: usize,
    pub stride: usize,
    pub out_dim: usize,
    pub in_dim: usize,
    pub input_major: bool,
}

impl MatSel {
    /// All rows of a 2-D [rows, cols] weight.
    pub fn whole(w: &GpuWeight) -> MatSel {
        MatSel {
            matrix: 0,
            offset: 0,
            stride: 1,
            out_dim: w.rows,
            in_dim: w.cols,
            input_major: false,
        }
    }
}

/// Tiles of the prefill product (`matmul.wgsl`): rows × tokens per workgroup and per thread.
/// Larger tiles decode each weight for more tokens and load less from workgroup memory per FMA;
/// smaller ones make enough workgroups for short prompts and short weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulTile {
    /// 64 rows × 64 tokens, 8 × 4 per thread: 12 vec4 loads per 128 FMAs.
    Wide,
    /// 32 rows × 32 tokens, 4 × 2 per thread.
    Mid,
    /// 16 rows × 16 tokens, 2 × 1 per thread.
    Narrow,
}

/// Workgroups that keep every multiprocessor of a large GPU busy (an H200 has 132).
const MATMUL_FILL: u32 = 128;

/// Workgroup memory of every matmul tile: 1024 vec4s of weights and 1024 of x.
const MATMUL_WORKGROUP_BYTES: u32 = 32 * 1024;

impl MatmulTile {
    pub const ALL: [MatmulTile; 3] = [MatmulTile::Wide, MatmulTile::Mid, MatmulTile::Narrow];

    /// (tile rows, tile tokens, rows per thread, tokens per thread).
    const fn shape(self) -> (u32, u32, u32, u32) {
        match self {
            MatmulTile::Wide => (64, 64, 8, 4),
            MatmulTile::Mid => (32, 32, 4, 2),
            MatmulTile::Narrow => (16, 16, 2, 1),
        }
    }

    fn grid(self, rows: u32, tokens: u32) -> [u32; 3] {
        let (tr, tt, _, _) = self.shape();
        [rows.div_ceil(tr), tokens.div_ceil(tt), 1]
    }

    /// The largest tile that still makes `MATMUL_FILL` workgroups, else the smallest.
    pub fn pick(rows: u32, tokens: u32) -> MatmulTile {
        MatmulTile::ALL
            .into_iter()
            .find(|t| {
                let [gx, gy, _] = t.grid(rows, tokens);
                gx * gy >= MATMUL_FILL
            })
            .unwrap_or(MatmulTile::Narrow)
    }

    fn defines(self, d: Defines) -> Defines {
        let (tr, tt, mr, mt) = self.shape();
        with(
            d,
            &[
                ("TILE_ROWS", format!("{tr}u")),
                ("TILE_TOKENS", format!("{tt}u")),
                ("THREAD_ROWS", format!("{mr}u")),
                ("THREAD_TOKENS", format!("{mt}u")),
            ],
        )
    }
}

/// Rows and tokens of the output block of one matrix-core subgroup (`matmul_coop.wgsl`).
pub const COOP_BLOCK: u32 = 32;

/// The defines of `matmul_coop.wgsl` for a product of `rows` outputs (a multiple of
/// `COOP_BLOCK`), with or without a bias, and the outputs each workgroup computes: 64 where
/// they divide the rows, which doubles the multiplies per input matrix loaded (tinyllama
/// prefill-512 +12 % for Q4_0, +20 % for f16; benches/GPU.md, entry 64), else 32.
pub fn coop_defines(rows: u32, bias: bool) -> (Defines, u32) {
    let mut d = Defines::new();
    if bias {
        d.insert("BIAS".into(), String::new());
    }
    let per_group = if rows.is_multiple_of(2 * COOP_BLOCK) {
        d.insert("ROWS64".into(), String::new());
        2 * COOP_BLOCK
    } else {
        COOP_BLOCK
    };
    d.insert("ROWS".into(), format!("{per_group}u"));
    (d, per_group)
}

/// Largest f16 copy of a weight the matrix-core product makes (bytes): larger products (gpt-oss's
/// 201,088-row output product) keep the f32 tiles.
pub const COOP_WEIGHT_BYTES: u64 = 64 << 20;

/// A dense prefill product on matrix cores: the weight's `rows` outputs (a multiple of
/// `COOP_BLOCK`) decoded to f16 rows of `k` halves (the input length rounded up to whole
/// 32-value units), and its first `tokens` tokens (a multiple of `COOP_BLOCK`; the f32 tiles
/// take the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CoopShape {
    rows: u32,
    k: u32,
    tokens: u32,
}

/// An f32 bias: the buffer, the element offset of output 0, and (experts) values per expert.
#[derive(Clone, Copy)]
pub struct Bias<'a> {
    pub buf: &'a wgpu::Buffer,
    pub offset: u32,
    pub expert_stride: u32,
}

/// An RMSNorm folded into a decode product (product.wgsl): the norm's f32 weights start at
/// element `offset` of `buf`; the product reads the norm's input as its x, or with `records`
/// the norm's input times its weights as int8 records with each part's Σx² (XQ_NORM), which
/// the kernel producing the input wrote (`Ops::moe_combine`).
#[derive(Clone, Copy)]
pub struct NormFold<'a> {
    pub buf: &'a wgpu::Buffer,
    pub offset: u32,
    pub eps: f32,
    pub records: Option<&'a XRecords>,
}

/// Work folded into a decode product: an RMSNorm of its input, and adding its results into a
/// residual stream (`residual[i] += y[i]`, y still written). With a norm, `normed` also receives
/// the norm's output itself (one vector, from element 0), for later products that read it whole.
#[derive(Clone, Copy, Default)]
pub struct Folds<'a> {
    pub norm: Option<NormFold<'a>>,
    pub residual: Option<&'a wgpu::Buffer>,
    pub normed: Option<&'a wgpu::Buffer>,
    /// x as int8 records that the kernel producing it wrote (`takes_records` weights, one
    /// vector, no norm): the product reads them with no quantizing dispatch.
    pub records: Option<&'a XRecords>,
}

/// The dispatch of one weight part: outputs j_lo..j_hi read stored rows from `row_base` of it.
struct PartRange {
    part: usize,
    j_lo: usize,
    j_hi: usize,
    row_base: usize,
}

impl GpuWeight {
    /// Stored rows (or, input-major, output columns) per matrix.
    fn matrix_rows(&self, input_major: bool) -> usize {
        if input_major {
            self.cols
        } else if self.shape.len() >= 2 {
            self.shape[self.shape.len() - 2]
        } else {
            1
        }
    }

    fn matrices(&self) -> usize {
        let n = self.shape.len();
        if n >= 3 {
            self.shape[..n - 2].iter().product()
        } else {
            1
        }
    }

    fn check_sel(&self, sel: &MatSel) -> GpuResult<()> {
        let bad = |reason: String| {
            Err(GpuError::Unsupported {
                tensor: self.name.clone(),
                reason,
            })
        };
        let mrows = self.matrix_rows(sel.input_major);
        let in_dim = if sel.input_major {
            self.rows / self.matrices()
        } else {
            self.cols
        };
        if sel.input_major && (!self.dtype.is_float() || self.parts.len() != 1) {
            return bad(format!(
                "input-major {} split in {} parts",
                self.dtype.name(),
                self.parts.len()
            ));
        }
        let last = sel.offset + sel.out_dim.saturating_sub(1) * sel.stride;
        if sel.matrix >= self.matrices() || last >= mrows || sel.in_dim != in_dim || sel.stride == 0
        {
            return bad(format!("view {sel:?} of a {:?} weight", self.shape));
        }
        Ok(())
    }

    /// Per part, the outputs of `sel` whose stored rows it holds.
    fn ranges(&self, sel: &MatSel) -> Vec<PartRange> {
        let base = sel.matrix * self.matrix_rows(sel.input_major) + sel.offset;
        let mut out = Vec::new();
        for (i, p) in self.parts.iter().enumerate() {
            let (first, end) = (p.first_row, p.first_row + p.rows);
            let j_lo = if first > base {
                (first - base).div_ceil(sel.stride)
            } else {
                0
            };
            let j_hi = if end > base {
                (end - base).div_ceil(sel.stride).min(sel.out_dim)
            } else {
                0
            };
            if j_lo < j_hi {
                out.push(PartRange {
                    part: i,
                    j_lo,
                    j_hi,
                    row_base: base + j_lo * sel.stride - first,
                });
            }
        }
        out
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatvecParams {
    rows: u32,
    cols: u32,
    row_base: u32,
    row_stride: u32,
    matrix_rows: u32,
    bias_stride: u32,
    x_offset: u32,
    x_stride: u32,
    x_div: u32,
    y_offset: u32,
    y_stride: u32,
    expert_first: u32,
    expert_count: u32,
    groups_x: u32,
    bias_offset: u32,
    norm_offset: u32,
    eps: f32,
    xq_scales: u32,
    xq_sq: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct QuantizeParams {
    cols: u32,
    parts: u32,
    x_offset: u32,
    x_stride: u32,
    scales: u32,
    norm_offset: u32,
    eps: f32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatmulParams {
    rows: u32,
    cols: u32,
    tokens: u32,
    x_offset: u32,
    x_stride: u32,
    y_offset: u32,
    y_stride: u32,
    bias_offset: u32,
    row_base: u32,
    row_stride: u32,
    matrix_rows: u32,
    bias_stride: u32,
    expert_first: u32,
    expert_count: u32,
    x_div: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CoopWeightsParams {
    rows: u32,
    cols: u32,
    stride: u32,
    first_out: u32,
    row_base: u32,
    row_stride: u32,
    bias_offset: u32,
    out_rows: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CoopInputsParams {
    cols: u32,
    stride: u32,
    tokens: u32,
    x_offset: u32,
    x_stride: u32,
    _pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CoopParams {
    rows: u32,
    k: u32,
    y_offset: u32,
    y_stride: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct EmbedParams {
    rows: u32,
    cols: u32,
    first_row: u32,
    tokens: u32,
    scale: f32,
    _pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct NormParams {
    n: u32,
    rows: u32,
    x_offset: u32,
    y_offset: u32,
    eps: f32,
    w_offset: u32,
    _pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RopeParams {
    tokens: u32,
    heads: u32,
    head_dim: u32,
    rot_dim: u32,
    halves: u32,
    offset: u32,
    mscale: f32,
    heads2: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct EltParams {
    n: u32,
    rows: u32,
    a_offset: u32,
    a_stride: u32,
    b_offset: u32,
    b_stride: u32,
    y_offset: u32,
    y_stride: u32,
    alpha: f32,
    limit: f32,
    _pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttnParams {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    cache_len: u32,
    window: u32,
    chunks: u32,
    q_offset: u32,
    k_offset: u32,
    v_offset: u32,
    out_offset: u32,
    scale: f32,
    sinks_offset: u32,
    rot_dim: u32,
    halves: u32,
    mscale: f32,
    xq_scales: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MoeParams {
    experts: u32,
    k: u32,
    tokens: u32,
    renorm: u32,
    n: u32,
    logits_offset: u32,
    groups_x: u32,
    tile_tokens: u32,
    max_tiles: u32,
    norm_offset: u32,
    xq_scales: u32,
    xq_sq: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SelectParams {
    n: u32,
    rows: u32,
    k: u32,
    offset: u32,
    block: u32,
    blocks: u32,
    kept: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MultiParams {
    rows0: u32,
    rows1: u32,
    rows2: u32,
    cols: u32,
    x_offset: u32,
    groups_x: u32,
    alpha: f32,
    limit: f32,
    norm_offset: u32,
    eps: f32,
    bias_offsets: [u32; 3],
    row_base: [u32; 2],
    row_stride: [u32; 2],
    matrix_rows: u32,
    bias_stride: u32,
    x_stride: u32,
    x_div: u32,
    y_stride: u32,
    expert_first: u32,
    expert_count: u32,
    xq_scales: u32,
    xq_sq: u32,
    _pad: [u32; 2],
}

impl MultiParams {
    /// Parameters of one vector through whole weights: GLU rows read stored row r of each.
    fn whole(rows: [u32; 3], cols: u32, x_offset: u32, groups_x: u32) -> MultiParams {
        MultiParams {
            rows0: rows[0],
            rows1: rows[1],
            rows2: rows[2],
            cols,
            x_offset,
            groups_x,
            alpha: 0.0,
            limit: 0.0,
            norm_offset: 0,
            eps: 0.0,
            bias_offsets: [0; 3],
            row_base: [0; 2],
            row_stride: [1; 2],
            matrix_rows: 0,
            bias_stride: 0,
            x_stride: 0,
            x_div: 1,
            y_stride: 0,
            expert_first: 0,
            expert_count: 0,
            xq_scales: 0,
            xq_sq: 0,
            _pad: [0; 2],
        }
    }
}

/// Element offsets of the attention kernels' operands.
#[derive(Default, Clone, Copy)]
struct AttnOffsets {
    q: u32,
    k: u32,
    v: u32,
    out: u32,
    sinks: u32,
}

/// How a decode product over several weights (`Ops::matvec_multi`) uses them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Multi {
    /// Each weight's outputs into its own buffer (q, k, v).
    Split,
    /// act(W0·x, W1·x) into one buffer (gate, up): `Eltwise::SwiGlu` or `Eltwise::GluOss`.
    Glu(Eltwise),
}

/// Tokens per tile of the grouped expert products (the mid tile's; TT in matmul_tiles.wgsl).
pub const MATMUL_TOKENS: u32 = MatmulTile::Mid.shape().1;

/// Largest expert count and top-k of the routing kernels (MAX_EXPERTS and MAX_K in moe.wgsl).
const MOE_MAX_EXPERTS: u32 = 256;
const MOE_MAX_K: u32 = 32;

/// Tiles of `MATMUL_TOKENS` that `items` items grouped by expert can need at most: each expert
/// with items rounds up once, and each tile holds at least one item.
pub fn moe_max_tiles(items: u32, experts: u32) -> u32 {
    let busy = experts.min(items);
    ((items + busy * (MATMUL_TOKENS - 1)) / MATMUL_TOKENS).min(items)
}

/// Keys per chunk of the split-K attention kernel (CHUNK in attention.wgsl).
pub const ATTN_CHUNK: u32 = 256;

/// The single-query attention kernel (`decode` in attention.wgsl): at most DECODE_SPLITS splits
/// per KV head (SMAX), one per DECODE_BLOCK keys the layer may hold, and DECODE_COEFS weights
/// (query head, split) in its merge; query heads per KV head rounded up to a power of two times
/// head_dim at most DECODE_QMAX (each thread holds one value unit), head_dim at most
/// DECODE_DMAX (a thread holds a key's row) and a multiple of 8.
const DECODE_BLOCK: u32 = 32;
const DECODE_SPLITS: u32 = 64;
const DECODE_COEFS: u32 = 2048;
const DECODE_QMAX: u32 = 2048;
const DECODE_GMAX: u32 = 64;
const DECODE_DMAX: u32 = 256;
/// Storage buffers `decode` binds with the RoPE and the cache write folded in (sinks included).
const DECODE_ROPE_BUFFERS: u32 = 10;
/// Prefill attention in tiles (`attend_tiled`): TILE_ROWS (query, query head) rows per
/// workgroup, head_dim at most TILE_DMAX (its workgroup memory holds the rows and a block of
/// keys of that size).
const TILE_ROWS: u32 = 32;
const TILE_DMAX: u32 = 128;

/// Workgroup size and block lists merged per thread of select.wgsl (WG, LISTS).
const SELECT_WG: u32 = 256;
const SELECT_LISTS: u32 = 4;

/// The element-wise operations of elementwise.wgsl.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Eltwise {
    /// y += a
    Add,
    /// y = a
    Copy,
    /// y = silu(a) · b
    SwiGlu,
    /// gpt-oss: y = (clamp(b, −limit, limit) + 1) · g · σ(alpha · g), g = min(a, limit)
    GluOss { alpha: f32, limit: f32 },
    /// y += a · s (σ(s) with `sigmoid`), s = b[row]: one scalar per row
    ScaledAdd { sigmoid: bool },
}

/// Shape of one attention layer.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Positions the cache holds; position p lives in slot p % cache_len.
    pub cache_len: u32,
    /// 0 for full attention.
    pub window: u32,
    pub scale: f32,
}

impl AttnShape {
    /// Keys a query may attend to, at most.
    fn keys(&self) -> u32 {
        if self.window == 0 {
            self.cache_len
        } else {
            self.window.min(self.cache_len)
        }
    }

    /// Key chunks a query may span.
    pub fn chunks(&self) -> u32 {
        self.keys().div_ceil(ATTN_CHUNK).max(1)
    }

    /// Whether `tokens` queries run as one dispatch (`decode`): a single query, with the query
    /// heads of a KV head fitting its workgroup memory.
    pub fn one_pass(&self, tokens: u32) -> bool {
        let group = self.group().next_power_of_two();
        tokens == 1
            && group <= DECODE_GMAX
            && group * self.head_dim <= DECODE_QMAX
            && self.head_dim <= DECODE_DMAX
            && self.head_dim.is_multiple_of(8)
    }

    /// Query heads per KV head.
    fn group(&self) -> u32 {
        self.heads / self.kv_heads.max(1)
    }

    /// Whether `tokens` queries run as one `attend_tiled` dispatch: several queries, with
    /// head_dim small enough for its tiles.
    pub fn tiled(&self, tokens: u32) -> bool {
        tokens > 1 && self.head_dim <= TILE_DMAX
    }

    /// Workgroups per (head, query) of the two-pass kernels, each taking every `splits`-th
    /// chunk: many for one query (decode: parallelism comes from the keys), one for long
    /// prompts (it comes from the queries, and scratch stays small). For one pass, workgroups
    /// per KV head, each taking a contiguous share of the key blocks.
    pub fn splits(&self, tokens: u32) -> u32 {
        if self.one_pass(tokens) {
            let most = DECODE_SPLITS.min(DECODE_COEFS / self.group().next_power_of_two());
            return self.keys().div_ceil(DECODE_BLOCK).clamp(1, most);
        }
        let cap = match tokens {
            0 | 1 => 32,
            2..=15 => 8,
            _ => 1,
        };
        self.chunks().min(cap)
    }

    /// f32 values of scratch needed for `tokens` queries.
    pub fn scratch_len(&self, tokens: u32) -> u64 {
        tokens as u64 * self.heads as u64 * self.splits(tokens) as u64 * (self.head_dim as u64 + 2)
    }
}

/// The rotary embedding that `Ops::rope_write` and `Ops::decode_rope` apply: `rot_dim / 2`
/// frequencies in `freq`, pairs (i, i + rot_dim / 2) with `halves`, else (2i, 2i + 1), turned
/// values times `mscale`.
#[derive(Clone, Copy)]
pub struct Rotary<'a> {
    pub freq: &'a wgpu::Buffer,
    pub rot_dim: u32,
    pub halves: bool,
    pub mscale: f32,
}

/// u32 words of scratch that `Ops::argmax` / `Ops::top_k` need over `rows` rows of `n` values.
pub fn select_scratch_len(n: u32, rows: u32, k: u32) -> u64 {
    let (block, blocks) = select_blocks(n);
    2 * rows as u64 * blocks as u64 * k.min(block) as u64
}

/// Values per workgroup and workgroups per row of select.wgsl: 8 values per thread, more when
/// the row has more blocks than the last workgroup merges.
fn select_blocks(n: u32) -> (u32, u32) {
    let most = SELECT_WG * SELECT_LISTS;
    let block = (8 * SELECT_WG).max(n.div_ceil(most).next_multiple_of(SELECT_WG));
    (block, n.div_ceil(block).max(1))
}

/// The KV cache buffers of one layer.
pub struct KvCache {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub f16: bool,
}

impl KvCache {
    /// A cache of `positions` × `kv_heads` × `head_dim` values, f16 where `f16` is set.
    pub fn new(
        ctx: &GpuContext,
        positions: u32,
        kv_heads: u32,
        head_dim: u32,
        f16: bool,
    ) -> KvCache {
        let bytes = positions as u64 * kv_heads as u64 * head_dim as u64 * if f16 { 2 } else { 4 };
        KvCache {
            k: ctx.storage("k cache", bytes),
            v: ctx.storage("v cache", bytes),
            f16,
        }
    }
}

/// x as int8 records (x_quant.wgsl) for the int8 decode products: the buffer of its records
/// and where their scales start in it (vec4s). The decode attention writes its output so
/// (`Ops::writes_records`) for the product that reads it next (`Folds::records`).
#[derive(Clone)]
pub struct XRecords {
    buf: wgpu::Buffer,
    scales: u32,
}

impl XRecords {
    /// The buffer holding the records, then their (scale, sum) pairs.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buf
    }

    /// Where the (scale, sum) pairs start in `buffer`, in records (16 bytes each).
    pub fn scales(&self) -> u32 {
        self.scales
    }

    /// Where the parts' Σx² start (XQ_NORM records of one vector), four per record.
    pub fn sq_at(&self) -> u32 {
        self.scales + self.scales / 2
    }
}

/// x quantized for an int8 decode product: the dispatch that writes it (`Ops::quantize_x`;
/// none where the kernel producing x wrote the records) and the records.
struct QuantizedX {
    dispatch: Option<Dispatch>,
    records: XRecords,
}

impl QuantizedX {
    /// Records another kernel wrote: nothing to dispatch.
    fn given(records: &XRecords) -> QuantizedX {
        QuantizedX {
            dispatch: None,
            records: records.clone(),
        }
    }
}

/// What a decode product binds as x: the records where x is quantized, else x itself.
fn x_binding<'a>(quantized: &'a Option<QuantizedX>, x: &'a wgpu::Buffer) -> &'a wgpu::Buffer {
    quantized.as_ref().map(|q| &q.records.buf).unwrap_or(x)
}

/// Where the records' scales start, for the kernels' `xq_scales` (0 without records).
fn xq_scales(quantized: &Option<QuantizedX>) -> u32 {
    quantized.as_ref().map(|q| q.records.scales).unwrap_or(0)
}

/// Threads per workgroup of `quantize_x.wgsl` (WG there), one per part of 8 values.
const QUANTIZE_WG: u32 = 64;

/// What folds into a `matvec_multi.wgsl` product besides its weights and mode.
#[derive(Clone, Copy)]
struct MultiFlags {
    norm: bool,
    bias: bool,
    experts: bool,
    /// Int8 x (DOT_I8).
    int8: bool,
    /// The int8 records hold x times a norm's weights, with each part's Σx² (XQ_NORM).
    xq_norm: bool,
}

pub struct Ops {
    pub ctx: Arc<GpuContext>,
    pipelines: Arc<Pipelines>,
    /// Decode products' workgroup size and rows per workgroup.
    product_shape: (u32, u32),
    /// Parts in flight per lane: plain products, products reading two weights per part (GLU),
    /// then both for E2M1 weights.
    in_flight: (u32, u32, u32, u32),
    /// Rows each lane of a plain product (matvec.wgsl) takes, sharing its x reads; None:
    /// `rows_per_lane` chooses.
    rows_per_lane: Option<u32>,
    /// Decode products of Q4_0 and Q8_0 weights take int8 x (`GpuContext::int8_products`).
    int8_products: bool,
    /// ... those of at least this many outputs (INT8_MIN_OUTPUTS).
    int8_min_outputs: u32,
    /// The products' scratch buffers by name (the matrix-core product's f16 weights, f16
    /// inputs and bias block; the int8 products' quantized x), shared by every product and
    /// replaced by larger ones as needed: each product's dispatches keep the buffers they were
    /// built with.
    scratch: Mutex<HashMap<&'static str, wgpu::Buffer>>,
    /// Decode products of E2M1 weights in packed f16 (`Capabilities::packed_f16`).
    packed_f16: bool,
}

/// Decode products' workgroup: 256 threads over 4 rows (64 lanes per row). Measured against
/// 128×2, 64×2, 256×2 and lanes per row chosen by row length (benches/GPU.md, entries 25 and
/// 29): never slower by more than noise, up to 8 % faster.
pub const PRODUCT_SHAPE: (u32, u32) = (256, 4);

/// The fewest outputs of a decode product that takes int8 x. Its quantizing dispatch cost the
/// H200 about what the int8 product saved on products of 2,048–5,632 rows (tinyllama decode
/// 644 tok/s with and without; benches/GPU.md, entry 48), while the 201,088-row vocabulary
/// product of gpt-oss ran 1.6× faster: so only vocabulary-sized products take it.
pub const INT8_MIN_OUTPUTS: u32 = 16384;

/// Parts whose loads a lane of a decode product issues together: plain products, and products
/// reading two weights per part (GLU; entry 34).
pub const IN_FLIGHT: (u32, u32) = (4, 2);

/// ... for products of E2M1 weights (plain, GLU), whose parts take more registers to decode:
/// one at a time ran gpt-oss's expert products fastest (benches/GPU.md, entry 57).
pub const IN_FLIGHT_E2M1: (u32, u32) = (1, 1);

/// Rows each lane of a plain decode product takes, by the product's outputs (rows × batch): its
/// x values (and the folded norm's weights) are read once for all of them, which speeds up
/// large products (32000 × 2048 Q4_0 by 18 % with 3) and slows small ones, whose fewer
/// workgroups then each take longer (benches/GPU.md, entry 37).
pub fn rows_per_lane(outputs: u32) -> u32 {
    match outputs {
        16384.. => 3,
        8192.. => 2,
        _ => 1,
    }
}

impl Ops {
    pub fn new(ctx: Arc<GpuContext>) -> Ops {
        Ops {
            packed_f16: ctx.caps.packed_f16,
            pipelines: Arc::new(Pipelines::default()),
            product_shape: PRODUCT_SHAPE,
            in_flight: (IN_FLIGHT.0, IN_FLIGHT.1, IN_FLIGHT_E2M1.0, IN_FLIGHT_E2M1.1),
            rows_per_lane: None,
            int8_products: ctx.int8_products,
            int8_min_outputs: INT8_MIN_OUTPUTS,
            scratch: Mutex::new(HashMap::new()),
            ctx,
        }
    }

    /// Sets the decode products' workgroup size and rows per workgroup (both powers of two,
    /// rows ≤ size / 4), for measuring shapes against each other.
    pub fn set_product_shape(&mut self, wg: u32, rows: u32) {
        self.product_shape = (wg, rows);
    }

    /// Sets how many parts a lane of a decode product loads at once (plain, GLU; for every
    /// dtype), for measuring them against each other.
    pub fn set_in_flight(&mut self, plain: u32, glu: u32) {
        self.in_flight = (plain.max(1), glu.max(1), plain.max(1), glu.max(1));
    }

    /// Sets how many rows each lane of a plain decode product takes (1 to 3), for measuring
    /// them against each other.
    pub fn set_rows_per_lane(&mut self, rows: u32) {
        self.rows_per_lane = Some(rows.clamp(1, 3));
    }

    /// Turns the int8 decode products of Q4_0 and Q8_0 weights on or off (f32 products, as
    /// exact as the other dtypes').
    pub fn set_int8_products(&mut self, on: bool) {
        self.int8_products = on;
    }

    /// Sets the fewest outputs for which a decode product takes int8 x (tests and benches
    /// check the int8 products at any size with 0).
    pub fn set_int8_min_outputs(&mut self, outputs: u32) {
        self.int8_min_outputs = outputs;
    }

    /// Whether a decode product of `outputs` results over `weights` takes int8 x (DOT_I8, x
    /// quantized by a dispatch of its own before it): every weight Q4_0 or Q8_0, with `one_x`
    /// (GLU) of one dtype, and enough outputs that the faster product pays for the quantizing
    /// dispatch (INT8_MIN_OUTPUTS).
    pub fn dot_i8(&self, weights: &[&GpuWeight], one_x: bool, outputs: u32) -> bool {
        self.int8_weights(weights, one_x) && outputs >= self.int8_min_outputs
    }

    /// Whether int8 products are on and `weights` can take int8 x at all: every weight Q4_0
    /// or Q8_0, and with `one_x` (GLU) of one dtype.
    fn int8_weights(&self, weights: &[&GpuWeight], one_x: bool) -> bool {
        self.int8_products
            && weights
                .iter()
                .all(|w| matches!(w.dtype, DType::Q4_0 | DType::Q8_0))
            && (!one_x || weights.iter().all(|w| w.dtype == weights[0].dtype))
    }

    /// Whether a gate/up/activation product over `weights` (folding a norm of its input with
    /// `norm`) takes int8 x: as `dot_i8` for its outputs, or at any size when it folds a norm,
    /// since the quantizing dispatch then applies the norm in place of the norm's own dispatch
    /// that an f32 product of this kind runs before it (entry 43); so its int8 products cost no
    /// extra dispatch (benches/GPU.md, entry 52).
    pub fn glu_takes_int8(&self, weights: &[&GpuWeight], norm: bool) -> bool {
        let rows = weights.first().map_or(0, |w| w.rows as u32);
        self.int8_weights(weights, true) && (norm || rows >= self.int8_min_outputs)
    }

    /// Sets whether decode products of E2M1 weights multiply in packed f16 where the adapter
    /// offers f16 (else in f32, as exact contexts do), for measuring or checking both.
    pub fn set_packed_f16(&mut self, on: bool) {
        self.packed_f16 = on && self.ctx.caps.f16;
    }

    /// Whether decode products of E2M1 weights multiply in packed f16.
    pub fn packed_f16(&self) -> bool {
        self.packed_f16
    }

    /// Whether a decode product of weights read through `decoders` takes them in packed f16:
    /// E2M1 weights only, and no folded norm, whose raw x (before the division by its rms) may
    /// exceed what f16 products hold.
    fn takes_packed_f16(&self, decoders: &[&Defines], norm: bool) -> bool {
        self.packed_f16 && !norm && decoders.iter().all(|d| d.contains_key("E2M1"))
    }

    fn pipeline(
        &self,
        file: &str,
        defs: &Defines,
        entry: &str,
    ) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        self.pipelines.get(&self.ctx, file, defs, entry)
    }

    fn dispatch(
        &self,
        pipe: Arc<wgpu::ComputePipeline>,
        entries: &[(u32, &wgpu::Buffer)],
        groups: [u32; 3],
    ) -> Dispatch {
        let label = self.pipelines.label(&pipe);
        Dispatch::new(&self.ctx, label, pipe, entries, groups)
    }

    /// Workgroup shape of the decode products, and subgroup reductions where every subgroup
    /// lies within one row's lanes.
    fn product_defines(&self, glu: bool, e2m1: bool) -> Defines {
        let (wg, rpw) = self.product_shape;
        let tpr = wg / rpw;
        let caps = self.ctx.caps;
        let in_flight = match (glu, e2m1) {
            (false, false) => self.in_flight.0,
            (true, false) => self.in_flight.1,
            (false, true) => self.in_flight.2,
            (true, true) => self.in_flight.3,
        };
        let mut d = defines(&[
            ("WG", format!("{wg}u")),
            ("RPW", format!("{rpw}u")),
            ("IN_FLIGHT", format!("{in_flight}u")),
        ]);
        if caps.subgroups && caps.subgroup_max <= tpr && tpr.is_multiple_of(caps.subgroup_max) {
            d.insert("SUBGROUPS".into(), String::new());
        }
        d
    }

    fn matvec_defines(&self, decoder: Defines, experts: bool, bias: bool, rpl: u32) -> Defines {
        let e2m1 = decoder.contains_key("E2M1");
        let mut d = decoder;
        d.extend(self.product_defines(false, e2m1));
        d.insert("RPL".into(), format!("{rpl}u"));
        if rpl > 1 {
            d.insert("MULTI_ROW".into(), String::new());
        }
        if experts {
            d.insert("MOE".into(), String::new());
        }
        if bias {
            d.insert("BIAS".into(), String::new());
        }
        d
    }

    fn eltwise_defines(op: Eltwise) -> Defines {
        let flag = match op {
            Eltwise::Add => "OP_ADD",
            Eltwise::Copy => "OP_COPY",
            Eltwise::SwiGlu => "OP_SWIGLU",
            Eltwise::GluOss { .. } => "OP_GLU_OSS",
            Eltwise::ScaledAdd { .. } => "OP_SCALED_ADD",
        };
        let mut d = defines(&[(flag, String::new())]);
        if op == (Eltwise::ScaledAdd { sigmoid: true }) {
            d.insert("SIGMOID".into(), String::new());
        }
        if matches!(op, Eltwise::Add | Eltwise::Copy) {
            d.insert("ONE_INPUT".into(), String::new());
        }
        d
    }

    /// Builds, on a background thread, pipelines a model's steps will use: the prefill tiles and
    /// the embedding of the weight dtypes in `decoders` and, with no decoders, the fixed kernels,
    /// so that compiling overlaps the weight upload. (Decode products depend on what folds into
    /// them: the model's throwaway step at load builds those.)
    pub fn warm_up(&self, decoders: &[Defines], kv_f16: bool) {
        type Job = (&'static str, Defines, Vec<Defines>, &'static str);
        let mut jobs: Vec<Job> = Vec::new();
        let single = |file, d| (file, d, Vec::new(), "main");
        for dec in decoders {
            for tile in MatmulTile::ALL {
                jobs.push(single("matmul.wgsl", tile.defines(dec.clone())));
            }
            if self.ctx.caps.matrix_cores {
                jobs.push(single("coop_weights.wgsl", dec.clone()));
            }
            jobs.push(single("embed.wgsl", dec.clone()));
        }
        if decoders.is_empty() && self.ctx.caps.matrix_cores {
            jobs.push(single("coop_inputs.wgsl", Defines::new()));
            for rows in [COOP_BLOCK, 2 * COOP_BLOCK] {
                jobs.push(single("matmul_coop.wgsl", coop_defines(rows, false).0));
            }
        }
        if decoders.is_empty() {
            for mode in ["PLAIN", "INPLACE", "RESIDUAL"] {
                jobs.push(single("norm.wgsl", defines(&[(mode, String::new())])));
            }
            jobs.push(single("rope.wgsl", Defines::new()));
            jobs.push(single("rope.wgsl", defines(&[("TWO", String::new())])));
            let kv = if kv_f16 {
                Defines::new()
            } else {
                defines(&[("KV_F32", String::new())])
            };
            for entry in [
                "write_kv",
                "rope_write",
                "attend",
                "combine",
                "attend_tiled",
            ] {
                jobs.push(("attention.wgsl", kv.clone(), Vec::new(), entry));
            }
            for op in [Eltwise::Add, Eltwise::Copy, Eltwise::SwiGlu] {
                jobs.push(single("elementwise.wgsl", Self::eltwise_defines(op)));
            }
            jobs.push(single("select.wgsl", Defines::new()));
            jobs.push(single("select.wgsl", defines(&[("TOPK", String::new())])));
        }
        let (ctx, pipelines) = (self.ctx.clone(), self.pipelines.clone());
        std::thread::spawn(move || {
            for (file, d, weights, entry) in jobs {
                pipelines.prepare(&ctx, file, &d, &weights, entry);
            }
        });
    }

    fn weight_defines(&self, w: &GpuWeight, sel: &MatSel) -> Defines {
        let mut d = w.decoder();
        if sel.input_major {
            d.insert("INPUT_MAJOR".into(), String::new());
            d.insert("IN_STRIDE".into(), format!("{}u", w.cols));
        }
        d
    }

    /// x quantized for the int8 decode products (quantize_x.wgsl): `vectors` vectors of `cols`
    /// values from `x` (vector v at x.offset + v · x.stride), through the RMSNorm `norm` first.
    /// The records go to a scratch buffer shared by every product: a product's quantization
    /// and its own dispatch follow each other, and wgpu orders dispatches that write and read
    /// one buffer.
    fn quantize_x(
        &self,
        x: Region,
        cols: u32,
        vectors: u32,
        norm: Option<NormFold>,
    ) -> GpuResult<QuantizedX> {
        let mut d = defines(&[("DOT_I8", String::new()), ("XQ_OUT", String::new())]);
        if norm.is_some() {
            d.insert("NORM".into(), String::new());
        }
        let pipe = self.pipeline("quantize_x.wgsl", &d, "main")?;
        let parts = cols.div_ceil(32) * 4;
        let records = self.records_buffer(parts * vectors);
        let params = QuantizeParams {
            cols,
            parts,
            x_offset: x.offset,
            x_stride: x.stride,
            scales: records.scales,
            norm_offset: norm.map(|n| n.offset).unwrap_or(0),
            eps: norm.map(|n| n.eps).unwrap_or(0.0),
            _pad: 0,
        };
        let ub = self.ctx.uniform("quantize params", &params);
        let mut entries = vec![(0, x.buf), (1, &records.buf), (2, &ub)];
        if let Some(n) = &norm {
            entries.push((3, n.buf));
        }
        let groups = [parts.div_ceil(QUANTIZE_WG), vectors, 1];
        let dispatch = self.dispatch(pipe, &entries, groups);
        Ok(QuantizedX {
            dispatch: Some(dispatch),
            records,
        })
    }

    /// Room for `parts` int8 records (16 bytes each, then two parts' scales per 16 bytes, then
    /// for XQ_NORM records of one vector four parts' Σx² per 16 bytes) in
    /// the scratch buffer every int8 product shares: a product's quantization (or the kernel
    /// writing its records) and its own dispatch follow each other, and wgpu orders
    /// dispatches that write and read one buffer.
    fn records_buffer(&self, parts: u32) -> XRecords {
        let vec4s = parts + parts / 2 + parts.div_ceil(4);
        XRecords {
            buf: self.scratch_buffer("int8 x", vec4s as u64 * 16),
            scales: parts,
        }
    }

    /// Where the decode attention of `shape` writes its output as int8 records, if it can
    /// (`writes_records`).
    pub fn attention_records(&self, shape: &AttnShape) -> Option<XRecords> {
        self.writes_records(shape)
            .then(|| self.records_buffer(shape.heads * shape.head_dim / 8))
    }

    /// Whether the decode attention (`decode_rope`) of `shape` can write its output as int8
    /// records: int8 products on, each KV head's group of outputs whole units of 32 that its
    /// merging workgroup holds (≤ 2048 values), and a binding to spare.
    pub fn writes_records(&self, shape: &AttnShape) -> bool {
        let group = shape.group() * shape.head_dim;
        self.int8_products
            && group.is_multiple_of(32)
            && group <= 2048
            && self.ctx.caps.max_storage_buffers > DECODE_ROPE_BUFFERS
    }

    /// Whether a decode product of `w` can read x as records another kernel wrote
    /// (`Folds::records`).
    pub fn takes_records(&self, w: &GpuWeight) -> bool {
        self.int8_weights(&[w], false)
    }

    /// y[z] = W · x[z] (+ bias) for `batch` vectors over the outputs `sel` picks; with
    /// `experts`, batch item z uses matrix ids[z] (and bias values ids[z] · expert_stride on).
    #[allow(clippy::too_many_arguments)]
    pub fn matvec(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        batch: u32,
        bias: Option<Bias>,
        experts: Option<ExpertSel>,
        folds: Folds,
    ) -> GpuResult<Vec<Dispatch>> {
        w.check_sel(sel)?;
        let rpl = self
            .rows_per_lane
            .unwrap_or_else(|| rows_per_lane(sel.out_dim as u32 * batch));
        let mut d = self.matvec_defines(
            self.weight_defines(w, sel),
            experts.is_some(),
            bias.is_some(),
            rpl,
        );
        // The router's product, which writes the norm's output, reads x itself.
        let outputs = sel.out_dim as u32 * batch.max(1);
        let int8 = self.dot_i8(&[w], false, outputs) && folds.normed.is_none();
        let x_div = experts.map(|e| e.x_div.max(1)).unwrap_or(1);
        // Records another kernel wrote: of x itself, or of the norm's input times its weights.
        let normed_records = folds.norm.and_then(|n| n.records);
        let given = folds.records.or(normed_records);
        let quantized = if let Some(records) = given {
            if !self.takes_records(w)
                || batch != 1
                || experts.is_some()
                || folds.normed.is_some()
                || (folds.records.is_some() && folds.norm.is_some())
            {
                return Err(GpuError::Unsupported {
                    tensor: w.name.clone(),
                    reason: "int8 records of x for a product that cannot take them".into(),
                });
            }
            d.insert("DOT_I8".into(), String::new());
            if normed_records.is_some() {
                d.insert("XQ_NORM".into(), String::new());
                d.insert("RMS".into(), String::new());
            }
            Some(QuantizedX::given(records))
        } else if int8 {
            d.insert("DOT_I8".into(), String::new());
            let vectors = (batch.max(1) - 1) / x_div + 1;
            Some(self.quantize_x(x, sel.in_dim as u32, vectors, folds.norm)?)
        } else {
            if folds.norm.is_some() {
                d.insert("NORM".into(), String::new());
                d.insert("RMS".into(), String::new());
            }
            if self.takes_packed_f16(&[&d], folds.norm.is_some()) {
                d.insert("PACKED_F16".into(), String::new());
            }
            None
        };
        if folds.residual.is_some() {
            d.insert("RESIDUAL".into(), String::new());
        }
        if folds.normed.is_some() {
            if folds.norm.is_none() || batch != 1 || experts.is_some() {
                return Err(GpuError::Unsupported {
                    tensor: w.name.clone(),
                    reason: "the norm's output written by a product without one vector's norm"
                        .into(),
                });
            }
            d.insert("NORM_OUT".into(), String::new());
        }
        let pipe = self.pipeline("matvec.wgsl", &d, "main")?;
        let mrows = w.matrix_rows(sel.input_major);
        // Stored rows per matrix (parts hold whole matrices when used with experts).
        let stored = if sel.input_major { sel.in_dim } else { mrows }.max(1);
        // Experts: every part runs every item and skips those whose matrix it does not hold.
        let ranges = if experts.is_some() {
            (0..w.parts.len())
                .map(|i| PartRange {
                    part: i,
                    j_lo: 0,
                    j_hi: sel.out_dim,
                    row_base: sel.offset,
                })
                .collect()
        } else {
            w.ranges(sel)
        };
        let mut out = Vec::new();
        for r in ranges {
            let part = &w.parts[r.part];
            let rows = (r.j_hi - r.j_lo) as u32;
            let (gx, gy) = grid2(rows.div_ceil(self.product_shape.1 * rpl));
            let params = MatvecParams {
                rows,
                cols: sel.in_dim as u32,
                row_base: r.row_base as u32,
                row_stride: sel.stride as u32,
                matrix_rows: mrows as u32,
                bias_stride: bias.map(|b| b.expert_stride).unwrap_or(0),
                x_offset: x.offset,
                x_stride: x.stride,
                x_div,
                y_offset: y.offset + r.j_lo as u32,
                y_stride: y.stride,
                expert_first: (part.first_row / stored) as u32,
                expert_count: (part.rows / stored) as u32,
                groups_x: gx,
                bias_offset: bias.map(|b| b.offset).unwrap_or(0) + r.j_lo as u32,
                norm_offset: folds.norm.map(|n| n.offset).unwrap_or(0),
                eps: folds.norm.map(|n| n.eps).unwrap_or(0.0),
                xq_scales: xq_scales(&quantized),
                xq_sq: normed_records.map(|r| r.sq_at()).unwrap_or(0),
                _pad: 0,
            };
            let ub = self.ctx.uniform("matvec params", &params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = part
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| (i as u32, b))
                .collect();
            let xbuf = x_binding(&quantized, x.buf);
            entries.extend([(3, xbuf), (4, y.buf), (5, &ub)]);
            if let Some(e) = &experts {
                entries.push((6, e.ids));
            }
            if let Some(b) = &bias {
                entries.push((7, b.buf));
            }
            if let (Some(n), None) = (&folds.norm, &quantized) {
                entries.push((8, n.buf));
            }
            if let Some(r) = folds.residual {
                entries.push((9, r));
            }
            if let Some(h) = folds.normed {
                entries.push((10, h));
            }
            out.push(self.dispatch(pipe.clone(), &entries, [gx, gy, batch]));
        }
        Ok(with_quantization(quantized, out))
    }

    /// One vector through two or three whole, unsplit weights with the same input width in one
    /// dispatch (see `Multi`), behind the quantization of x where the weights take int8 x
    /// (`dot_i8`); outputs start at offset 0 of their buffers.
    pub fn matvec_multi(
        &self,
        weights: &[&GpuWeight],
        x: Region,
        outs: &[&wgpu::Buffer],
        mode: Multi,
        norm: Option<NormFold>,
        biases: &[Bias],
    ) -> GpuResult<Vec<Dispatch>> {
        let bad = |reason: String| GpuError::Unsupported {
            tensor: weights.first().map(|w| w.name.clone()).unwrap_or_default(),
            reason,
        };
        let glu = matches!(mode, Multi::Glu(_));
        let shape_ok = match mode {
            Multi::Split => (2..=3).contains(&weights.len()) && outs.len() == weights.len(),
            Multi::Glu(_) => {
                weights.len() == 2 && outs.len() == 1 && weights[0].rows == weights[1].rows
            }
        };
        let biases_ok = biases.is_empty() || biases.len() == weights.len();
        if !shape_ok
            || !biases_ok
            || weights
                .iter()
                .any(|w| w.parts.len() != 1 || w.cols != weights[0].cols)
        {
            return Err(bad(format!("{} weights fused as {mode:?}", weights.len())));
        }
        let decoders: Vec<Defines> = weights.iter().map(|w| w.decoder()).collect();
        let rows: u32 = if glu {
            weights[0].rows as u32
        } else {
            weights.iter().map(|w| w.rows as u32).sum()
        };
        let given = norm.and_then(|n| n.records);
        if given.is_some() && !self.int8_weights(weights, glu) {
            return Err(bad(
                "int8 records of x for weights that cannot take them".into()
            ));
        }
        let int8 = if given.is_some() {
            true
        } else if glu {
            self.glu_takes_int8(weights, norm.is_some())
        } else {
            self.dot_i8(weights, false, rows)
        };
        let cols = weights[0].cols as u32;
        let eps = norm.map(|n| n.eps).unwrap_or(0.0);
        let quantized = match given {
            Some(records) => Some(QuantizedX::given(records)),
            None if int8 => Some(self.quantize_x(x, cols, 1, norm)?),
            None => None,
        };
        // With int8 x the quantization (or the records' writer) applied the norm's weights.
        let norm = norm.filter(|_| !int8);
        let flags = MultiFlags {
            norm: norm.is_some(),
            bias: !biases.is_empty(),
            experts: false,
            int8,
            xq_norm: given.is_some(),
        };
        let pipe = self.multi_pipeline(decoders, mode, flags)?;
        let rows: Vec<u32> = weights.iter().map(|w| w.rows as u32).collect();
        let total = if glu { rows[0] } else { rows.iter().sum() };
        let (gx, gy) = grid2(total.div_ceil(self.product_shape.1));
        let used = [
            rows[0],
            if glu { 0 } else { rows[1] },
            rows.get(2).copied().unwrap_or(0),
        ];
        let (alpha, limit) = match mode {
            Multi::Glu(Eltwise::GluOss { alpha, limit }) => (alpha, limit),
            _ => (0.0, 0.0),
        };
        let params = MultiParams {
            alpha,
            limit,
            norm_offset: norm.map(|n| n.offset).unwrap_or(0),
            eps,
            bias_offsets: std::array::from_fn(|i| biases.get(i).map(|b| b.offset).unwrap_or(0)),
            xq_scales: xq_scales(&quantized),
            xq_sq: given.map(|r| r.sq_at()).unwrap_or(0),
            ..MultiParams::whole(used, cols, x.offset, gx)
        };
        let ub = self.ctx.uniform("multi params", &params);
        let mut entries: Vec<(u32, &wgpu::Buffer)> = Vec::new();
        for (i, w) in weights.iter().enumerate() {
            entries.extend(multi_weight_entries(i, &w.parts[0]));
        }
        entries.push((30, x_binding(&quantized, x.buf)));
        for (i, o) in outs.iter().enumerate() {
            entries.push((31 + i as u32, o));
        }
        entries.push((34, &ub));
        if let Some(n) = &norm {
            entries.push((35, n.buf));
        }
        for (i, b) in biases.iter().enumerate() {
            entries.push((36 + i as u32, b.buf));
        }
        let product = self.dispatch(pipe, &entries, [gx, gy, 1]);
        Ok(with_quantization(quantized, vec![product]))
    }

    /// The pipeline of `matvec_multi.wgsl` for weights read through `decoders`.
    fn multi_pipeline(
        &self,
        mut decoders: Vec<Defines>,
        mode: Multi,
        flags: MultiFlags,
    ) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let glu = matches!(mode, Multi::Glu(_));
        // E2M1's own count was measured for GLU products; q/k/v keep the plain one.
        let e2m1 = glu && decoders.iter().all(|dec| dec.contains_key("E2M1"));
        let mut d = self.product_defines(glu, e2m1);
        if glu && self.takes_packed_f16(&decoders.iter().collect::<Vec<_>>(), flags.norm) {
            // The kernel (common.wgsl: f16 on) and each weight's decoder (its half parts).
            for dec in decoders.iter_mut().chain([&mut d]) {
                dec.insert("PACKED_F16".into(), String::new());
            }
        }
        let mut flag = |f: &str| d.insert(f.into(), String::new());
        match mode {
            Multi::Split => {
                flag("SPLIT");
                if decoders.len() == 3 {
                    flag("THREE");
                }
            }
            Multi::Glu(op) => {
                flag("GLU");
                if matches!(op, Eltwise::GluOss { .. }) {
                    flag("OSS");
                }
            }
        }
        let MultiFlags {
            norm,
            bias,
            experts,
            int8,
            xq_norm,
        } = flags;
        for (on, f) in [
            (norm, "NORM"),
            (norm || xq_norm, "RMS"),
            (bias, "BIAS"),
            (experts, "MOE"),
            (int8, "DOT_I8"),
            (xq_norm, "XQ_NORM"),
        ] {
            if on {
                flag(f);
            }
        }
        if int8 {
            // The decoder instances define their int8 dot products.
            for dec in &mut decoders {
                dec.insert("DOT_I8".into(), String::new());
            }
        }
        self.pipelines
            .get_multi(&self.ctx, "matvec_multi.wgsl", &d, &decoders, "main")
    }

    /// Gate, up and the activation of mixture-of-experts items in one product:
    /// y[z] = act(G_e · x[z / x_div] + bg_e, U_e · x[z / x_div] + bu_e) with e = ids[z], for
    /// `items` items, where G and U are the views `sels` of stacked [experts, rows, cols]
    /// weights (possibly one weight, as gpt-oss's interleaved gate_up) split alike into parts
    /// of whole experts: one dispatch per part, x read once for both products.
    #[allow(clippy::too_many_arguments)]
    pub fn matvec_glu_experts(
        &self,
        weights: [&GpuWeight; 2],
        sels: [&MatSel; 2],
        x: Region,
        y: Region,
        items: u32,
        act: Eltwise,
        biases: Option<[Bias; 2]>,
        experts: ExpertSel,
    ) -> GpuResult<Vec<Dispatch>> {
        let [gw, uw] = weights;
        let [gs, us] = sels;
        gw.check_sel(gs)?;
        uw.check_sel(us)?;
        let bad = |reason: &str| {
            Err(GpuError::Unsupported {
                tensor: gw.name.clone(),
                reason: format!("{} fused with {}: {reason}", gw.name, uw.name),
            })
        };
        if !matches!(act, Eltwise::SwiGlu | Eltwise::GluOss { .. }) {
            return bad(&format!("{act:?} is no gated activation"));
        }
        if (gs.out_dim, gs.in_dim, gs.input_major) != (us.out_dim, us.in_dim, us.input_major) {
            return bad("views of different shapes");
        }
        if !gw.same_parts(uw) || gw.matrix_rows(gs.input_major) != uw.matrix_rows(us.input_major) {
            return bad("weights split differently");
        }
        if biases.is_some_and(|[a, b]| a.expert_stride != b.expert_stride) {
            return bad("biases of different strides");
        }
        let decoders = vec![self.weight_defines(gw, gs), self.weight_defines(uw, us)];
        let int8 = self.dot_i8(&[gw, uw], true, gs.out_dim as u32 * items.max(1));
        let x_div = experts.x_div.max(1);
        let quantized = if int8 {
            let vectors = (items.max(1) - 1) / x_div + 1;
            Some(self.quantize_x(x, gs.in_dim as u32, vectors, None)?)
        } else {
            None
        };
        let flags = MultiFlags {
            norm: false,
            bias: biases.is_some(),
            experts: true,
            int8,
            xq_norm: false,
        };
        let pipe = self.multi_pipeline(decoders, Multi::Glu(act), flags)?;
        let mrows = gw.matrix_rows(gs.input_major);
        let stored = if gs.input_major { gs.in_dim } else { mrows }.max(1);
        let rows = gs.out_dim as u32;
        let (gx, gy) = grid2(rows.div_ceil(self.product_shape.1));
        let (alpha, limit) = match act {
            Eltwise::GluOss { alpha, limit } => (alpha, limit),
            _ => (0.0, 0.0),
        };
        let mut out = Vec::new();
        for (gp, up) in gw.parts.iter().zip(&uw.parts) {
            let params = MultiParams {
                alpha,
                limit,
                bias_offsets: [
                    biases.map(|b| b[0].offset).unwrap_or(0),
                    biases.map(|b| b[1].offset).unwrap_or(0),
                    0,
                ],
                row_base: [gs.offset as u32, us.offset as u32],
                row_stride: [gs.stride as u32, us.stride as u32],
                matrix_rows: mrows as u32,
                bias_stride: biases.map(|b| b[0].expert_stride).unwrap_or(0),
                x_stride: x.stride,
                x_div,
                y_stride: y.stride,
                expert_first: (gp.first_row / stored) as u32,
                expert_count: (gp.rows / stored) as u32,
                xq_scales: xq_scales(&quantized),
                ..MultiParams::whole([rows, 0, 0], gs.in_dim as u32, x.offset, gx)
            };
            let ub = self.ctx.uniform("glu experts params", &params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = Vec::new();
            entries.extend(multi_weight_entries(0, gp));
            entries.extend(multi_weight_entries(1, up));
            let xbuf = x_binding(&quantized, x.buf);
            entries.extend([(30, xbuf), (31, y.buf), (34, &ub), (39, experts.ids)]);
            if let Some([bg, bu]) = &biases {
                entries.extend([(36, bg.buf), (37, bu.buf)]);
            }
            out.push(self.dispatch(pipe.clone(), &entries, [gx, gy, items]));
        }
        Ok(with_quantization(quantized, out))
    }

    /// y[t] = W · x[t] (+ bias) for `tokens` rows of x over the outputs `sel` picks: on matrix
    /// cores where the product fits them (`coop_shape`), else the tiled prefill kernel with the
    /// tile `MatmulTile::pick` chooses for the shape.
    pub fn matmul(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
    ) -> GpuResult<Vec<Dispatch>> {
        if let Some(shape) = self.coop_shape(sel, &y, tokens) {
            return self.coop(w, sel, x, y, tokens, bias, shape);
        }
        let tile = MatmulTile::pick(sel.out_dim as u32, tokens);
        self.tiled(w, sel, x, y, tokens, bias, tile, None)
    }

    /// `matmul` on matrix cores; an error where the product does not fit them (`coop_shape`).
    pub fn matmul_coop(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
    ) -> GpuResult<Vec<Dispatch>> {
        let Some(shape) = self.coop_shape(sel, &y, tokens) else {
            return Err(GpuError::Unsupported {
                tensor: w.name.clone(),
                reason: format!(
                    "{} × {} product of {tokens} tokens into y at {} (stride {}) on matrix \
                     cores ({})",
                    sel.out_dim,
                    sel.in_dim,
                    y.offset,
                    y.stride,
                    if self.ctx.caps.matrix_cores {
                        "shape or alignment unsupported"
                    } else {
                        "off or not offered"
                    }
                ),
            });
        };
        self.coop(w, sel, x, y, tokens, bias, shape)
    }

    /// The matrix-core shape of a dense product, or None where it keeps the f32 tiles: matrix
    /// cores off; fewer than `COOP_BLOCK` tokens; outputs not a multiple of `COOP_BLOCK`; an f16
    /// copy of the weight over `COOP_WEIGHT_BYTES` or a binding; y's offset or stride not a
    /// multiple of 4 values (matrix stores are 16-byte aligned).
    fn coop_shape(&self, sel: &MatSel, y: &Region, tokens: u32) -> Option<CoopShape> {
        let caps = self.ctx.caps;
        let rows = sel.out_dim as u32;
        let k = (sel.in_dim as u32).div_ceil(32) * 32;
        let tokens = tokens / COOP_BLOCK * COOP_BLOCK;
        let weight_bytes = rows as u64 * k as u64 * 2;
        let fits = caps.matrix_cores
            && tokens > 0
            && rows > 0
            && rows.is_multiple_of(COOP_BLOCK)
            // Grids: decoded rows on y, and blocks of tokens on x.
            && rows <= 65535
            && tokens / COOP_BLOCK <= 65535
            && weight_bytes <= COOP_WEIGHT_BYTES.min(caps.max_binding)
            && tokens as u64 * k as u64 * 2 <= caps.max_binding
            && (rows as u64 * 16 * 4) <= caps.max_binding
            && y.offset.is_multiple_of(4)
            && y.stride.is_multiple_of(4);
        fits.then_some(CoopShape { rows, k, tokens })
    }

    /// A products' scratch buffer of at least `bytes` (see `Ops::scratch`).
    fn scratch_buffer(&self, name: &'static str, bytes: u64) -> wgpu::Buffer {
        let mut bufs = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        match bufs.get(name) {
            Some(b) if b.size() >= bytes => b.clone(),
            _ => {
                let b = self.ctx.storage(name, bytes.next_power_of_two());
                bufs.insert(name, b.clone());
                b
            }
        }
    }

    /// The product on matrix cores: the weight decoded to f16 (with the bias block), x converted
    /// to f16, the matrix-core kernel over `shape.tokens` tokens, and the f32 tiles over the
    /// tokens left.
    #[allow(clippy::too_many_arguments)]
    fn coop(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
        shape: CoopShape,
    ) -> GpuResult<Vec<Dispatch>> {
        let CoopShape { rows, k, tokens: t } = shape;
        let w16 = self.scratch_buffer("coop weights", rows as u64 * k as u64 * 2);
        let x16 = self.scratch_buffer("coop inputs", t as u64 * k as u64 * 2);
        let block = bias.map(|_| self.scratch_buffer("coop bias", rows as u64 * 16 * 4));
        let bias_out = bias.zip(block.as_ref());
        let mut out = self.coop_weights(w, sel, &w16, k, bias_out)?;
        out.push(self.coop_inputs(x, &x16, sel.in_dim as u32, k, t)?);
        let (d, per_group) = coop_defines(rows, bias.is_some());
        let pipe = self.pipeline("matmul_coop.wgsl", &d, "main")?;
        let params = CoopParams {
            rows,
            k,
            y_offset: y.offset,
            y_stride: y.stride,
        };
        let ub = self.ctx.uniform("coop params", &params);
        let mut entries = vec![(0, &w16), (1, &x16), (2, y.buf), (3, &ub)];
        if let Some(b) = &block {
            entries.push((4, b));
        }
        let grid = [t / COOP_BLOCK, rows / per_group, 1];
        out.push(self.dispatch(pipe, &entries, grid));
        if tokens > t {
            let rest = tokens - t;
            let x_rest = Region::new(x.buf, x.offset + t * x.stride, x.stride);
            let y_rest = Region::new(y.buf, y.offset + t * y.stride, y.stride);
            let tile = MatmulTile::pick(rows, rest);
            out.extend(self.tiled(w, sel, x_rest, y_rest, rest, bias, tile, None)?);
        }
        Ok(out)
    }

    /// Decodes the outputs `sel` picks to f16 rows of `stride` halves in `out` (zeros past the
    /// input length; `coop_weights.wgsl`), one dispatch per weight part; with a bias, also
    /// writes the bias block ([16][outputs], each row the bias) into the second buffer.
    pub fn coop_weights(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        out: &wgpu::Buffer,
        stride: u32,
        bias: Option<(Bias, &wgpu::Buffer)>,
    ) -> GpuResult<Vec<Dispatch>> {
        w.check_sel(sel)?;
        let mut d = self.weight_defines(w, sel);
        if bias.is_some() {
            d.insert("BIAS".into(), String::new());
        }
        let pipe = self.pipeline("coop_weights.wgsl", &d, "main")?;
        let lanes = (sel.in_dim as u32).div_ceil(32) * 4;
        let mut dispatches = Vec::new();
        for r in w.ranges(sel) {
            let part = &w.parts[r.part];
            let rows = (r.j_hi - r.j_lo) as u32;
            let params = CoopWeightsParams {
                rows,
                cols: sel.in_dim as u32,
                stride,
                first_out: r.j_lo as u32,
                row_base: r.row_base as u32,
                row_stride: sel.stride as u32,
                bias_offset: bias.map(|(b, _)| b.offset).unwrap_or(0) + r.j_lo as u32,
                out_rows: sel.out_dim as u32,
            };
            let ub = self.ctx.uniform("coop weights params", &params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = part
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| (i as u32, b))
                .collect();
            entries.extend([(3, out), (4, &ub)]);
            if let Some((b, block)) = &bias {
                entries.extend([(5, b.buf), (6, *block)]);
            }
            dispatches.push(self.dispatch(pipe.clone(), &entries, [lanes.div_ceil(64), rows, 1]));
        }
        Ok(dispatches)
    }

    /// Converts `tokens` rows of `cols` values of x to f16 rows of `stride` halves in `out`
    /// (zeros past `cols`; `coop_inputs.wgsl`).
    pub fn coop_inputs(
        &self,
        x: Region,
        out: &wgpu::Buffer,
        cols: u32,
        stride: u32,
        tokens: u32,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("coop_inputs.wgsl", &Defines::new(), "main")?;
        let params = CoopInputsParams {
            cols,
            stride,
            tokens,
            x_offset: x.offset,
            x_stride: x.stride,
            _pad: [0; 3],
        };
        let ub = self.ctx.uniform("coop inputs params", &params);
        let entries = [(0, x.buf), (1, out), (2, &ub)];
        Ok(self.dispatch(pipe, &entries, [(stride / 4).div_ceil(64), tokens, 1]))
    }

    /// `matmul` with a given tile.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_tiled(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
        tile: MatmulTile,
    ) -> GpuResult<Vec<Dispatch>> {
        self.tiled(w, sel, x, y, tokens, bias, tile, None)
    }

    /// y[i] = W_{e(i)} · x[i / x_div] (+ the expert's bias) for the items grouped by expert in
    /// `experts` (`moe_group`): the tiled prefill kernel, each tile over one expert's items (the
    /// mid tile, whose token count the grouping uses).
    pub fn matmul_experts(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        bias: Option<Bias>,
        experts: ExpertTiles,
    ) -> GpuResult<Vec<Dispatch>> {
        if experts.max_tiles > 65535 {
            return Err(GpuError::Unsupported {
                tensor: w.name.clone(),
                reason: format!("{} expert tiles in one dispatch", experts.max_tiles),
            });
        }
        self.tiled(w, sel, x, y, 0, bias, MatmulTile::Mid, Some(experts))
    }

    #[allow(clippy::too_many_arguments)]
    fn tiled(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
        tile: MatmulTile,
        experts: Option<ExpertTiles>,
    ) -> GpuResult<Vec<Dispatch>> {
        w.check_sel(sel)?;
        if self.ctx.caps.max_workgroup_storage < MATMUL_WORKGROUP_BYTES {
            return Err(GpuError::Unsupported {
                tensor: "prefill product".into(),
                reason: format!(
                    "the adapter offers {} bytes of workgroup memory, the tiles need {}",
                    self.ctx.caps.max_workgroup_storage, MATMUL_WORKGROUP_BYTES
                ),
            });
        }
        let mut d = tile.defines(self.weight_defines(w, sel));
        if bias.is_some() {
            d.insert("BIAS".into(), String::new());
        }
        if experts.is_some() {
            d.insert("EXPERTS".into(), String::new());
        }
        let pipe = self.pipeline("matmul.wgsl", &d, "main")?;
        let mrows = w.matrix_rows(sel.input_major);
        // Stored rows per matrix (parts hold whole matrices when used with experts).
        let stored = if sel.input_major { sel.in_dim } else { mrows }.max(1);
        let ranges = match experts {
            Some(_) => Self::expert_ranges(w, sel),
            None => w.ranges(sel),
        };
        let mut out = Vec::new();
        for r in ranges {
            let part = &w.parts[r.part];
            let rows = (r.j_hi - r.j_lo) as u32;
            let params = MatmulParams {
                rows,
                cols: sel.in_dim as u32,
                tokens,
                x_offset: x.offset,
                x_stride: x.stride,
                y_offset: y.offset + r.j_lo as u32,
                y_stride: y.stride,
                bias_offset: bias.map(|b| b.offset).unwrap_or(0) + r.j_lo as u32,
                row_base: r.row_base as u32,
                row_stride: sel.stride as u32,
                matrix_rows: mrows as u32,
                bias_stride: bias.map(|b| b.expert_stride).unwrap_or(0),
                expert_first: (part.first_row / stored) as u32,
                expert_count: (part.rows / stored) as u32,
                x_div: experts.map(|e| e.x_div.max(1)).unwrap_or(1),
                _pad: 0,
            };
            let ub = self.ctx.uniform("matmul params", &params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = part
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| (i as u32, b))
                .collect();
            entries.extend([(3, x.buf), (4, y.buf), (5, &ub)]);
            if let Some(e) = &experts {
                entries.extend([(6, e.order), (8, e.tiles)]);
            }
            if let Some(b) = &bias {
                entries.push((7, b.buf));
            }
            let grid = match experts {
                Some(e) => [rows.div_ceil(tile.shape().0), e.max_tiles, 1],
                None => tile.grid(rows, tokens),
            };
            out.push(self.dispatch(pipe.clone(), &entries, grid));
        }
        Ok(out)
    }

    /// Experts: every part runs every item and skips those whose matrix it does not hold.
    fn expert_ranges(w: &GpuWeight, sel: &MatSel) -> Vec<PartRange> {
        (0..w.parts.len())
            .map(|i| PartRange {
                part: i,
                j_lo: 0,
                j_hi: sel.out_dim,
                row_base: sel.offset,
            })
            .collect()
    }

    /// y[t] = table[ids[t]] · scale, dense [tokens, cols].
    pub fn embed(
        &self,
        table: &GpuWeight,
        ids: &wgpu::Buffer,
        y: &wgpu::Buffer,
        tokens: u32,
        scale: f32,
    ) -> GpuResult<Vec<Dispatch>> {
        let pipe = self.pipeline("embed.wgsl", &table.decoder(), "main")?;
        let units = (table.cols as u32).div_ceil(32);
        let mut out = Vec::new();
        for part in &table.parts {
            let params = EmbedParams {
                rows: part.rows as u32,
                cols: table.cols as u32,
                first_row: part.first_row as u32,
                tokens,
                scale,
                _pad: [0; 3],
            };
            let ub = self.ctx.uniform("embed params", &params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = part
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| (i as u32, b))
                .collect();
            entries.extend([(3, ids), (4, y), (5, &ub)]);
            out.push(self.dispatch(pipe.clone(), &entries, [units.div_ceil(8), tokens, 1]));
        }
        Ok(out)
    }

    /// RMSNorm of `rows` rows of `n` values from x into y (in place when x is None), with the n
    /// weights at w.
    pub fn rms_norm(
        &self,
        x: Option<Region>,
        y: Region,
        w: Region,
        n: u32,
        rows: u32,
        eps: f32,
    ) -> GpuResult<Dispatch> {
        let mode = if x.is_none() { "INPLACE" } else { "PLAIN" };
        self.norm(mode, x, y, w, n, rows, eps)
    }

    /// The residual add and the RMSNorm after it in one dispatch: x += y, then y = norm(x) · w.
    pub fn add_rms_norm(
        &self,
        x: Region,
        y: Region,
        w: Region,
        n: u32,
        rows: u32,
        eps: f32,
    ) -> GpuResult<Dispatch> {
        self.norm("RESIDUAL", Some(x), y, w, n, rows, eps)
    }

    #[allow(clippy::too_many_arguments)]
    fn norm(
        &self,
        mode: &str,
        x: Option<Region>,
        y: Region,
        w: Region,
        n: u32,
        rows: u32,
        eps: f32,
    ) -> GpuResult<Dispatch> {
        let mut d = defines(&[(mode, String::new())]);
        let caps = self.ctx.caps;
        if caps.subgroups && caps.subgroup_max <= 256 {
            d.insert("SUBGROUPS".into(), String::new());
        }
        let pipe = self.pipeline("norm.wgsl", &d, "main")?;
        let params = NormParams {
            n,
            rows,
            x_offset: x.map(|r| r.offset).unwrap_or(0),
            y_offset: y.offset,
            eps,
            w_offset: w.offset,
            _pad: [0; 2],
        };
        let ub = self.ctx.uniform("norm params", &params);
        let mut entries = vec![(1, y.buf), (2, w.buf), (3, &ub)];
        if let Some(x) = x {
            entries.push((0, x.buf));
        }
        let (gx, gy) = grid2(rows);
        Ok(self.dispatch(pipe, &entries, [gx, gy, 1]))
    }

    /// RoPE in place on [tokens, heads, head_dim] at `offset` of `v`; `freq` holds rot_dim / 2
    /// frequencies; positions start at the step's pos0. `second` (buffer, heads) is rotated in
    /// the same dispatch (k with q).
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &self,
        v: &wgpu::Buffer,
        offset: u32,
        freq: &wgpu::Buffer,
        step: &wgpu::Buffer,
        tokens: u32,
        heads: u32,
        head_dim: u32,
        rot_dim: u32,
        halves: bool,
        mscale: f32,
        second: Option<(&wgpu::Buffer, u32)>,
    ) -> GpuResult<Dispatch> {
        let d = if second.is_some() {
            defines(&[("TWO", String::new())])
        } else {
            Defines::new()
        };
        let pipe = self.pipeline("rope.wgsl", &d, "main")?;
        let heads2 = second.map(|s| s.1).unwrap_or(0);
        let params = RopeParams {
            tokens,
            heads,
            head_dim,
            rot_dim,
            halves: halves as u32,
            offset,
            mscale,
            heads2,
        };
        let ub = self.ctx.uniform("rope params", &params);
        let mut entries = vec![(0, v), (1, freq), (2, &ub), (3, step)];
        if let Some((b, _)) = second {
            entries.push((4, b));
        }
        Ok(self.dispatch(
            pipe,
            &entries,
            [(rot_dim / 2).div_ceil(64), heads + heads2, tokens],
        ))
    }

    /// An element-wise op over `rows` rows of `n` values (b unused by Add and Copy).
    pub fn eltwise(
        &self,
        op: Eltwise,
        a: Region,
        b: Option<Region>,
        y: Region,
        n: u32,
        rows: u32,
    ) -> GpuResult<Dispatch> {
        let (alpha, limit) = match op {
            Eltwise::GluOss { alpha, limit } => (alpha, limit),
            _ => (0.0, 0.0),
        };
        let one_input = matches!(op, Eltwise::Add | Eltwise::Copy);
        let pipe = self.pipeline("elementwise.wgsl", &Self::eltwise_defines(op), "main")?;
        let bb = b.unwrap_or(a);
        let params = EltParams {
            n,
            rows,
            a_offset: a.offset,
            a_stride: a.stride,
            b_offset: bb.offset,
            b_stride: bb.stride,
            y_offset: y.offset,
            y_stride: y.stride,
            alpha,
            limit,
            _pad: [0; 2],
        };
        let ub = self.ctx.uniform("eltwise params", &params);
        let mut entries = vec![(0, a.buf), (2, y.buf), (3, &ub)];
        if !one_input {
            entries.push((1, bb.buf));
        }
        let (gx, gy) = grid2((n * rows).div_ceil(256));
        Ok(self.dispatch(pipe, &entries, [gx, gy, 1]))
    }

    /// Stores the step's keys (src at k_offset) and values (src at v_offset), [tokens, kv_heads,
    /// head_dim], into the cache.
    pub fn write_kv(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        k: Region,
        v: Region,
        step: &wgpu::Buffer,
        tokens: u32,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline(
            "attention.wgsl",
            &self.attn_defines(cache, false),
            "write_kv",
        )?;
        let offsets = AttnOffsets {
            k: k.offset,
            v: v.offset,
            ..AttnOffsets::default()
        };
        let ub = self
            .ctx
            .uniform("kv params", &self.attn_params(shape, tokens, offsets, None));
        let per_token = shape.kv_heads * shape.head_dim / 2;
        Ok(self.dispatch(
            pipe,
            &[
                (0, &ub),
                (1, step),
                (2, &cache.k),
                (3, &cache.v),
                (4, k.buf),
                (8, v.buf),
            ],
            [per_token.div_ceil(64), tokens, 1],
        ))
    }

    /// RoPE of q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim] in place (each
    /// from offset 0 of its buffer), then k with v into the cache as `write_kv` does: one
    /// dispatch for what precedes attention in a layer.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_write(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        q: &wgpu::Buffer,
        k: &wgpu::Buffer,
        v: &wgpu::Buffer,
        rotary: &Rotary,
        step: &wgpu::Buffer,
        tokens: u32,
    ) -> GpuResult<Dispatch> {
        if shape.head_dim > 512
            || rotary.rot_dim > shape.head_dim
            || !rotary.rot_dim.is_multiple_of(2)
        {
            return Err(GpuError::Validation(format!(
                "rope_write: {} rotated dims of heads of {} (at most 512)",
                rotary.rot_dim, shape.head_dim
            )));
        }
        let pipe = self.pipeline(
            "attention.wgsl",
            &self.attn_defines(cache, false),
            "rope_write",
        )?;
        let ub = self.ctx.uniform(
            "rope+kv params",
            &self.attn_params(shape, tokens, AttnOffsets::default(), Some(rotary)),
        );
        Ok(self.dispatch(
            pipe,
            &[
                (0, &ub),
                (1, step),
                (2, &cache.k),
                (3, &cache.v),
                (8, v),
                (11, q),
                (12, k),
                (13, rotary.freq),
            ],
            [shape.heads + shape.kv_heads, tokens, 1],
        ))
    }

    /// Attention of `tokens` queries (q at q_offset of `q`, [tokens, heads, head_dim]) over the
    /// cache, into `out` at out_offset; `scratch` holds `shape.scratch_len(tokens)` values and
    /// `counters` one zero u32 per KV head (left zero). One dispatch where
    /// `shape.one_pass(tokens)` (decode) or `shape.tiled(tokens)` (attend_tiled), else two
    /// (attend, combine).
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        q: &wgpu::Buffer,
        q_offset: u32,
        out: &wgpu::Buffer,
        out_offset: u32,
        scratch: &wgpu::Buffer,
        counters: &wgpu::Buffer,
        sinks: Option<Region>,
        step: &wgpu::Buffer,
        tokens: u32,
    ) -> GpuResult<Vec<Dispatch>> {
        let offsets = AttnOffsets {
            q: q_offset,
            out: out_offset,
            sinks: sinks.map(|r| r.offset).unwrap_or(0),
            ..AttnOffsets::default()
        };
        let ub = self.ctx.uniform(
            "attention params",
            &self.attn_params(shape, tokens, offsets, None),
        );
        let with_sinks = self.attn_defines(cache, sinks.is_some());
        if shape.one_pass(tokens) {
            let decode = self.pipeline(
                "attention.wgsl",
                &self.decode_defines(shape, with_sinks),
                "decode",
            )?;
            let mut entries = vec![
                (0, &ub),
                (1, step),
                (14, &cache.k),
                (15, &cache.v),
                (4, q),
                (6, out),
                (9, scratch),
                (10, counters),
            ];
            if let Some(s) = sinks {
                entries.push((7, s.buf));
            }
            let groups = [shape.splits(tokens), shape.kv_heads, 1];
            return Ok(vec![self.dispatch(decode, &entries, groups)]);
        }
        if shape.tiled(tokens) {
            let tiled = self.pipeline("attention.wgsl", &with_sinks, "attend_tiled")?;
            let mut entries = vec![
                (0, &ub),
                (1, step),
                (2, &cache.k),
                (3, &cache.v),
                (4, q),
                (6, out),
            ];
            if let Some(s) = sinks {
                entries.push((7, s.buf));
            }
            let rows = tokens * (shape.heads / shape.kv_heads);
            let groups = [rows.div_ceil(TILE_ROWS), shape.kv_heads, 1];
            return Ok(vec![self.dispatch(tiled, &entries, groups)]);
        }
        // head_dim past TILE_DMAX: one workgroup per (split, head, query), then the merge.
        let attend = self.pipeline("attention.wgsl", &self.attn_defines(cache, false), "attend")?;
        let combine = self.pipeline("attention.wgsl", &with_sinks, "combine")?;
        let a = self.dispatch(
            attend,
            &[
                (0, &ub),
                (1, step),
                (2, &cache.k),
                (3, &cache.v),
                (4, q),
                (5, scratch),
            ],
            [shape.splits(tokens), shape.heads, tokens],
        );
        let mut entries = vec![(0, &ub), (1, step), (5, scratch), (6, out)];
        if let Some(s) = sinks {
            entries.push((7, s.buf));
        }
        let c = self.dispatch(combine, &entries, [shape.heads, tokens, 1]);
        Ok(vec![a, c])
    }

    /// Whether `decode_rope` takes one query of `shape` turned by `rot_dim` dims: the shapes
    /// `decode` takes, on adapters that let it bind all its buffers.
    pub fn folds_rope(&self, shape: &AttnShape, rot_dim: u32, tokens: u32) -> bool {
        shape.one_pass(tokens)
            && rot_dim <= shape.head_dim
            && rot_dim.is_multiple_of(2)
            && self.ctx.caps.max_storage_buffers >= DECODE_ROPE_BUFFERS
    }

    /// Decode attention of one query with `rope_write`'s work folded in (`folds_rope`): q
    /// [heads, head_dim] and k [kv_heads, head_dim] unturned from offset 0 of their buffers,
    /// and v; every split turns q as it loads it, the split holding the step's key turns k and
    /// stores it with v at the step's slot; q and k are left turned in place, as `rope_write`
    /// leaves them. `scratch` and `counters` as `attention`. With `records` (from
    /// `attention_records`, the output at offset 0) the output is also written as int8 records
    /// there, for the product reading it next.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_rope(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        qkv: [&wgpu::Buffer; 3],
        rotary: &Rotary,
        out: Region,
        scratch: &wgpu::Buffer,
        counters: &wgpu::Buffer,
        sinks: Option<Region>,
        step: &wgpu::Buffer,
        records: Option<&XRecords>,
    ) -> GpuResult<Dispatch> {
        if !self.folds_rope(shape, rotary.rot_dim, 1)
            || (records.is_some() && (!self.writes_records(shape) || out.offset != 0))
        {
            return Err(GpuError::Validation(format!(
                "decode_rope: {} rotated dims of {} heads of {} over {} KV heads{}",
                rotary.rot_dim,
                shape.heads,
                shape.head_dim,
                shape.kv_heads,
                if records.is_some() {
                    ", writing int8 records"
                } else {
                    ""
                }
            )));
        }
        let mut d = self.decode_defines(shape, self.attn_defines(cache, sinks.is_some()));
        d.insert("DEC_ROPE".into(), String::new());
        if records.is_some() {
            d.insert("DEC_XQ".into(), String::new());
            d.insert("XQ_OUT".into(), String::new());
        }
        let pipe = self.pipeline("attention.wgsl", &d, "decode")?;
        let offsets = AttnOffsets {
            out: out.offset,
            sinks: sinks.map(|r| r.offset).unwrap_or(0),
            ..AttnOffsets::default()
        };
        let params = AttnParams {
            xq_scales: records.map(|r| r.scales).unwrap_or(0),
            ..self.attn_params(shape, 1, offsets, Some(rotary))
        };
        let ub = self.ctx.uniform("decode+rope params", &params);
        let [q, k, v] = qkv;
        let mut entries = vec![
            (0, &ub),
            (1, step),
            (14, &cache.k),
            (15, &cache.v),
            (11, q),
            (12, k),
            (8, v),
            (13, rotary.freq),
            (6, out.buf),
            (9, scratch),
            (10, counters),
        ];
        if let Some(s) = sinks {
            entries.push((7, s.buf));
        }
        if let Some(r) = records {
            entries.push((16, &r.buf));
        }
        let groups = [shape.splits(1), shape.kv_heads, 1];
        Ok(self.dispatch(pipe, &entries, groups))
    }

    fn attn_defines(&self, cache: &KvCache, sinks: bool) -> Defines {
        let mut d = Defines::new();
        if !cache.f16 {
            d.insert("KV_F32".into(), String::new());
        }
        if sinks {
            d.insert("SINKS".into(), String::new());
        }
        d
    }

    /// The `decode` variant for `shape`: its group and head size, subgroup reductions where the
    /// adapter has subgroups (any size).
    fn decode_defines(&self, shape: &AttnShape, mut d: Defines) -> Defines {
        let group = shape.group();
        d.insert("DEC_GQ".into(), format!("{group}u"));
        d.insert("DEC_G2".into(), format!("{}u", group.next_power_of_two()));
        d.insert("DEC_D8".into(), format!("{}u", shape.head_dim / 8));
        if self.ctx.caps.subgroups {
            d.insert("SUBGROUPS".into(), String::new());
        }
        d
    }

    fn attn_params(
        &self,
        s: &AttnShape,
        tokens: u32,
        at: AttnOffsets,
        rotary: Option<&Rotary>,
    ) -> AttnParams {
        AttnParams {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            cache_len: s.cache_len,
            window: s.window,
            chunks: s.splits(tokens),
            q_offset: at.q,
            k_offset: at.k,
            v_offset: at.v,
            out_offset: at.out,
            scale: s.scale,
            sinks_offset: at.sinks,
            rot_dim: rotary.map(|r| r.rot_dim).unwrap_or(0),
            halves: rotary.is_some_and(|r| r.halves) as u32,
            mscale: rotary.map(|r| r.mscale).unwrap_or(1.0),
            xq_scales: 0,
        }
    }

    /// Router logits [tokens, experts] (at `offset` of `logits`) → ids and weights [tokens, k]:
    /// one workgroup per token, one thread per expert.
    #[allow(clippy::too_many_arguments)]
    pub fn moe_route(
        &self,
        logits: &wgpu::Buffer,
        offset: u32,
        experts: u32,
        k: u32,
        tokens: u32,
        renorm: bool,
        ids: &wgpu::Buffer,
        weights: &wgpu::Buffer,
    ) -> GpuResult<Dispatch> {
        Self::check_routing(experts, k)?;
        let pipe = self.pipeline("moe.wgsl", &Defines::new(), "route")?;
        let (gx, gy) = grid2(tokens);
        let params = MoeParams {
            experts,
            k,
            tokens,
            renorm: renorm as u32,
            logits_offset: offset,
            groups_x: gx,
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.uniform("route params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (1, logits), (2, ids), (3, weights)],
            [gx, gy, 1],
        ))
    }

    fn check_routing(experts: u32, k: u32) -> GpuResult<()> {
        if experts > MOE_MAX_EXPERTS || k > MOE_MAX_K || k > experts {
            return Err(GpuError::Unsupported {
                tensor: "moe router".into(),
                reason: format!(
                    "top-{k} of {experts} experts (the GPU routes at most top-{MOE_MAX_K} of \
                     {MOE_MAX_EXPERTS})"
                ),
            });
        }
        Ok(())
    }

    /// The tokens · k items of `ids` grouped by expert for `matmul_experts`: `order` gets the
    /// item indices expert by expert, `tiles` (`moe_max_tiles` entries of 4 u32) each tile's
    /// expert, first position in `order` and item count.
    pub fn moe_group(
        &self,
        ids: &wgpu::Buffer,
        experts: u32,
        k: u32,
        tokens: u32,
        order: &wgpu::Buffer,
        tiles: &wgpu::Buffer,
    ) -> GpuResult<Dispatch> {
        Self::check_routing(experts, k)?;
        let pipe = self.pipeline("moe.wgsl", &Defines::new(), "group")?;
        let params = MoeParams {
            experts,
            k,
            tokens,
            tile_tokens: MATMUL_TOKENS,
            max_tiles: moe_max_tiles(tokens * k, experts),
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.uniform("group params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (2, ids), (5, order), (6, tiles)],
            [1, 1, 1],
        ))
    }

    /// dense[t, e] = routing weight of expert e for token t (0 where not chosen).
    pub fn moe_scatter(
        &self,
        ids: &wgpu::Buffer,
        weights: &wgpu::Buffer,
        dense: &wgpu::Buffer,
        experts: u32,
        k: u32,
        tokens: u32,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("moe.wgsl", &Defines::new(), "scatter")?;
        let params = MoeParams {
            experts,
            k,
            tokens,
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.uniform("scatter params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (2, ids), (3, weights), (4, dense)],
            [experts.div_ceil(64), tokens, 1],
        ))
    }

    /// y[t] = Σ_s weights[t, s] · expert_out[t·k + s] over rows of n values, also added into
    /// `residual` when given. With `norm` (its records from `combine_records`) it also writes
    /// the new residual times the norm's weights as the int8 records that products folding
    /// that norm read (`NormFold::records`).
    #[allow(clippy::too_many_arguments)]
    pub fn moe_combine(
        &self,
        expert_out: &wgpu::Buffer,
        weights: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: u32,
        k: u32,
        tokens: u32,
        residual: Option<&wgpu::Buffer>,
        norm: Option<NormFold>,
    ) -> GpuResult<Dispatch> {
        let mut d = Defines::new();
        if residual.is_some() {
            d.insert("RESIDUAL".into(), String::new());
        }
        let records = norm.and_then(|f| f.records.map(|r| (f, r)));
        if norm.is_some() {
            if records.is_none() || residual.is_none() || !self.combine_writes_records(n, tokens) {
                return Err(GpuError::Validation(format!(
                    "moe combine of {tokens} tokens of {n} values writing int8 records"
                )));
            }
            d.insert("XQ_NORM_OUT".into(), String::new());
            d.insert("XQ_OUT".into(), String::new());
        }
        let pipe = self.pipeline("moe.wgsl", &d, "combine")?;
        let params = MoeParams {
            k,
            tokens,
            n,
            norm_offset: norm.map(|f| f.offset).unwrap_or(0),
            xq_scales: records.map(|(_, r)| r.scales).unwrap_or(0),
            xq_sq: records.map(|(_, r)| r.sq_at()).unwrap_or(0),
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.uniform("combine params", &params);
        let mut entries = vec![(0, &ub), (1, expert_out), (3, weights), (4, y)];
        if let Some(r) = residual {
            entries.push((7, r));
        }
        if let Some((f, r)) = records {
            entries.push((8, f.buf));
            entries.push((9, &r.buf));
        }
        Ok(self.dispatch(pipe, &entries, [n.div_ceil(64), tokens, 1]))
    }

    /// Where the MoE combine of `tokens` tokens of `n` values writes its int8 records, if it
    /// can (`combine_writes_records`).
    pub fn combine_records(&self, n: u32, tokens: u32) -> Option<XRecords> {
        self.combine_writes_records(n, tokens)
            .then(|| self.records_buffer(n / 8))
    }

    /// Whether the MoE combine can write its new residual as int8 records: int8 products on,
    /// one token, whole units of 32.
    fn combine_writes_records(&self, n: u32, tokens: u32) -> bool {
        self.int8_products && tokens == 1 && n.is_multiple_of(32)
    }

    /// The index of the largest value of each of `rows` rows of n values → ids[row] (ties:
    /// the lowest index). `scratch` holds `select_scratch_len(n, rows, 1)` words, `counters`
    /// one zero u32 per row (left zero).
    #[allow(clippy::too_many_arguments)]
    pub fn argmax(
        &self,
        logits: &wgpu::Buffer,
        offset: u32,
        n: u32,
        rows: u32,
        ids: &wgpu::Buffer,
        scratch: &wgpu::Buffer,
        counters: &wgpu::Buffer,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("select.wgsl", &Defines::new(), "main")?;
        let params = Self::select_params(n, rows, 1, offset);
        let ub = self.ctx.uniform("argmax params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (1, logits), (2, ids), (4, scratch), (5, counters)],
            [params.blocks, rows, 1],
        ))
    }

    /// The k largest values of each row with their indices, best first (ties: the lower index
    /// first) → ids/values [rows, k]. `scratch` holds `select_scratch_len(n, rows, k)` words,
    /// `counters` one zero u32 per row (left zero).
    #[allow(clippy::too_many_arguments)]
    pub fn top_k(
        &self,
        logits: &wgpu::Buffer,
        offset: u32,
        n: u32,
        rows: u32,
        k: u32,
        ids: &wgpu::Buffer,
        values: &wgpu::Buffer,
        scratch: &wgpu::Buffer,
        counters: &wgpu::Buffer,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("select.wgsl", &defines(&[("TOPK", String::new())]), "main")?;
        let params = Self::select_params(n, rows, k, offset);
        let ub = self.ctx.uniform("top-k params", &params);
        Ok(self.dispatch(
            pipe,
            &[
                (0, &ub),
                (1, logits),
                (2, ids),
                (3, values),
                (4, scratch),
                (5, counters),
            ],
            [params.blocks, rows, 1],
        ))
    }

    fn select_params(n: u32, rows: u32, k: u32, offset: u32) -> SelectParams {
        let (block, blocks) = select_blocks(n);
        SelectParams {
            n,
            rows,
            k,
            offset,
            block,
            blocks,
            kept: k.min(block),
            _pad: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MatmulTile;

    #[test]
    fn matmul_tiles_shrink_until_the_grid_fills_the_gpu() {
        // tinyllama at 512 tokens: q/o/down and gate/up wide, the 256-row k and v mid.
        assert_eq!(MatmulTile::pick(2048, 512), MatmulTile::Wide);
        assert_eq!(MatmulTile::pick(5632, 512), MatmulTile::Wide);
        assert_eq!(MatmulTile::pick(256, 512), MatmulTile::Mid);
        // Short prompts.
        assert_eq!(MatmulTile::pick(2048, 100), MatmulTile::Mid);
        assert_eq!(MatmulTile::pick(2048, 20), MatmulTile::Narrow);
        assert_eq!(MatmulTile::pick(16, 2), MatmulTile::Narrow);
    }
}
