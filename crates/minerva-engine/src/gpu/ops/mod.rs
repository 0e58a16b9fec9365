//! The GPU ops: each builds the `Dispatch`es of one operation over given buffers (pipelines from
//! the cache, a small uniform of static parameters, the bind group). Built once, recorded into
//! every step's compute pass; values that change per step (position, token count) come from the
//! shared `Step` uniform.
//!
//! This module holds the `Ops` settings and the types and helpers several kernel families share;
//! each family's ops are an `impl Ops` block in a submodule of their own.

use super::context::GpuContext;
use super::error::{GpuError, GpuResult};
use super::pipelines::{Dispatch, Pipelines};
use super::shader::Defines;
use super::weights::GpuWeight;
use bytemuck::{Pod, Zeroable};
use minerva_formats::DType;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

mod ahead;
mod attention;
mod attention_coop;
mod coop_split;
mod elementwise;
mod matmul;
mod moe;
mod moe_coop;
mod products;
mod select;

pub use attention::{AttnShape, KvCache, Rotary, ATTN_CHUNK};
pub use attention_coop::{CACHE_SLACK, SCORES_BYTES};
pub use elementwise::Eltwise;
pub use matmul::{
    coop_block_defines, coop_defines, coop_tokens, coop_weight_defines, MatmulTile, COOP_BLOCK,
    COOP_WEIGHT_BYTES, MATMUL_TOKENS,
};
pub use moe::{
    moe_grouped, moe_max_tiles, moe_tile_pairs, ExpertSel, ExpertTiles, RouteIn, MOE_GROUPED_ITEMS,
};
pub use moe_coop::{EXPERT_CHUNK_BYTES, MOE_COOP_TILES};
pub use products::Multi;
pub use select::{select_scratch_len, SampleParams};

/// Per-step values every kernel may read: the host writes them for a step that needs new
/// ones, and a kernel choosing a token on the device moves them on to the next token's
/// (`advanced`), so that a decode step queued behind it needs no write.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable, Default, PartialEq, Eq)]
pub struct Step {
    pub pos0: u32,
    pub tokens: u32,
    pub _pad: [u32; 2],
}

impl Step {
    pub fn new(pos0: usize, tokens: usize) -> Step {
        Step {
            pos0: pos0 as u32,
            tokens: tokens as u32,
            _pad: [0; 2],
        }
    }

    /// The step after a token chosen in this one: the one-token step at the position after
    /// this step's tokens (what select.wgsl's ADVANCE and sample.wgsl's `pick` write).
    pub fn advanced(self) -> Step {
        Step::new(self.pos0 as usize + self.tokens as usize, 1)
    }
}

/// Splits `n` workgroups over x and y (each ≤ 65535).
fn grid2(n: u32) -> (u32, u32) {
    if n <= 65535 {
        (n, 1)
    } else {
        (65535, n.div_ceil(65535))
    }
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
        MatSel::plain(w.rows, w.cols)
    }

    /// Every output of one [out_dim, in_dim] matrix (experts: of the matrix the ids pick).
    pub fn plain(out_dim: usize, in_dim: usize) -> MatSel {
        MatSel {
            matrix: 0,
            offset: 0,
            stride: 1,
            out_dim,
            in_dim,
            input_major: false,
        }
    }
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
    /// ROUTE: the router's logits (how many, where they start), top-k, whether the softmax is
    /// over the k, and whether this dispatch writes the ids and weights.
    route_experts: u32,
    route_k: u32,
    route_renorm: u32,
    route_writes: u32,
    logits_offset: u32,
    /// XQ_OUT: where the records written start their scales.
    xq_out_scales: u32,
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
            route_experts: 0,
            route_k: 0,
            route_renorm: 0,
            route_writes: 0,
            logits_offset: 0,
            xq_out_scales: 0,
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
    /// The product quantizes x itself (`Ops::glu_quantizes_locally`).
    local: bool,
    /// The expert product routes its one token itself (`RouteIn`).
    route: bool,
    /// The gate/up product writes its results as int8 records (XQ_OUT).
    records_out: bool,
    /// Values per input vector (sizes X_HALVES's staging).
    cols: u32,
    /// Results per input vector (`Ops::shape`).
    rows: u32,
}

