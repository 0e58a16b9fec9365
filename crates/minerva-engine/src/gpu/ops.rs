//! The GPU ops: each builds the `Dispatch`es of one operation over given buffers (pipelines from
//! the cache, a small uniform of static parameters, the bind group). Built once, recorded into
//! every step's compute pass; values that change per step (position, token count) come from the
//! shared `Step` uniform.

use super::context::GpuContext;
use super::error::{GpuError, GpuResult};
use super::pipelines::{Dispatch, Pipelines};
use super::shader::{defines, Defines};
use super::weights::GpuWeight;
use bytemuck::{Pod, Zeroable};
use std::sync::Arc;

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
    fn shape(self) -> (u32, u32, u32, u32) {
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

/// An f32 bias: the buffer, the element offset of output 0, and (experts) values per expert.
#[derive(Clone, Copy)]
pub struct Bias<'a> {
    pub buf: &'a wgpu::Buffer,
    pub offset: u32,
    pub expert_stride: u32,
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
    _pad: [u32; 2],
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
    _pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SelectParams {
    n: u32,
    rows: u32,
    k: u32,
    offset: u32,
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
}

/// How a decode product over several weights (`Ops::matvec_multi`) uses them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Multi {
    /// Each weight's outputs into its own buffer (q, k, v).
    Split,
    /// act(W0·x, W1·x) into one buffer (gate, up): `Eltwise::SwiGlu` or `Eltwise::GluOss`.
    Glu(Eltwise),
}