pub struct Ops {
    pub ctx: Arc<GpuContext>,
    pipelines: Arc<Pipelines>,
    /// Decode products' workgroup size and rows per workgroup.
    product_shape: (u32, u32),
    /// ... of the gate/up products that quantize x in their own workgroups (XQ_LOCAL).
    local_xq_shape: (u32, u32),
    /// ... of those that stage x in f16 pairs (X_HALVES).
    halves_shape: (u32, u32),
    /// Products of fewer outputs take one row per workgroup (`SMALL_PRODUCT`).
    small_product: u32,
    /// Parts in flight per lane: plain products, products reading two weights per part (GLU),
    /// then both for E2M1 weights, for products staging x (X_HALVES), for int8 x (DOT_I8).
    in_flight: [u32; 8],
    /// Rows each lane of a plain product (matvec.wgsl) takes, sharing its x reads; None:
    /// `rows_per_lane` chooses.
    rows_per_lane: Option<u32>,
    /// Int8 decode products on for the weights that take them (`int8_weights`;
    /// `GpuContext::int8_products`).
    int8_products: bool,
    /// ... those of at least this many outputs (INT8_MIN_OUTPUTS).
    int8_min_outputs: u32,
    /// Most bytes of experts' f16 matrices one matrix-core expert step decodes (`moe_coop.rs`;
    /// `EXPERT_CHUNK_BYTES`).
    expert_chunk_bytes: u64,
    /// Most bytes of a weight's f16 copy one matrix-core product decodes at once (`matmul.rs`;
    /// `COOP_WEIGHT_BYTES`).
    coop_weight_bytes: u64,
    /// Most bytes of scores and weights one group of heads of the matrix-core prefill
    /// attention holds (`attention_coop.rs`; `SCORES_BYTES`).
    scores_bytes: u64,
    /// The products' scratch buffers by name (the matrix-core product's f16 weights, f16
    /// inputs and bias block; the int8 products' quantized x), shared by every product and
    /// replaced by larger ones as needed: each product's dispatches keep the buffers they were
    /// built with.
    scratch: Mutex<HashMap<&'static str, wgpu::Buffer>>,
    /// Decode products of E2M1 weights in packed f16 (`Capabilities::packed_f16`).
    packed_f16: bool,
    /// ... with x converted to f16 once per workgroup (X_HALVES), unless
    /// `MINERVA_GPU_X_HALVES=0`.
    x_halves: bool,
    /// Gate/up products too small for a quantizing dispatch of their own quantize x in each
    /// workgroup (XQ_LOCAL), unless `MINERVA_GPU_LOCAL_XQ=0`.
    local_xq: bool,
    /// One token's expert gate/up product routes it itself (`RouteIn`), unless
    /// `MINERVA_GPU_ROUTE_IN=0`.
    route_in: bool,
    /// The threads building pipelines ahead of use (`warm_up`), and the flag that stops them
    /// at their next pipeline: dropping the ops waits for them (at most `WARMING_WAIT`), so
    /// that no pipeline is being compiled by the driver while the process exits.
    warming: Mutex<Vec<std::thread::JoinHandle<()>>>,
    stop_warming: Arc<std::sync::atomic::AtomicBool>,
}

/// The longest dropping the ops waits for its kernel-building threads: a pipeline takes
/// milliseconds with the driver's cache warm and up to a few seconds without it; a driver call
/// that never returns must not hang the program that unloads a model.
const WARMING_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Drop for Ops {
    fn drop(&mut self) {
        self.stop_warming
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let threads = std::mem::take(self.warming.get_mut().unwrap_or_else(|p| p.into_inner()));
        let deadline = std::time::Instant::now() + WARMING_WAIT;
        for t in threads {
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if t.is_finished() {
                // A thread that panicked has nothing left to wait for.
                let _ = t.join();
            }
        }
    }
}

/// Decode products' workgroup: 256 threads over 4 rows (64 lanes per row). Measured against
/// 128×2, 64×2, 256×2 and lanes per row chosen by row length (benches/GPU.md, entries 25 and
/// 29): never slower by more than noise, up to 8 % faster.
pub const PRODUCT_SHAPE: (u32, u32) = (256, 4);