/// Keys per chunk of the split-K attention kernel (CHUNK in attention.wgsl).
pub const ATTN_CHUNK: u32 = 256;

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
    /// Key chunks a query may span.
    pub fn chunks(&self) -> u32 {
        let keys = if self.window == 0 {
            self.cache_len
        } else {
            self.window.min(self.cache_len)
        };
        keys.div_ceil(ATTN_CHUNK).max(1)
    }

    /// Workgroups per (head, query), each taking every `splits`-th chunk: many for one query
    /// (decode: parallelism comes from the keys), one for long prompts (it comes from the
    /// queries, and scratch stays small).
    pub fn splits(&self, tokens: u32) -> u32 {
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

pub struct Ops {
    pub ctx: Arc<GpuContext>,
    pipelines: Arc<Pipelines>,
}

const MATVEC_WG: u32 = 128;
const MATVEC_RPW: u32 = 2;

impl Ops {
    pub fn new(ctx: Arc<GpuContext>) -> Ops {
        Ops {
            ctx,
            pipelines: Arc::new(Pipelines::default()),
        }
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

    fn matvec_defines(&self, decoder: Defines, experts: bool, bias: bool) -> Defines {
        let tpr = MATVEC_WG / MATVEC_RPW;
        let caps = self.ctx.caps;
        let mut d = with(
            decoder,
            &[
                ("WG", format!("{MATVEC_WG}u")),
                ("RPW", format!("{MATVEC_RPW}u")),
            ],
        );
        if caps.subgroups && caps.subgroup_max <= tpr && tpr.is_multiple_of(caps.subgroup_max) {
            d.insert("SUBGROUPS".into(), String::new());
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

    /// Builds, on a background thread, the pipelines a model's steps will use: those of the
    /// weight dtypes in `decoders` (plain and fused products) and, with no decoders, the fixed
    /// kernels, so that compiling overlaps the weight upload instead of delaying the first
    /// tokens.
    pub fn warm_up(&self, decoders: &[Defines], kv_f16: bool) {
        type Job = (&'static str, Defines, Vec<Defines>, &'static str);
        let mut jobs: Vec<Job> = Vec::new();
        let single = |file, d| (file, d, Vec::new(), "main");
        for dec in decoders {
            jobs.push(single(
                "matvec.wgsl",
                self.matvec_defines(dec.clone(), false, false),
            ));
            for tile in MatmulTile::ALL {
                jobs.push(single("matmul.wgsl", tile.defines(dec.clone())));
            }
            jobs.push(single("embed.wgsl", dec.clone()));
            // Fused decode products over weights of this dtype (q/k/v, gate/up/act).
            let mv = defines(&[
                ("WG", format!("{MATVEC_WG}u")),
                ("RPW", format!("{MATVEC_RPW}u")),
            ]);
            let split2 = with(mv.clone(), &[("SPLIT", String::new())]);
            let split3 = with(split2.clone(), &[("THREE", String::new())]);
            let glu = with(mv, &[("GLU", String::new())]);
            jobs.push(("matvec_multi.wgsl", split2, vec![dec.clone(); 2], "main"));
            jobs.push(("matvec_multi.wgsl", split3, vec![dec.clone(); 3], "main"));
            jobs.push(("matvec_multi.wgsl", glu, vec![dec.clone(); 2], "main"));
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
            for entry in ["write_kv", "attend", "combine"] {
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
    ) -> GpuResult<Vec<Dispatch>> {
        w.check_sel(sel)?;
        let d = self.matvec_defines(
            self.weight_defines(w, sel),
            experts.is_some(),
            bias.is_some(),
        );
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
            let (gx, gy) = grid2(rows.div_ceil(MATVEC_RPW));
            let params = MatvecParams {
                rows,
                cols: sel.in_dim as u32,
                row_base: r.row_base as u32,
                row_stride: sel.stride as u32,
                matrix_rows: mrows as u32,
                bias_stride: bias.map(|b| b.expert_stride).unwrap_or(0),
                x_offset: x.offset,
                x_stride: x.stride,
                x_div: experts.map(|e| e.x_div.max(1)).unwrap_or(1),
                y_offset: y.offset + r.j_lo as u32,
                y_stride: y.stride,
                expert_first: (part.first_row / stored) as u32,
                expert_count: (part.rows / stored) as u32,
                groups_x: gx,
                bias_offset: bias.map(|b| b.offset).unwrap_or(0) + r.j_lo as u32,
                _pad: 0,
            };
            let ub = self.ctx.uniform("matvec params", &params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = part
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| (i as u32, b))
                .collect();
            entries.extend([(3, x.buf), (4, y.buf), (5, &ub)]);
            if let Some(e) = &experts {
                entries.push((6, e.ids));
            }
            if let Some(b) = &bias {
                entries.push((7, b.buf));
            }
            out.push(self.dispatch(pipe.clone(), &entries, [gx, gy, batch]));
        }
        Ok(out)
    }

    /// One vector through two or three whole, unsplit weights with the same input width in one
    /// dispatch (see `Multi`); outputs start at offset 0 of their buffers.
    pub fn matvec_multi(
        &self,
        weights: &[&GpuWeight],
        x: Region,
        outs: &[&wgpu::Buffer],
        mode: Multi,
    ) -> GpuResult<Dispatch> {
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
        if !shape_ok
            || weights
                .iter()
                .any(|w| w.parts.len() != 1 || w.cols != weights[0].cols)
        {
            return Err(bad(format!("{} weights fused as {mode:?}", weights.len())));
        }
        let mut d = defines(&[
            ("WG", format!("{MATVEC_WG}u")),
            ("RPW", format!("{MATVEC_RPW}u")),
        ]);
        match mode {
            Multi::Split => {
                d.insert("SPLIT".into(), String::new());
                if weights.len() == 3 {
                    d.insert("THREE".into(), String::new());
                }
            }
            Multi::Glu(Eltwise::GluOss { .. }) => {
                d.insert("GLU".into(), String::new());
                d.insert("OSS".into(), String::new());
            }
            Multi::Glu(_) => {
                d.insert("GLU".into(), String::new());
            }
        }
        let decoders: Vec<Defines> = weights.iter().map(|w| w.decoder()).collect();
        let pipe =
            self.pipelines
                .get_multi(&self.ctx, "matvec_multi.wgsl", &d, &decoders, "main")?;
        let rows: Vec<u32> = weights.iter().map(|w| w.rows as u32).collect();
        let total = if glu { rows[0] } else { rows.iter().sum() };
        let (gx, gy) = grid2(total.div_ceil(MATVEC_RPW));
        let (alpha, limit) = match mode {
            Multi::Glu(Eltwise::GluOss { alpha, limit }) => (alpha, limit),
            _ => (0.0, 0.0),
        };
        let params = MultiParams {
            rows0: rows[0],
            rows1: if glu { 0 } else { rows[1] },
            rows2: rows.get(2).copied().unwrap_or(0),
            cols: weights[0].cols as u32,
            x_offset: x.offset,
            groups_x: gx,
            alpha,
            limit,
        };
        let ub = self.ctx.uniform("multi params", &params);
        let mut entries: Vec<(u32, &wgpu::Buffer)> = Vec::new();
        for (i, w) in weights.iter().enumerate() {
            entries.extend(
                w.parts[0]
                    .buffers
                    .iter()
                    .enumerate()
                    .map(|(j, b)| (10 * i as u32 + j as u32, b)),
            );
        }
        entries.push((30, x.buf));
        for (i, o) in outs.iter().enumerate() {
            entries.push((31 + i as u32, o));
        }
        entries.push((34, &ub));
        Ok(self.dispatch(pipe, &entries, [gx, gy, 1]))
    }

    /// y[t] = W · x[t] (+ bias) for `tokens` rows of x over the outputs `sel` picks: the tiled
    /// prefill kernel, with the tile `MatmulTile::pick` chooses for the shape.
    pub fn matmul(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<Bias>,
    ) -> GpuResult<Vec<Dispatch>> {
        let tile = MatmulTile::pick(sel.out_dim as u32, tokens);
        self.matmul_tiled(w, sel, x, y, tokens, bias, tile)
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
        let pipe = self.pipeline("matmul.wgsl", &d, "main")?;
        let mut out = Vec::new();
        for r in w.ranges(sel) {
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
                _pad: [0; 2],
            };
            let ub = self.ctx.uniform("matmul params", &params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = part
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| (i as u32, b))
                .collect();
            entries.extend([(3, x.buf), (4, y.buf), (5, &ub)]);
            if let Some(b) = &bias {
                entries.push((7, b.buf));
            }
            out.push(self.dispatch(pipe.clone(), &entries, tile.grid(rows, tokens)));
        }
        Ok(out)
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
            out.push(self.dispatch(pipe.clone(), &entries, [units.div_ceil(64), tokens, 1]));
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
        let d = defines(&[(mode, String::new())]);
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
        let ub = self.ctx.uniform(
            "kv params",
            &self.attn_params(shape, tokens, 0, k.offset, v.offset, 0, 0),
        );
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

    /// Attention of `tokens` queries (q at q_offset of `q`, [tokens, heads, head_dim]) over the
    /// cache, into `out` at out_offset; `scratch` holds `shape.scratch_len(tokens)` values.
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
        sinks: Option<Region>,
        step: &wgpu::Buffer,
        tokens: u32,
    ) -> GpuResult<[Dispatch; 2]> {
        let attend = self.pipeline("attention.wgsl", &self.attn_defines(cache, false), "attend")?;
        let combine = self.pipeline(
            "attention.wgsl",
            &self.attn_defines(cache, sinks.is_some()),
            "combine",
        )?;
        let ub = self.ctx.uniform(
            "attention params",
            &self.attn_params(
                shape,
                tokens,
                q_offset,
                0,
                0,
                out_offset,
                sinks.map(|r| r.offset).unwrap_or(0),
            ),
        );
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
        Ok([a, c])
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

    #[allow(clippy::too_many_arguments)]
    fn attn_params(
        &self,
        s: &AttnShape,
        tokens: u32,
        q_offset: u32,
        k_offset: u32,
        v_offset: u32,
        out_offset: u32,
        sinks_offset: u32,
    ) -> AttnParams {
        AttnParams {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            cache_len: s.cache_len,
            window: s.window,
            chunks: s.splits(tokens),
            q_offset,
            k_offset,
            v_offset,
            out_offset,
            scale: s.scale,
            sinks_offset,
        }
    }

    /// Router logits [tokens, experts] (at `offset` of `logits`) → ids and weights [tokens, k].
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
        let pipe = self.pipeline("moe.wgsl", &Defines::new(), "route")?;
        let params = MoeParams {
            experts,
            k,
            tokens,
            renorm: renorm as u32,
            logits_offset: offset,
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.uniform("route params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (1, logits), (2, ids), (3, weights)],
            [tokens.div_ceil(64), 1, 1],
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

    /// y[t] = Σ_s weights[t, s] · expert_out[t·k + s] over rows of n values.
    pub fn moe_combine(
        &self,
        expert_out: &wgpu::Buffer,
        weights: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: u32,
        k: u32,
        tokens: u32,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("moe.wgsl", &Defines::new(), "combine")?;
        let params = MoeParams {
            k,
            tokens,
            n,
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.uniform("combine params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (1, expert_out), (3, weights), (4, y)],
            [n.div_ceil(64), tokens, 1],
        ))
    }

    /// The index of the largest value of each of `rows` rows of n values → ids[row].
    pub fn argmax(
        &self,
        logits: &wgpu::Buffer,
        offset: u32,
        n: u32,
        rows: u32,
        ids: &wgpu::Buffer,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("select.wgsl", &Defines::new(), "main")?;
        let ub = self.ctx.uniform(
            "argmax params",
            &SelectParams {
                n,
                rows,
                k: 1,
                offset,
            },
        );
        Ok(self.dispatch(pipe, &[(0, &ub), (1, logits), (2, ids)], [rows, 1, 1]))
    }

    /// The k largest values of each row with their indices, best first → ids/values [rows, k].
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
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("select.wgsl", &defines(&[("TOPK", String::new())]), "main")?;
        let ub = self
            .ctx
            .uniform("top-k params", &SelectParams { n, rows, k, offset });
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (1, logits), (2, ids), (3, values)],
            [rows, 1, 1],
        ))
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