/// ... for the gate/up products that quantize x in their own workgroups (XQ_LOCAL): 512
/// threads over 16 rows (32 lanes per row), so that a quarter as many workgroups each quantize
/// the whole of x before their rows start. On the H200 tinyllama decoded 5.6 % faster with
/// Q4_0, 3.9 % with Q8_0 and 2.2 % with Q4_K_M than with `PRODUCT_SHAPE`; 256 × 8 gained 3 %,
/// 1,024 × 16 and 1,024 × 32 less (benches/GPU.md, entry 117). Where subgroups are wider than
/// 32 lanes a row takes one, and adapters that allow fewer threads per workgroup keep
/// `PRODUCT_SHAPE`.
pub const LOCAL_XQ_SHAPE: (u32, u32) = (512, 16);

/// ... for the gate/up products that write their results as int8 records (XQ_OUT): 256
/// threads over 16 rows (16 lanes a row), two whole parts of 8 values a workgroup. On the
/// H200 tinyllama Q4_0 decoded 2.2 % faster so than with `LOCAL_XQ_SHAPE`, whose 512-thread
/// workgroups paid ≈ 2 µs a launch for the barrier and quantization before the records;
/// 256 × 8 and 512 × 32 were 2–3 % slower than 256 × 16, 256 × 32, 128 × 16, 512 × 8 and
/// 1,024 × 32 5–7 %, 1,024 × 16 and 128 × 8 8–9 %. The products that write f32 keep
/// `LOCAL_XQ_SHAPE`: 256 × 16 was 1 % slower there with Q4_0 (benches/GPU.md, entry 120).
pub const GLU_RECORDS_SHAPE: (u32, u32) = (256, 16);

/// Inputs past which a product other than gate/up ones, reading x in f32 or int8 against
/// weights other than E2M1, gives each row twice the lanes (`Ops::product_shape_of`): a lane
/// of tinyllama's 5,632-input down product then takes its parts in two rounds of loads
/// instead of three, 2 % faster on Q4_0 and Q8_0 in f32 (MLX 4-bit unchanged), and on int8
/// records from the gate/up product 12.9 → 12.4 µs a launch; rows of 2,048 inputs were slower
/// so (benches/GPU.md, entries 117 and 120).
pub const LONG_ROW: u32 = 4096;

/// ... for the products that stage x in f16 pairs (X_HALVES): 256 threads over 8 rows (32
/// lanes per row), 5 % faster on gpt-oss's expert products than 4 rows (benches/GPU.md, entry
/// 80).
pub const HALVES_SHAPE: (u32, u32) = (256, 8);

/// Decode products of fewer outputs than this (gpt-oss's router: 32 rows) give each row a
/// workgroup of its own: at 4 rows per workgroup its 8 workgroups left most of the GPU idle
/// while each lane took its share of a 2,880-value row in turn (benches/GPU.md, entry 80).
pub const SMALL_PRODUCT: u32 = 256;

/// The fewest outputs of a decode product that takes int8 x from a quantizing dispatch of its
/// own. That dispatch cost the H200 about what the int8 product saved on products of
/// 2,048–5,632 rows (tinyllama decode 644 tok/s with and without; benches/GPU.md, entry 48),
/// while the 201,088-row vocabulary product of gpt-oss ran 1.6× faster: so only
/// vocabulary-sized products take it; smaller gate/up products that fold a norm quantize x in
/// their own workgroups (XQ_LOCAL).
pub const INT8_MIN_OUTPUTS: u32 = 16384;

/// The most workgroup memory a packed f16 decode product stages its x in (X_HALVES): inputs
/// of up to 8,192 values. More would cut the workgroups an SM holds at once.
pub const X_HALVES_BYTES: u32 = 16 * 1024;

/// Parts whose loads a lane of a decode product issues together: plain products, and products
/// reading two weights per part (GLU; entry 34).
pub const IN_FLIGHT: (u32, u32) = (4, 2);

/// ... for products of E2M1 weights (plain, GLU), whose parts take more registers to decode:
/// one at a time ran gpt-oss's expert products fastest (benches/GPU.md, entry 57).
pub const IN_FLIGHT_E2M1: (u32, u32) = (1, 1);

/// ... for those that take x as int8 records (DOT_I8), whose lanes hold a part's x in one vec4:
/// a gate/up lane's four parts of a 2,048-value row in one round made tinyllama's Q4_0 and
/// Q8_0 decode ≈ 1 % faster than two rounds of two (benches/GPU.md, entry 116). With
/// `LOCAL_XQ_SHAPE`'s 32 lanes a row, such a lane takes its eight parts in two rounds of four:
/// eight at once was no faster (entry 117).
pub const IN_FLIGHT_INT8: (u32, u32) = (4, 4);

/// ... for those that stage x in f16 pairs (X_HALVES), whose lanes hold no x in registers: two
/// parts at once made gpt-oss's expert gate/up product 7 % faster, its down product 3 % slower
/// (benches/GPU.md, entry 80).
pub const IN_FLIGHT_HALVES: (u32, u32) = (1, 2);

/// `LOCAL_XQ_SHAPE` with a row's lanes at least a subgroup, where the adapter allows its
/// threads; else `PRODUCT_SHAPE`.
fn local_xq_shape(ctx: &GpuContext) -> (u32, u32) {
    let (wg, rows) = LOCAL_XQ_SHAPE;
    let lanes = (wg / rows).max(ctx.caps.subgroup_max);
    let limits = ctx.device.limits();
    if limits.max_compute_invocations_per_workgroup < wg
        || limits.max_compute_workgroup_size_x < wg
        || lanes > wg
    {
        return PRODUCT_SHAPE;
    }
    (wg, wg / lanes)
}

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
            x_halves: std::env::var("MINERVA_GPU_X_HALVES").map_or(true, |v| v != "0"),
            local_xq: std::env::var("MINERVA_GPU_LOCAL_XQ").map_or(true, |v| v != "0"),
            route_in: std::env::var("MINERVA_GPU_ROUTE_IN").map_or(true, |v| v != "0"),
            pipelines: ctx.pipelines(),
            product_shape: PRODUCT_SHAPE,
            local_xq_shape: local_xq_shape(&ctx),
            halves_shape: HALVES_SHAPE,
            small_product: SMALL_PRODUCT,
            in_flight: [
                IN_FLIGHT.0,
                IN_FLIGHT.1,
                IN_FLIGHT_E2M1.0,
                IN_FLIGHT_E2M1.1,
                IN_FLIGHT_HALVES.0,
                IN_FLIGHT_HALVES.1,
                IN_FLIGHT_INT8.0,
                IN_FLIGHT_INT8.1,
            ],
            rows_per_lane: None,
            int8_products: ctx.int8_products,
            int8_min_outputs: INT8_MIN_OUTPUTS,
            expert_chunk_bytes: EXPERT_CHUNK_BYTES,
            scores_bytes: SCORES_BYTES,
            coop_weight_bytes: COOP_WEIGHT_BYTES,
            scratch: Mutex::new(HashMap::new()),
            warming: Mutex::new(Vec::new()),
            stop_warming: Arc::default(),
            ctx,
        }
    }

    /// Sets the decode products' workgroup size and rows per workgroup (both powers of two,
    /// rows ≤ size / 4), for measuring shapes against each other.
    pub fn set_product_shape(&mut self, wg: u32, rows: u32) {
        self.product_shape = (wg, rows);
    }

    /// ... of the products that stage x in f16 pairs (X_HALVES).
    pub fn set_halves_shape(&mut self, wg: u32, rows: u32) {
        self.halves_shape = (wg, rows);
    }

    /// Sets the fewest outputs of a decode product that shares its workgroups among several
    /// rows (0: every product does), for checking both shapes.
    pub fn set_small_product(&mut self, outputs: u32) {
        self.small_product = outputs;
    }

    /// The workgroup size and rows per workgroup of a decode product of `outputs` results
    /// (rows × batch), by whether it stages x: products of fewer than `SMALL_PRODUCT` outputs
    /// give each row a workgroup of its own.
    fn shape(&self, halves: bool, outputs: u32) -> (u32, u32) {
        let (wg, rows) = if halves {
            self.halves_shape
        } else {
            self.product_shape
        };
        let rows = if outputs < self.small_product {
            1
        } else {
            rows
        };
        (wg, rows)
    }

    /// Sets how many parts a lane of a decode product loads at once (plain, GLU; for every
    /// dtype), for measuring them against each other.
    pub fn set_in_flight(&mut self, plain: u32, glu: u32) {
        let (p, g) = (plain.max(1), glu.max(1));
        self.in_flight = [p, g, p, g, p, g, p, g];
    }

    /// Sets how many rows each lane of a plain decode product takes (1 to 3), for measuring
    /// them against each other.
    pub fn set_rows_per_lane(&mut self, rows: u32) {
        self.rows_per_lane = Some(rows.clamp(1, 3));
    }

    /// Turns the int8 decode products (`int8_weights`) on or off (f32 products, as exact as the
    /// other dtypes').
    pub fn set_int8_products(&mut self, on: bool) {
        self.int8_products = on;
    }

    /// Sets the fewest outputs for which a decode product takes int8 x (tests and benches
    /// check the int8 products at any size with 0).
    pub fn set_int8_min_outputs(&mut self, outputs: u32) {
        self.int8_min_outputs = outputs;
    }

    /// Sets the most bytes of experts' f16 matrices one matrix-core expert step decodes (tests
    /// make it a few experts').
    pub fn set_expert_chunk_bytes(&mut self, bytes: u64) {
        self.expert_chunk_bytes = bytes;
    }

    /// Sets the most bytes of a weight's f16 copy one matrix-core product decodes at once (tests
    /// make it a few rows').
    pub fn set_coop_weight_bytes(&mut self, bytes: u64) {
        self.coop_weight_bytes = bytes;
    }

    /// Sets the most bytes of scores and weights one group of heads of the matrix-core prefill
    /// attention holds (tests make it a few heads').
    pub fn set_scores_bytes(&mut self, bytes: u64) {
        self.scores_bytes = bytes;
    }

    /// Whether a decode product of `outputs` results over `weights` takes int8 x (DOT_I8, x
    /// quantized by a dispatch of its own before it): every weight Q4_0 or Q8_0, with `one_x`
    /// (GLU) of one dtype, and enough outputs that the faster product pays for the quantizing
    /// dispatch (INT8_MIN_OUTPUTS).
    pub fn dot_i8(&self, weights: &[&GpuWeight], one_x: bool, outputs: u32) -> bool {
        self.int8_weights(weights, one_x) && outputs >= self.int8_min_outputs
    }

    /// Whether int8 products are on and `weights` can take int8 x at all: every weight Q4_0,
    /// Q4_1, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K or MLX's 4- or 8-bit affine, and with `one_x` (GLU)
    /// of one dtype.
    fn int8_weights(&self, weights: &[&GpuWeight], one_x: bool) -> bool {
        self.int8_products
            && weights.iter().all(|w| {
                matches!(
                    w.dtype,
                    DType::Q4_0
                        | DType::Q4_1
                        | DType::Q5_1
                        | DType::Q8_0
                        | DType::Q4_K
                        | DType::Q5_K
                        | DType::Q6_K
                        | DType::MlxAffine { bits: 4 | 8, .. }
                )
            })
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

    /// Sets whether packed f16 products convert x once per workgroup into workgroup memory
    /// (X_HALVES) rather than per row, for measuring or checking both.
    pub fn set_x_halves(&mut self, on: bool) {
        self.x_halves = on;
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

    /// The cache of kernels built on this device.
    pub fn pipelines(&self) -> &Pipelines {
        &self.pipelines
    }

    fn weight_defines(&self, w: &GpuWeight, sel: &MatSel) -> Defines {
        let mut d = w.decoder();
        if sel.input_major {
            d.insert("INPUT_MAJOR".into(), String::new());
            d.insert("IN_STRIDE".into(), format!("{}u", w.cols));
        }
        d
    }

    /// A products' scratch buffer of at least `bytes` (see `Ops::scratch`).
    fn scratch_buffer(&self, name: &'static str, bytes: u64) -> wgpu::Buffer {
        let mut bufs = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        match bufs.get(name) {
            Some(b) if b.size() >= bytes => b.clone(),
            _ => {
                let b = self
                    .ctx
                    .storage(name, crate::gpu::context::scratch_size(bytes));
                bufs.insert(name, b.clone());
                b
            }
        }
    }

    /// Room for `parts` int8 records (16 bytes each, then two parts' scales per 16 bytes, then
    /// for XQ_NORM records of one vector four parts' Σx² per 16 bytes) in
    /// the scratch buffer every int8 product shares: a product's quantization (or the kernel
    /// writing its records) and its own dispatch follow each other, and wgpu orders
    /// dispatches that write and read one buffer.
    fn records_buffer(&self, parts: u32) -> XRecords {
        self.records_in("int8 x", parts)
    }

    /// Room for `parts` int8 records in the scratch buffer `name` (see `records_buffer`).
    fn records_in(&self, name: &'static str, parts: u32) -> XRecords {
        let vec4s = parts + parts / 2 + parts.div_ceil(4);
        XRecords {
            buf: self.scratch_buffer(name, vec4s as u64 * 16),
            scales: parts,
        }
    }
}
