//! The `Backend` trait on the GPU. Ops only record dispatches: a step's work accumulates in
//! `pending` and goes to the GPU as one command encoder with one compute pass when something
//! must be read back (argmax, top-k, rows) or when a buffer the step reads is about to be
//! rewritten from the CPU (token ids, the step uniform). Dispatches — pipeline, parameters,
//! bind group — are made once per distinct op call and reused by every later step.

use super::context::{GpuContext, GpuOptions, PendingRead};
use super::error::{GpuError, GpuResult};
use super::ops::{
    moe_max_tiles, select_scratch_len, AttnShape, Bias, Eltwise, ExpertSel, ExpertTiles, Folds,
    KvCache, MatSel, Multi, NormFold, Ops, Region, Rotary, Step, XRecords,
};
use super::pipelines::Dispatch;
use super::weights::GpuWeight;
use crate::backend::{
    AttnParams, Backend, BufId, Choice, KvId, KvSpec, Linear, MatView, MoeBlock, RopeParams,
    VecRef, WeightId,
};
use crate::error::{EngineError, Result};
use minerva_formats::{Activation, DType, RopeStyle, TensorData, TensorView};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

impl From<GpuError> for EngineError {
    fn from(e: GpuError) -> Self {
        EngineError::Backend(e.to_string())
    }
}

struct Buf {
    buf: wgpu::Buffer,
    rows: usize,
    cols: usize,
}

struct Kv {
    cache: KvCache,
    cache_len: usize,
}

/// Consecutive fusable products: their input, (weight, output, bias) triples, the pending length
/// after their dispatches, how many dispatches they took (with int8 x, the quantization and the
/// product), the deferred norm they fold in, and the int8 records of their input that the
/// kernel before them wrote (see `linear_folded`).
type Products = (
    BufId,
    Vec<(WeightId, BufId, Option<VecRef>)>,
    usize,
    usize,
    Option<Deferred>,
    Option<XRecords>,
);

/// An RMSNorm of one row (over whole rows) that was recorded but not dispatched: decode products
/// of `out` read `x` and fold the norm in (`NormFold`). If anything else reads `out` before it
/// is rewritten, or the step is flushed first, its dispatch goes in at `at`, where it was
/// recorded — where `x` still held the values it normalizes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Deferred {
    x: BufId,
    out: BufId,
    weight: VecRef,
    /// The norm weights' f32 buffer (see `vector`) and their offset in it.
    wid: u32,
    woff: u32,
    eps: f32,
    at: usize,
}

/// The last op recorded, when it was one decode product through `linear` (input, layer, output,
/// folded norm, the int8 records of x it reads, its dispatch count, the pending length after
/// it): an add of its output into another buffer right after it becomes part of it
/// (`Folds::residual`).
#[derive(Clone)]
struct LastProduct {
    x: BufId,
    lin: Linear,
    out: BufId,
    norm: Option<Deferred>,
    records: Option<XRecords>,
    count: usize,
    at: usize,
}

/// The last op recorded, when it was the decode attention with RoPE and the cache write folded
/// in, on a shape whose merge can write int8 records (`Ops::writes_records`): its operands,
/// its key, and the pending length after it. An int8 product of `out` right after it has it
/// write the records and reads them (`Folds::records`) instead of quantizing `out` itself.
#[derive(Clone, Copy)]
struct LastAttention {
    qkv: [BufId; 3],
    kv: KvId,
    out: BufId,
    shape: AttnShape,
    rope: QkRope,
    sinks: Option<(u32, u32)>,
    key: u64,
    at: usize,
}

/// The last op recorded, when it was a MoE block whose last dispatch is the weighted combine of
/// its experts' outputs into `out` (n tokens, k experts each), with the pending length after it:
/// an add of `out` into another buffer right after it becomes part of the combine.
#[derive(Clone, Copy)]
struct LastCombine {
    out: BufId,
    k: usize,
    n: usize,
    at: usize,
}

/// The last op recorded, when it was the MoE combine adding its n tokens of k experts from `x`
/// into the residual stream `acc`, with the pending length after it: a decode product folding
/// a norm of `acc` (its weights taking int8 x) right after it has it write the normed records
/// it reads (`NormFold::records`), so that no quantizing dispatch or f32 norm pass is needed.
#[derive(Clone, Copy)]
struct CombineAdd {
    x: BufId,
    acc: BufId,
    k: usize,
    n: usize,
    at: usize,
}

/// A recorded RoPE of q and k together: buffers, parameters, the frequencies' vector, position,
/// rows, and the pending length after its dispatch.
#[derive(Clone, Copy)]
struct QkRope {
    q: BufId,
    k: BufId,
    rope: RopeParams,
    freq: u32,
    pos: usize,
    rows: usize,
    at: usize,
}

/// Scratch buffers that grow on demand; growing drops the recorded dispatches that bind them.
#[derive(Default)]
struct Scratch {
    bufs: HashMap<&'static str, wgpu::Buffer>,
}

pub struct GpuBackend {
    ctx: Arc<GpuContext>,
    ops: Ops,
    kv_f16: bool,
    weights: Vec<GpuWeight>,
    /// f32 copies of the small float tensors used as vectors (norm weights, biases, sinks).
    vectors: HashMap<u32, wgpu::Buffer>,
    bufs: Vec<Buf>,
    kvs: Vec<Option<Kv>>,
    step: wgpu::Buffer,
    step_now: Option<(usize, usize)>,
    /// Pending work reads the step uniform / the token ids: rewriting them must flush first.
    step_users: bool,
    ids_users: bool,
    /// The last op recorded, when it was a residual add (acc, x, rows, its dispatch count):
    /// an RMSNorm of acc into x right after it fuses with it.
    last_add: Option<(BufId, BufId, usize, usize)>,
    /// The last op recorded, when it was a RoPE (buffer, params, position, rows, dispatch
    /// count): a RoPE of another buffer with the same parameters right after it fuses with it.
    last_rope: Option<(BufId, RopeParams, usize, usize, usize)>,
    /// The last op recorded, when it was the RoPE of q and k in one dispatch: the attention
    /// over them right after it takes it into its KV-cache write.
    last_qk_rope: Option<QkRope>,
    /// The last ops recorded, when they were single-vector products of one input by whole
    /// unsplit weights without bias (input, [(weight, output)], dispatch count): the next such
    /// product (q, k, v) or the GLU over two of them (gate, up) joins them in one dispatch.
    products: Option<Products>,
    last_product: Option<LastProduct>,
    last_combine: Option<LastCombine>,
    last_attention: Option<LastAttention>,
    last_combine_add: Option<CombineAdd>,
    deferred: Option<Deferred>,
    ids: wgpu::Buffer,
    ids_len: usize,
    /// The last greedy choice kept on the device, which the next `embed_choice` reads.
    chosen: wgpu::Buffer,
    /// Choices on the device whose read backs are in flight, oldest first, with their numbers.
    choices: std::collections::VecDeque<(u64, PendingRead)>,
    next_choice: u64,
    scratch: Scratch,
    pending: Vec<Arc<Dispatch>>,
    recorded: HashMap<u64, Vec<Arc<Dispatch>>>,
    /// Build pipelines ahead of use: not on a software adapter, where compiling competes for
    /// the cores that run the kernels.
    warm: bool,
    /// Weight decoders whose pipelines are being built ahead of use.
    warmed: Vec<super::shader::Defines>,
}

fn bad(what: String) -> EngineError {
    EngineError::Backend(what)
}

impl GpuBackend {
    pub fn new(opts: &GpuOptions) -> GpuResult<GpuBackend> {
        let ctx = Arc::new(GpuContext::new(opts)?);
        let step = ctx.uniform("step", &Step::default());
        let ids = ctx.storage("token ids", 4 * 64);
        let chosen = ctx.storage("chosen token", 4);
        let ctx_is_hardware = ctx.info.device_type != wgpu::DeviceType::Cpu;
        let b = GpuBackend {
            ops: Ops::new(ctx.clone()),
            kv_f16: !opts.kv_f32,
            ctx,
            weights: Vec::new(),
            vectors: HashMap::new(),
            bufs: Vec::new(),
            kvs: Vec::new(),
            step,
            step_now: None,
            step_users: false,
            ids_users: false,
            last_add: None,
            last_rope: None,
            last_qk_rope: None,
            products: None,
            last_product: None,
            last_attention: None,
            last_combine_add: None,
            last_combine: None,
            deferred: None,
            ids,
            ids_len: 64,
            chosen,
            choices: Default::default(),
            next_choice: 0,
            scratch: Scratch::default(),
            pending: Vec::new(),
            recorded: HashMap::new(),
            warmed: Vec::new(),
            warm: ctx_is_hardware,
        };
        if b.warm {
            b.ops.warm_up(&[], b.kv_f16);
        }
        Ok(b)
    }

    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Sends the recorded work to the GPU (no wait).
    fn flush(&mut self) -> Result<()> {
        self.materialize()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let list: Vec<&Dispatch> = self.pending.iter().map(|d| d.as_ref()).collect();
        self.ctx.submit(&list)?;
        self.pending.clear();
        self.step_users = false;
        self.ids_users = false;
        self.forget_peepholes();
        Ok(())
    }

    /// Forgets the recent ops that the next one could fuse with.
    fn forget_peepholes(&mut self) {
        self.last_add = None;
        self.last_rope = None;
        self.last_qk_rope = None;
        self.products = None;
        self.last_product = None;
        self.last_combine = None;
        self.last_attention = None;
        self.last_combine_add = None;
    }

    /// Dispatches the deferred norm, if any, where it was recorded.
    fn materialize(&mut self) -> Result<()> {
        let Some(d) = self.deferred.take() else {
            return Ok(());
        };
        let key = key!("norm", d.x, d.weight, d.out, 1usize, d.eps);
        let made = self.prepare(key, |s| {
            let cols = s.buf(d.x)?.cols as u32;
            Ok(vec![s.ops.rms_norm(
                Some(Region::new(&s.buf(d.x)?.buf, 0, 0)),
                Region::new(&s.buf(d.out)?.buf, 0, 0),
                Region::new(s.vector_buf(d.wid), d.woff, 0),
                cols,
                1,
                d.eps,
            )?])
        })?;
        let at = d.at.min(self.pending.len());
        let n = made.len();
        self.pending.splice(at..at, made);
        // Recorded positions at or after the insertion moved.
        let shift = |p: &mut usize| {
            if *p >= at {
                *p += n;
            }
        };
        if let Some(a) = &mut self.last_add {
            shift(&mut a.3);
        }
        if let Some(r) = &mut self.last_rope {
            shift(&mut r.4);
        }
        if let Some(r) = &mut self.last_qk_rope {
            shift(&mut r.at);
        }
        if let Some(p) = &mut self.products {
            shift(&mut p.2);
        }
        if let Some(p) = &mut self.last_product {
            shift(&mut p.at);
        }
        if let Some(c) = &mut self.last_combine {
            shift(&mut c.at);
        }
        if let Some(a) = &mut self.last_attention {
            shift(&mut a.at);
        }
        if let Some(c) = &mut self.last_combine_add {
            shift(&mut c.at);
        }
        Ok(())
    }

    /// Called by ops with the buffers they read (or partly write) other than through a folded
    /// norm: the deferred norm's output must then exist.
    fn touch(&mut self, bufs: &[BufId]) -> Result<()> {
        match self.deferred {
            Some(d) if bufs.contains(&d.out) => self.materialize(),
            _ => Ok(()),
        }
    }

    /// Sends the recorded work and reads `reads` back in the same submit.
    fn flush_read(&mut self, reads: &[(Src, u64, u64)]) -> Result<Vec<Vec<u8>>> {
        let read = self.flush_and_read(reads)?;
        Ok(self.ctx.finish_read(read)?)
    }

    /// Sends the recorded work with copies of `reads` behind it, without waiting for them.
    fn flush_and_read(&mut self, reads: &[(Src, u64, u64)]) -> Result<PendingRead> {
        self.materialize()?;
        let list: Vec<&Dispatch> = self.pending.iter().map(|d| d.as_ref()).collect();
        let mut regions = Vec::new();
        for (src, off, bytes) in reads {
            regions.push((self.src(*src)?, *off, *bytes));
        }
        let out = self.ctx.submit_and_read(&list, &regions)?;
        self.pending.clear();
        self.step_users = false;
        self.ids_users = false;
        self.forget_peepholes();
        Ok(out)
    }

    /// The dispatches recorded under `key`, built on first use.
    fn prepare(
        &mut self,
        key: u64,
        build: impl FnOnce(&Self) -> Result<Vec<Dispatch>>,
    ) -> Result<Vec<Arc<Dispatch>>> {
        if !self.recorded.contains_key(&key) {
            let made = build(self)?.into_iter().map(Arc::new).collect();
            self.recorded.insert(key, made);
        }
        Ok(self.recorded[&key].clone())
    }

    /// Appends the dispatches recorded under `key`, building them on first use.
    fn record(
        &mut self,
        key: u64,
        build: impl FnOnce(&Self) -> Result<Vec<Dispatch>>,
    ) -> Result<()> {
        let made = self.prepare(key, build)?;
        self.pending.extend(made);
        self.forget_peepholes();
        Ok(())
    }

    /// Makes the step uniform say (pos, n), flushing work recorded for another step first.
    fn set_step(&mut self, pos: usize, n: usize) -> Result<()> {
        if self.step_now != Some((pos, n)) {
            // queue writes land before the next submit: pending readers of the old value go first.
            if self.step_users {
                self.flush()?;
            }
            let s = Step {
                pos0: pos as u32,
                tokens: n as u32,
                _pad: [0; 2],
            };
            self.ctx
                .queue
                .write_buffer(&self.step, 0, bytemuck::bytes_of(&s));
            self.step_now = Some((pos, n));
        }
        Ok(())
    }

    fn buf(&self, id: BufId) -> Result<&Buf> {
        self.bufs
            .get(id.0 as usize)
            .ok_or_else(|| bad(format!("unknown buffer handle {}", id.0)))
    }

    fn weight(&self, id: WeightId) -> Result<&GpuWeight> {
        self.weights
            .get(id.0 as usize)
            .ok_or_else(|| bad(format!("unknown weight handle {}", id.0)))
    }

    fn check_rows(&self, id: BufId, n: usize, cols: Option<usize>, op: &str) -> Result<()> {
        let b = self.buf(id)?;
        if n > b.rows || cols.is_some_and(|c| c != b.cols) {
            return Err(bad(format!(
                "{op}: buffer {} is [{}, {}], used as [{n}, {}]",
                id.0,
                b.rows,
                b.cols,
                cols.unwrap_or(b.cols)
            )));
        }
        Ok(())
    }

    /// The f32 buffer holding a vector weight, and the element offset of `v`.
    fn vector(&mut self, v: &VecRef) -> Result<(u32, u32)> {
        let w = self.weight(v.weight)?;
        if v.row >= w.rows.max(1) || v.len > w.cols {
            return Err(bad(format!("vector {v:?} of '{}' {:?}", w.name, w.shape)));
        }
        let offset = (v.row * w.cols) as u32;
        if !self.vectors.contains_key(&v.weight.0) {
            let buf = if w.dtype == DType::F32 && w.parts.len() == 1 {
                None
            } else {
                // Decoded once on the GPU by the embedding kernel over every row.
                let ids: Vec<u32> = (0..w.rows as u32).collect();
                let ib = self.ctx.storage_with("vector rows", &ids);
                let out = self.ctx.storage(&w.name, (w.rows * w.cols * 4) as u64);
                let d = self.ops.embed(w, &ib, &out, w.rows as u32, 1.0)?;
                self.flush()?;
                self.ctx.submit(&d.iter().collect::<Vec<_>>())?;
                Some(out)
            };
            if let Some(b) = buf {
                self.vectors.insert(v.weight.0, b);
            }
        }
        Ok((v.weight.0, offset))
    }

    fn vector_buf(&self, weight: u32) -> &wgpu::Buffer {
        match self.vectors.get(&weight) {
            Some(b) => b,
            None => &self.weights[weight as usize].parts[0].buffers[0],
        }
    }

    /// The rotation a recorded RoPE of q and k applies, for the kernels that fold it in.
    fn rotary(&self, r: &QkRope) -> Rotary<'_> {
        Rotary {
            freq: self.vector_buf(r.freq),
            rot_dim: r.rope.dim as u32,
            halves: r.rope.style == RopeStyle::Halves,
            mscale: r.rope.attention_factor,
        }
    }

    /// A scratch buffer of at least `bytes`; growing it forgets recorded dispatches.
    fn scratch(&mut self, name: &'static str, bytes: u64) -> &wgpu::Buffer {
        let small = self.scratch.bufs.get(name).is_none_or(|b| b.size() < bytes);
        if small {
            // Work already recorded binds the old buffer: send it first.
            let _ = self.flush();
            self.recorded.clear();
            let b = self.ctx.storage(name, bytes.max(16).next_power_of_two());
            self.scratch.bufs.insert(name, b);
        }
        &self.scratch.bufs[name]
    }

    fn sel(&self, m: &MatView) -> MatSel {
        MatSel {
            matrix: m.matrix,
            offset: m.offset,
            stride: m.stride,
            out_dim: m.out_dim,
            in_dim: m.in_dim,
            input_major: m.input_major,
        }
    }

    /// Records `out = x · Wᵀ + b` over `n` rows, x and out given as (buffer id, scratch name).
    fn linear(&mut self, x: Src, lin: &Linear, out: Src, n: usize) -> Result<()> {
        self.linear_folded(x, lin, out, n, None, None, None)
    }

    /// `linear`, where a decode product may fold in a deferred norm of x (x is then the norm's
    /// output; the product reads its input), read x as the int8 `records` that the kernel
    /// before it wrote (with a norm: of the norm's input times its weights, `NormFold::records`),
    /// and add its results into `residual`.
    #[allow(clippy::too_many_arguments)]
    fn linear_folded(
        &mut self,
        x: Src,
        lin: &Linear,
        out: Src,
        n: usize,
        norm: Option<Deferred>,
        records: Option<&XRecords>,
        residual: Option<BufId>,
    ) -> Result<()> {
        let bias = match &lin.bias {
            Some(b) => Some(self.vector(b)?),
            None => None,
        };
        let key = key!(
            "linear",
            x,
            lin,
            out,
            n,
            norm.map(|d| d.x),
            norm.map(|d| d.weight),
            norm.map(|d| d.eps),
            records.is_some(),
            residual
        );
        let sel = self.sel(&lin.w);
        self.record(key, |s| {
            let w = s.weight(lin.w.weight)?;
            let xb = match norm {
                Some(d) => &s.buf(d.x)?.buf,
                None => s.src(x)?,
            };
            let yb = s.src(out)?;
            let xr = Region::new(xb, 0, lin.in_dim() as u32);
            let yr = Region::new(yb, 0, lin.out_dim() as u32);
            let bias = bias.map(|(wid, off)| Bias {
                buf: s.vector_buf(wid),
                offset: off,
                expert_stride: 0,
            });
            let folds = Folds {
                norm: norm.map(|d| NormFold {
                    records,
                    ..s.norm_fold(&d)
                }),
                residual: match residual {
                    Some(r) => Some(&s.buf(r)?.buf),
                    None => None,
                },
                normed: None,
                records: records.filter(|_| norm.is_none()),
            };
            Ok(if n == 1 {
                s.ops.matvec(w, &sel, xr, yr, 1, bias, None, folds)?
            } else {
                s.ops.matmul(w, &sel, xr, yr, n as u32, bias)?
            })
        })
    }

    fn norm_fold(&self, d: &Deferred) -> NormFold<'_> {
        NormFold {
            buf: self.vector_buf(d.wid),
            offset: d.woff,
            eps: d.eps,
            records: None,
        }
    }

    fn src(&self, s: Src) -> Result<&wgpu::Buffer> {
        match s {
            Src::Buf(id) => Ok(&self.buf(id)?.buf),
            Src::Scratch(name) => self
                .scratch
                .bufs
                .get(name)
                .ok_or_else(|| bad(format!("scratch {name} missing"))),
            Src::Chosen => Ok(&self.chosen),
        }
    }

    /// Records the argmax of row `row` of `x` into the chosen-token buffer.
    fn record_argmax(&mut self, x: BufId, row: usize) -> Result<()> {
        self.check_rows(x, row + 1, None, "argmax")?;
        let cols = self.buf(x)?.cols;
        self.scratch("select lists", select_scratch_len(cols as u32, 1, 1) * 4);
        self.scratch("counters", 4);
        self.record(key!("argmax", x, row), |s| {
            Ok(vec![s.ops.argmax(
                &s.buf(x)?.buf,
                (row * cols) as u32,
                cols as u32,
                1,
                &s.chosen,
                s.src(Src::Scratch("select lists"))?,
                s.src(Src::Scratch("counters"))?,
            )?])
        })
    }

    fn glu_op(act: Activation) -> Eltwise {
        match act {
            Activation::Silu => Eltwise::SwiGlu,
            Activation::GptOssClamped { alpha, limit } => Eltwise::GluOss { alpha, limit },
        }
    }

    /// Whether `lin` is a whole, unsplit weight that a fused product can read.
    fn fusable(&self, lin: &Linear) -> bool {
        let m = &lin.w;
        self.weight(m.weight).is_ok_and(|w| {
            w.parts.len() == 1
                && w.shape.len() == 2
                && *m == MatView::plain(m.weight, w.rows, w.cols)
        })
    }

    /// Whether the experts are the matrices 0..E of one stacked weight per projection, in order,
    /// with identical views: then the GPU picks them by id.
    fn stacked(block: &MoeBlock) -> bool {
        let e0 = &block.experts[0];
        let same = |a: &Linear, b: &Linear, e: usize| {
            a.w.weight == b.w.weight
                && b.w.matrix == e
                && MatView { matrix: e, ..a.w } == b.w
                && match (&a.bias, &b.bias) {
                    (None, None) => true,
                    (Some(x), Some(y)) => {
                        x.weight == y.weight && y.row == x.row + e && x.len == y.len
                    }
                    _ => false,
                }
        };
        e0.gate.w.matrix == 0
            && block.experts.iter().enumerate().all(|(e, f)| {
                same(&e0.gate, &f.gate, e) && same(&e0.up, &f.up, e) && same(&e0.down, &f.down, e)
            })
    }
}

/// Feeds the fields that identify an op call into a hasher: recorded dispatches are found by
/// this key, without formatting on the per-token path.
trait KeyPart {
    fn feed(&self, h: &mut DefaultHasher);
}

macro_rules! key {
    ($($e:expr),* $(,)?) => {{
        let mut h = DefaultHasher::new();
        $( KeyPart::feed(&$e, &mut h); )*
        h.finish()
    }};
}
use key;

macro_rules! key_by_hash {
    ($($t:ty),*) => {
        $( impl KeyPart for $t {
            fn feed(&self, h: &mut DefaultHasher) {
                self.hash(h);
            }
        } )*
    };
}
key_by_hash!(
    str,
    u64,
    usize,
    u32,
    bool,
    BufId,
    WeightId,
    KvId,
    Vec<(u32, u32)>
);

impl<T: KeyPart + ?Sized> KeyPart for &T {
    fn feed(&self, h: &mut DefaultHasher) {
        (**self).feed(h);
    }
}

impl KeyPart for f32 {
    fn feed(&self, h: &mut DefaultHasher) {
        self.to_bits().hash(h);
    }
}

impl<T: KeyPart> KeyPart for Option<T> {
    fn feed(&self, h: &mut DefaultHasher) {
        match self {
            None => 0u32.hash(h),
            Some(v) => {
                1u32.hash(h);
                v.feed(h);
            }
        }
    }
}

impl KeyPart for MatView {
    fn feed(&self, h: &mut DefaultHasher) {
        (
            self.weight,
            self.matrix,
            self.input_major,
            self.offset,
            self.stride,
            self.out_dim,
            self.in_dim,
        )
            .hash(h);
    }
}

impl KeyPart for VecRef {
    fn feed(&self, h: &mut DefaultHasher) {
        (self.weight, self.row, self.len).hash(h);
    }
}

impl KeyPart for Linear {
    fn feed(&self, h: &mut DefaultHasher) {
        self.w.feed(h);
        self.bias.feed(h);
    }
}

impl KeyPart for crate::backend::GatedFfn {
    fn feed(&self, h: &mut DefaultHasher) {
        self.gate.feed(h);
        self.up.feed(h);
        self.down.feed(h);
    }
}

impl KeyPart for Activation {
    fn feed(&self, h: &mut DefaultHasher) {
        match *self {
            Activation::Silu => 0u32.hash(h),
            Activation::GptOssClamped { alpha, limit } => {
                (1u32, alpha.to_bits(), limit.to_bits()).hash(h)
            }
        }
    }
}

impl KeyPart for Eltwise {
    fn feed(&self, h: &mut DefaultHasher) {
        format!("{self:?}").hash(h);
    }
}

impl KeyPart for RopeParams {
    fn feed(&self, h: &mut DefaultHasher) {
        (
            self.freqs,
            self.style == RopeStyle::Halves,
            self.dim,
            self.head_dim,
            self.attention_factor.to_bits(),
        )
            .hash(h);
    }
}

impl KeyPart for AttnShape {
    fn feed(&self, h: &mut DefaultHasher) {
        (
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.cache_len,
            self.window,
            self.scale.to_bits(),
        )
            .hash(h);
    }
}

impl KeyPart for Src {
    fn feed(&self, h: &mut DefaultHasher) {
        match self {
            Src::Buf(b) => (0u32, b.0).hash(h),
            Src::Scratch(name) => (1u32, *name).hash(h),
            Src::Chosen => 2u32.hash(h),
        }
    }
}

/// Where an op's operand lives: a transformer buffer, a named scratch buffer, or the chosen
/// token.
#[derive(Debug, Clone, Copy)]
enum Src {
    Buf(BufId),
    Scratch(&'static str),
    /// The last greedy choice.
    Chosen,
}

impl Backend for GpuBackend {
    fn name(&self) -> String {
        format!("gpu: {}", self.ctx.info.name)
    }

    fn builds_kernels_on_first_use(&self) -> bool {
        true
    }

    fn upload(&mut self, view: &TensorView) -> Result<WeightId> {
        // Stacked matrices (experts) stay whole within a part so that ids can pick them.
        let n = view.shape.len();
        let align = if n >= 3 { view.shape[n - 2] } else { 1 };
        let w = GpuWeight::upload(&self.ctx, view, align)?;
        let dec = w.decoder();
        if self.warm && !self.warmed.contains(&dec) {
            self.ops.warm_up(std::slice::from_ref(&dec), self.kv_f16);
            self.warmed.push(dec);
        }
        self.weights.push(w);
        Ok(WeightId(self.weights.len() as u32 - 1))
    }

    fn upload_f32(&mut self, name: &str, shape: &[usize], data: &[f32]) -> Result<WeightId> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let view = TensorView {
            name,
            shape: shape.to_vec(),
            dtype: DType::F32,
            data: TensorData::Plain(bytes),
        };
        self.upload(&view)
    }

    fn max_rows(&self, cols: usize) -> usize {
        let limit = self.ctx.caps.max_binding.min(self.ctx.caps.max_buffer);
        usize::try_from(limit / (cols.max(1) as u64 * 4)).unwrap_or(usize::MAX)
    }

    fn alloc(&mut self, rows: usize, cols: usize) -> Result<BufId> {
        let bytes = (rows.max(1) * cols.max(1) * 4) as u64;
        if bytes > self.ctx.caps.max_binding.min(self.ctx.caps.max_buffer) {
            return Err(bad(format!(
                "activation buffer [{rows}, {cols}] exceeds the GPU's binding limit"
            )));
        }
        self.bufs.push(Buf {
            buf: self.ctx.storage("activations", bytes),
            rows,
            cols,
        });
        self.ctx.check()?;
        Ok(BufId(self.bufs.len() as u32 - 1))
    }

    fn alloc_kv(&mut self, spec: &KvSpec) -> Result<KvId> {
        let cache_len = match spec.window {
            Some(w) => spec.ctx.min(w + spec.max_batch.max(1) - 1),
            None => spec.ctx,
        }
        .max(1);
        let cache = KvCache::new(
            &self.ctx,
            cache_len as u32,
            spec.n_kv_heads as u32,
            spec.head_dim as u32,
            self.kv_f16,
        );
        self.ctx.check()?;
        self.kvs.push(Some(Kv { cache, cache_len }));
        Ok(KvId(self.kvs.len() as u32 - 1))
    }

    fn free_kv(&mut self, kv: KvId) {
        let _ = self.flush();
        if let Some(slot) = self.kvs.get_mut(kv.0 as usize) {
            *slot = None;
        }
        // Dispatches binding the cache go with it.
        self.recorded.clear();
    }

    fn embed(&mut self, table: WeightId, ids: &[u32], out: BufId) -> Result<()> {
        self.touch(&[out])?;
        let n = ids.len();
        let (cols, vocab) = (self.weight(table)?.cols, self.weight(table)?.rows);
        self.check_rows(out, n, Some(cols), "embed")?;
        if let Some(&bad_id) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(bad(format!(
                "token id {bad_id} is outside the embedding table"
            )));
        }
        // The ids buffer is rewritten: work that reads it must go first.
        if self.ids_users {
            self.flush()?;
        }
        self.ids_users = true;
        if n > self.ids_len {
            self.ids_len = n.next_power_of_two();
            self.ids = self.ctx.storage("token ids", 4 * self.ids_len as u64);
            self.recorded.clear();
        }
        self.ctx
            .queue
            .write_buffer(&self.ids, 0, bytemuck::cast_slice(ids));
        self.record(key!("embed", table, out, n), |s| {
            Ok(s.ops
                .embed(s.weight(table)?, &s.ids, &s.buf(out)?.buf, n as u32, 1.0)?)
        })
    }

    fn rms_norm(
        &mut self,
        x: BufId,
        weight: VecRef,
        out: BufId,
        n: usize,
        group: usize,
        eps: f32,
    ) -> Result<()> {
        let cols = self.buf(x)?.cols;
        if group == 0 || cols % group != 0 || weight.len != group {
            return Err(bad(format!(
                "rms_norm: groups of {group} in rows of {cols}"
            )));
        }
        self.check_rows(x, n, None, "rms_norm")?;
        self.check_rows(out, n, Some(cols), "rms_norm")?;
        self.touch(&[x])?;
        if x != out && self.deferred.is_some_and(|d| d.out == out) {
            // Rewritten before anything read it: the older norm's dispatch is never needed.
            self.deferred = None;
        }
        let (wid, woff) = self.vector(&weight)?;
        // Right after `acc += out` (nothing recorded since): replace that add with the fused
        // kernel, which adds and normalizes in one pass over the row.
        if let Some((acc, added, rows, at)) = self.last_add {
            if acc == x && added == out && rows == n && group == cols && at == self.pending.len() {
                self.pending.pop();
                let key = key!("add+norm", x, weight, out, n, eps);
                return self.record(key, |s| {
                    let xr = Region::new(&s.buf(x)?.buf, 0, 0);
                    let y = Region::new(&s.buf(out)?.buf, 0, 0);
                    let w = Region::new(s.vector_buf(wid), woff, 0);
                    Ok(vec![s.ops.add_rms_norm(
                        xr,
                        y,
                        w,
                        group as u32,
                        n as u32,
                        eps,
                    )?])
                });
            }
        }
        // One row over whole rows: the decode products that read `out` fold it in instead.
        if n == 1 && group == cols && x != out {
            self.materialize()?;
            self.deferred = Some(Deferred {
                x,
                out,
                weight,
                wid,
                woff,
                eps,
                at: self.pending.len(),
            });
            // The MoE combine that added into x stays the last dispatch: the products folding
            // this norm may have it write their int8 records.
            let combine = self.last_combine_add.filter(|c| c.acc == x);
            self.forget_peepholes();
            self.last_combine_add = combine;
            return Ok(());
        }
        let key = key!("norm", x, weight, out, n, group, eps);
        self.record(key, |s| {
            let y = Region::new(&s.buf(out)?.buf, 0, 0);
            let xr = if x == out {
                None
            } else {
                Some(Region::new(&s.buf(x)?.buf, 0, 0))
            };
            let w = Region::new(s.vector_buf(wid), woff, 0);
            Ok(vec![s.ops.rms_norm(
                xr,
                y,
                w,
                group as u32,
                (n * cols / group) as u32,
                eps,
            )?])
        })
    }

    fn matmul(&mut self, x: BufId, lin: &Linear, out: BufId, n: usize) -> Result<()> {
        self.check_rows(x, n, Some(lin.in_dim()), "matmul")?;
        self.check_rows(out, n, Some(lin.out_dim()), "matmul")?;
        // A decode product of the deferred norm's output reads its input and folds it in.
        let norm = self.deferred.filter(|d| d.out == x && n == 1 && x != out);
        if norm.is_none() {
            self.touch(&[x])?;
        }
        if self.deferred.is_some_and(|d| d.out == out) {
            // Rewritten before anything read it: the norm's dispatch is never needed.
            self.deferred = None;
        }
        if n != 1 || !self.fusable(lin) || x == out {
            return self.single_product(x, lin, out, n, norm).map(|_| ());
        }
        // Records of the normed input (matvec_multi takes no others) join a weight that takes
        // them.
        let takes_records = self.ops.takes_records(self.weight(lin.w.weight)?);
        let joined = match self.products.take() {
            Some((px, items, at, count, pnorm, records))
                if px == x
                    && pnorm == norm
                    && items.len() < 3
                    && at == self.pending.len()
                    && (records.is_none() || (takes_records && norm.is_some()))
                    && items
                        .iter()
                        .all(|i| i.1 != out && i.2.is_some() == lin.bias.is_some()) =>
            {
                self.pending.truncate(at - count);
                Some((items, records))
            }
            _ => None,
        };
        let before = self.pending.len();
        let Some((mut items, records)) = joined else {
            let records = self.single_product(x, lin, out, n, norm)?;
            let first = vec![(lin.w.weight, out, lin.bias)];
            let count = self.pending.len() - before;
            self.products = Some((x, first, self.pending.len(), count, norm, records));
            return Ok(());
        };
        items.push((lin.w.weight, out, lin.bias));
        let mut biases = Vec::new();
        for b in items.iter().filter_map(|i| i.2) {
            biases.push(self.vector(&b)?);
        }
        let key = key!(
            "products",
            x,
            items.iter().map(|i| (i.0 .0, i.1 .0)).collect::<Vec<_>>(),
            biases.clone(),
            norm.map(|d| d.x),
            norm.map(|d| d.weight),
            norm.map(|d| d.eps),
            records.is_some()
        );
        let list = items.clone();
        self.record(key, |s| {
            let ws: Vec<&GpuWeight> = list.iter().map(|i| s.weight(i.0)).collect::<Result<_>>()?;
            let outs: Vec<&wgpu::Buffer> = list
                .iter()
                .map(|i| s.buf(i.1).map(|b| &b.buf))
                .collect::<Result<_>>()?;
            let input = norm.map(|d| d.x).unwrap_or(x);
            let biases: Vec<Bias> = biases
                .iter()
                .map(|&(wid, off)| Bias {
                    buf: s.vector_buf(wid),
                    offset: off,
                    expert_stride: 0,
                })
                .collect();
            Ok(s.ops.matvec_multi(
                &ws,
                Region::new(&s.buf(input)?.buf, 0, 0),
                &outs,
                Multi::Split,
                norm.map(|d| NormFold {
                    records: records.as_ref(),
                    ..s.norm_fold(&d)
                }),
                &biases,
            )?)
        })?;
        let count = self.pending.len() - before;
        self.products = Some((x, items, self.pending.len(), count, norm, records));
        Ok(())
    }

    fn rope(&mut self, x: BufId, n: usize, pos: usize, rope: &RopeParams) -> Result<()> {
        self.touch(&[x])?;
        let cols = self.buf(x)?.cols;
        if rope.head_dim == 0
            || cols % rope.head_dim != 0
            || rope.dim > rope.head_dim
            || !rope.dim.is_multiple_of(2)
        {
            return Err(bad(format!(
                "rope: heads of {} in rows of {cols}, {} rotated",
                rope.head_dim, rope.dim
            )));
        }
        self.check_rows(x, n, None, "rope")?;
        self.set_step(pos, n)?;
        self.step_users = true;
        let freq = VecRef {
            weight: rope.freqs,
            row: 0,
            len: rope.dim / 2,
        };
        let (fid, _) = self.vector(&freq)?;
        // Right after the same RoPE of another buffer (q, then k): one dispatch turns both.
        let mut first = None;
        if let Some((prev, prev_rope, prev_pos, rows, at)) = self.last_rope {
            if prev != x
                && prev_rope == *rope
                && prev_pos == pos
                && rows == n
                && at == self.pending.len()
            {
                self.pending.pop();
                first = Some((prev, self.buf(prev)?.cols));
            }
        }
        let key = key!("rope", x, rope, n, first.map(|f| f.0));
        self.record(key, |s| {
            let (main, main_cols, second) = match first {
                Some((prev, prev_cols)) => (
                    prev,
                    prev_cols,
                    Some((&s.buf(x)?.buf, (cols / rope.head_dim) as u32)),
                ),
                None => (x, cols, None),
            };
            Ok(vec![s.ops.rope(
                &s.buf(main)?.buf,
                0,
                s.vector_buf(fid),
                &s.step,
                n as u32,
                (main_cols / rope.head_dim) as u32,
                rope.head_dim as u32,
                rope.dim as u32,
                rope.style == RopeStyle::Halves,
                rope.attention_factor,
                second,
            )?])
        })?;
        match first {
            None => self.last_rope = Some((x, *rope, pos, n, self.pending.len())),
            Some((q, _)) => {
                self.last_qk_rope = Some(QkRope {
                    q,
                    k: x,
                    rope: *rope,
                    freq: fid,
                    pos,
                    rows: n,
                    at: self.pending.len(),
                })
            }
        }
        Ok(())
    }

    fn attention(
        &mut self,
        q: BufId,
        k: BufId,
        v: BufId,
        kv: KvId,
        out: BufId,
        p: &AttnParams,
    ) -> Result<()> {
        self.touch(&[q, k, v, out])?;
        let qd = p.n_heads * p.head_dim;
        let kd = p.n_kv_heads * p.head_dim;
        if p.n_kv_heads == 0
            || !p.n_heads.is_multiple_of(p.n_kv_heads)
            || !p.head_dim.is_multiple_of(2)
            || p.head_dim > 512
        {
            return Err(bad(format!(
                "attention: {} heads over {} KV heads of {}",
                p.n_heads, p.n_kv_heads, p.head_dim
            )));
        }
        if [q, k, v].contains(&out) {
            return Err(bad("attention: the output buffer is also an input".into()));
        }
        self.check_rows(q, p.n, Some(qd), "attention q")?;
        self.check_rows(k, p.n, Some(kd), "attention k")?;
        self.check_rows(v, p.n, Some(kd), "attention v")?;
        self.check_rows(out, p.n, Some(qd), "attention out")?;
        let cache_len = match self.kvs.get(kv.0 as usize) {
            Some(Some(c)) => c.cache_len,
            _ => return Err(bad(format!("unknown KV cache {}", kv.0))),
        };
        let shape = AttnShape {
            heads: p.n_heads as u32,
            kv_heads: p.n_kv_heads as u32,
            head_dim: p.head_dim as u32,
            cache_len: cache_len as u32,
            window: p.window.unwrap_or(0) as u32,
            scale: p.scale,
        };
        let sinks = match &p.sinks {
            Some(s) => Some(self.vector(s)?),
            None => None,
        };
        self.set_step(p.pos, p.n)?;
        self.step_users = true;
        self.scratch("attention", shape.scratch_len(p.n as u32) * 4);
        self.scratch("counters", shape.kv_heads as u64 * 4);
        // Right after the RoPE of exactly these q and k: that dispatch also writes the cache, or
        // for one query the decode attention does both (q and k turned as the RoPE leaves them).
        let rope = match self.last_qk_rope.take() {
            Some(r)
                if r.q == q
                    && r.k == k
                    && v != q
                    && v != k
                    && r.pos == p.pos
                    && r.rows == p.n
                    && r.rope.head_dim == p.head_dim
                    && r.at == self.pending.len() =>
            {
                self.pending.pop();
                Some(r)
            }
            _ => None,
        };
        // Everything but the position, which the step uniform carries.
        let key = key!(
            "attention",
            q,
            k,
            v,
            kv,
            out,
            p.n,
            shape,
            p.sinks,
            p.scale,
            rope.map(|r| r.rope)
        );
        let fold = rope.filter(|r| self.ops.folds_rope(&shape, r.rope.dim as u32, p.n as u32));
        if let Some(r) = fold {
            let a = LastAttention {
                qkv: [q, k, v],
                kv,
                out,
                shape,
                rope: r,
                sinks,
                key,
                at: 0,
            };
            self.record_decode_rope(&a, None)?;
            if self.ops.writes_records(&shape) {
                self.last_attention = Some(LastAttention {
                    at: self.pending.len(),
                    ..a
                });
            }
            return Ok(());
        }
        self.record(key, |s| {
            let Some(Some(c)) = s.kvs.get(kv.0 as usize) else {
                return Err(bad(format!("unknown KV cache {}", kv.0)));
            };
            let rotary = rope.map(|r| s.rotary(&r));
            let sinks = sinks.map(|(wid, off)| Region::new(s.vector_buf(wid), off, 0));
            let write = match &rotary {
                Some(r) => s.ops.rope_write(
                    &shape,
                    &c.cache,
                    &s.buf(q)?.buf,
                    &s.buf(k)?.buf,
                    &s.buf(v)?.buf,
                    r,
                    &s.step,
                    p.n as u32,
                )?,
                None => s.ops.write_kv(
                    &shape,
                    &c.cache,
                    Region::new(&s.buf(k)?.buf, 0, 0),
                    Region::new(&s.buf(v)?.buf, 0, 0),
                    &s.step,
                    p.n as u32,
                )?,
            };
            let mut d = vec![write];
            d.extend(s.ops.attention(
                &shape,
                &c.cache,
                &s.buf(q)?.buf,
                0,
                &s.buf(out)?.buf,
                0,
                s.src(Src::Scratch("attention"))?,
                s.src(Src::Scratch("counters"))?,
                sinks,
                &s.step,
                p.n as u32,
            )?);
            Ok(d)
        })
    }

    fn glu(&mut self, gate: BufId, up: BufId, out: BufId, n: usize, act: Activation) -> Result<()> {
        let cols = self.buf(gate)?.cols;
        self.check_rows(gate, n, None, "glu")?;
        self.check_rows(up, n, Some(cols), "glu")?;
        self.check_rows(out, n, Some(cols), "glu")?;
        self.touch(&[gate, up, out])?;
        // Right after the gate and up products of one vector: one dispatch does all three.
        if let Some((x, items, at, count, norm, records)) = self.products.take() {
            let pair = items.len() == 2
                && items[0].1 == gate
                && items[1].1 == up
                && out != x
                && items.iter().all(|i| i.2.is_none());
            if pair && at == self.pending.len() && n == 1 {
                let (wg, wu) = (items[0].0, items[1].0);
                let (gw, uw) = (self.weight(wg)?, self.weight(wu)?);
                if gw.rows == uw.rows {
                    let int8 = self.ops.glu_takes_int8(&[gw, uw], norm.is_some());
                    // Records need int8 x of one dtype for both weights.
                    let records = records.filter(|_| int8);
                    self.pending.truncate(at - count);
                    // Without int8 x the norm is dispatched on its own instead of folded in:
                    // folded, its weights and x² cost this product more than the norm's own
                    // dispatch (benches/GPU.md, entry 43). With int8 x the quantization of x,
                    // a dispatch anyway, applies it.
                    let norm = match norm {
                        Some(d) if self.deferred == Some(d) && !int8 => {
                            self.materialize()?;
                            None
                        }
                        other => other,
                    };
                    let op = Self::glu_op(act);
                    let key = key!(
                        "gate+up+act",
                        x,
                        wg,
                        wu,
                        out,
                        act,
                        norm.map(|d| d.x),
                        norm.map(|d| d.weight),
                        norm.map(|d| d.eps),
                        records.is_some()
                    );
                    return self.record(key, |s| {
                        let ws = [s.weight(wg)?, s.weight(wu)?];
                        let input = norm.map(|d| d.x).unwrap_or(x);
                        let xr = Region::new(&s.buf(input)?.buf, 0, 0);
                        Ok(s.ops.matvec_multi(
                            &ws,
                            xr,
                            &[&s.buf(out)?.buf],
                            Multi::Glu(op),
                            norm.map(|d| NormFold {
                                records: records.as_ref(),
                                ..s.norm_fold(&d)
                            }),
                            &[],
                        )?)
                    });
                }
            }
        }
        let key = key!("glu", gate, up, out, n, act);
        self.record(key, |s| {
            let c = cols as u32;
            Ok(vec![s.ops.eltwise(
                Self::glu_op(act),
                Region::new(&s.buf(gate)?.buf, 0, c),
                Some(Region::new(&s.buf(up)?.buf, 0, c)),
                Region::new(&s.buf(out)?.buf, 0, c),
                c,
                n as u32,
            )?])
        })
    }

    fn moe(&mut self, x: BufId, block: &MoeBlock, out: BufId, n: usize) -> Result<()> {
        // The experts read x many times over: folding a deferred norm into each expert row
        // measured slower than dispatching the norm once (benches/GPU.md, entry 33). The router
        // folds it in and writes x, the norm's output, for them: no dispatch of its own.
        let norm = self.deferred.filter(|d| d.out == x && n == 1 && out != x);
        if norm.is_some() {
            self.deferred = None;
        }
        self.touch(&[x, out])?;
        let hidden = self.buf(x)?.cols;
        self.check_rows(x, n, None, "moe")?;
        self.check_rows(out, n, Some(hidden), "moe")?;
        let experts = block.experts.len();
        let k = block.routing.top_k.min(experts);
        if experts == 0 || k == 0 {
            return Err(bad("moe: no experts".into()));
        }
        let width = block.experts[0].gate.out_dim();
        let renorm = block.routing.softmax_after_topk || block.routing.norm_topk_prob;
        // Router logits, then ids and weights per token, all on the GPU.
        self.scratch("moe logits", (n * experts * 4) as u64);
        self.scratch("moe ids", (n * k * 4) as u64);
        self.scratch("moe weights", (n * k * 4) as u64);
        match norm {
            Some(d) => self.router_writing_norm(x, &block.router, d)?,
            None => self.linear(Src::Buf(x), &block.router, Src::Scratch("moe logits"), n)?,
        }
        let key = key!("moe route", n, experts, k, renorm);
        self.record(key, |s| {
            Ok(vec![s.ops.moe_route(
                s.src(Src::Scratch("moe logits"))?,
                0,
                experts as u32,
                k as u32,
                n as u32,
                renorm,
                s.src(Src::Scratch("moe ids"))?,
                s.src(Src::Scratch("moe weights"))?,
            )?])
        })?;
        let act = Self::glu_op(block.activation);
        let act_key = block.activation;
        if Self::stacked(block) {
            let items = n * k;
            self.scratch("moe gate", (items * width * 4) as u64);
            self.scratch("moe up", (items * width * 4) as u64);
            self.scratch("moe act", (items * width * 4) as u64);
            self.scratch("moe expert out", (items * hidden * 4) as u64);
            // Prompts: the items grouped by expert, so each expert's weights are decoded once per
            // tile of items instead of once per item.
            let grouped = n > 1;
            let max_tiles = moe_max_tiles(items as u32, experts as u32);
            if grouped {
                self.scratch("moe order", (items * 4) as u64);
                self.scratch("moe tiles", max_tiles as u64 * 16);
            }
            let e0 = block.experts[0];
            let mut biases = Vec::new();
            for l in [&e0.gate, &e0.up, &e0.down] {
                biases.push(match &l.bias {
                    Some(b) => Some(self.vector(b)?),
                    None => None,
                });
            }
            // Decode: gate, up and the activation in one product per weight part.
            let fuse_glu = !grouped
                && biases[0].is_some() == biases[1].is_some()
                && self
                    .weight(e0.gate.w.weight)?
                    .same_parts(self.weight(e0.up.w.weight)?);
            let key = key!("moe experts", x, e0, n, k, act_key);
            self.record(key, |s| {
                let ids = s.src(Src::Scratch("moe ids"))?;
                let actb = s.src(Src::Scratch("moe act"))?;
                let eo = s.src(Src::Scratch("moe expert out"))?;
                let xb = &s.buf(x)?.buf;
                let mut d = Vec::new();
                let groups = if grouped {
                    let order = s.src(Src::Scratch("moe order"))?;
                    let tiles = s.src(Src::Scratch("moe tiles"))?;
                    d.push(s.ops.moe_group(
                        ids,
                        experts as u32,
                        k as u32,
                        n as u32,
                        order,
                        tiles,
                    )?);
                    Some((order, tiles))
                } else {
                    None
                };
                // One projection of every item through its expert; item i reads x row i / x_div.
                // Expert e's bias is row `row + e` of its [experts, width] tensor.
                let product = |i: usize, lin: &Linear, xr: Region, yr: Region| {
                    // Gate and up read each token's x k times (once per slot); down one row per item.
                    let x_div = if i < 2 { k as u32 } else { 1 };
                    let w = s.weight(lin.w.weight)?;
                    let sel = MatSel {
                        matrix: 0,
                        ..s.sel(&lin.w)
                    };
                    let bias = biases[i].map(|(wid, off)| Bias {
                        buf: s.vector_buf(wid),
                        offset: off,
                        expert_stride: s.weights[wid as usize].cols as u32,
                    });
                    Ok::<_, EngineError>(match groups {
                        Some((order, tiles)) => s.ops.matmul_experts(
                            w,
                            &sel,
                            xr,
                            yr,
                            bias,
                            ExpertTiles {
                                order,
                                tiles,
                                max_tiles,
                                x_div,
                            },
                        )?,
                        None => s.ops.matvec(
                            w,
                            &sel,
                            xr,
                            yr,
                            items as u32,
                            bias,
                            Some(ExpertSel { ids, x_div }),
                            Folds::default(),
                        )?,
                    })
                };
                let (h, w) = (hidden as u32, width as u32);
                let xr = Region::new(xb, 0, h);
                if fuse_glu {
                    let sel = |lin: &Linear| MatSel {
                        matrix: 0,
                        ..s.sel(&lin.w)
                    };
                    let bias = |i: usize| {
                        biases[i].map(|(wid, off)| Bias {
                            buf: s.vector_buf(wid),
                            offset: off,
                            expert_stride: s.weights[wid as usize].cols as u32,
                        })
                    };
                    d.extend(s.ops.matvec_glu_experts(
                        [s.weight(e0.gate.w.weight)?, s.weight(e0.up.w.weight)?],
                        [&sel(&e0.gate), &sel(&e0.up)],
                        xr,
                        Region::new(actb, 0, w),
                        items as u32,
                        act,
                        bias(0).zip(bias(1)).map(|(g, u)| [g, u]),
                        ExpertSel {
                            ids,
                            x_div: k as u32,
                        },
                    )?);
                } else {
                    let (gate, up) = (
                        s.src(Src::Scratch("moe gate"))?,
                        s.src(Src::Scratch("moe up"))?,
                    );
                    d.extend(product(0, &e0.gate, xr, Region::new(gate, 0, w))?);
                    d.extend(product(1, &e0.up, xr, Region::new(up, 0, w))?);
                    d.push(s.ops.eltwise(
                        act,
                        Region::new(gate, 0, w),
                        Some(Region::new(up, 0, w)),
                        Region::new(actb, 0, w),
                        w,
                        items as u32,
                    )?);
                }
                d.extend(product(
                    2,
                    &e0.down,
                    Region::new(actb, 0, w),
                    Region::new(eo, 0, h),
                )?);
                d.push(s.ops.moe_combine(
                    eo,
                    s.src(Src::Scratch("moe weights"))?,
                    &s.buf(out)?.buf,
                    h,
                    k as u32,
                    n as u32,
                    None,
                    None,
                )?);
                Ok(d)
            })?;
            if block.shared.is_none() {
                self.last_combine = Some(LastCombine {
                    out,
                    k,
                    n,
                    at: self.pending.len(),
                });
            }
        } else {
            // Separate tensors per expert: every expert runs densely, weighted by its routing
            // weight (0 for tokens that did not choose it).
            self.scratch("moe dense", (n * experts * 4) as u64);
            self.scratch("moe gate", (n * width * 4) as u64);
            self.scratch("moe up", (n * width * 4) as u64);
            self.scratch("moe expert out", (n * hidden * 4) as u64);
            let key = key!("moe dense", n, experts, k);
            self.record(key, |s| {
                Ok(vec![s.ops.moe_scatter(
                    s.src(Src::Scratch("moe ids"))?,
                    s.src(Src::Scratch("moe weights"))?,
                    s.src(Src::Scratch("moe dense"))?,
                    experts as u32,
                    k as u32,
                    n as u32,
                )?])
            })?;
            self.zero(out, n * hidden)?;
            for (e, f) in block.experts.iter().enumerate() {
                self.ffn(Src::Buf(x), f, act, n, width)?;
                let key = key!("moe dense add", e, n, experts, out);
                self.record(key, |s| {
                    Ok(vec![s.ops.eltwise(
                        Eltwise::ScaledAdd { sigmoid: false },
                        Region::new(s.src(Src::Scratch("moe expert out"))?, 0, hidden as u32),
                        Some(Region::new(
                            s.src(Src::Scratch("moe dense"))?,
                            e as u32,
                            experts as u32,
                        )),
                        Region::new(&s.buf(out)?.buf, 0, hidden as u32),
                        hidden as u32,
                        n as u32,
                    )?])
                })?;
            }
        }
        if let Some((shared, gate)) = &block.shared {
            let sw = shared.gate.out_dim();
            self.scratch("moe gate", (n * sw.max(width) * 4) as u64);
            self.scratch("moe up", (n * sw.max(width) * 4) as u64);
            self.scratch("moe expert out", (n * hidden * 4) as u64);
            self.scratch("moe shared gate", (n * 4) as u64);
            self.ffn(Src::Buf(x), shared, act, n, sw)?;
            self.linear(Src::Buf(x), gate, Src::Scratch("moe shared gate"), n)?;
            let key = key!("moe shared add", n, out);
            self.record(key, |s| {
                Ok(vec![s.ops.eltwise(
                    Eltwise::ScaledAdd { sigmoid: true },
                    Region::new(s.src(Src::Scratch("moe expert out"))?, 0, hidden as u32),
                    Some(Region::new(s.src(Src::Scratch("moe shared gate"))?, 0, 1)),
                    Region::new(&s.buf(out)?.buf, 0, hidden as u32),
                    hidden as u32,
                    n as u32,
                )?])
            })?;
        }
        Ok(())
    }

    fn add(&mut self, acc: BufId, x: BufId, n: usize) -> Result<()> {
        let cols = self.buf(acc)?.cols;
        if acc == x {
            return Err(bad("add of a buffer to itself".into()));
        }
        self.check_rows(acc, n, None, "add")?;
        self.check_rows(x, n, Some(cols), "add")?;
        self.touch(&[acc, x])?;
        // Right after the MoE block that wrote x: its combine adds its results itself.
        if let Some(c) = self.last_combine {
            if c.out == x && c.n == n && c.at == self.pending.len() {
                self.pending.pop();
                let mut a = CombineAdd {
                    x,
                    acc,
                    k: c.k,
                    n,
                    at: 0,
                };
                self.record_combine_add(&a, None)?;
                a.at = self.pending.len();
                self.last_combine_add = Some(a);
                return Ok(());
            }
        }
        // Right after the decode product that wrote x: the product adds its results itself.
        if let Some(lp) = self.last_product.take() {
            let reads_acc = lp.x == acc || lp.norm.is_some_and(|d| d.x == acc);
            if lp.out == x && lp.at == self.pending.len() && n == 1 && !reads_acc {
                self.pending.truncate(self.pending.len() - lp.count);
                return self.linear_folded(
                    Src::Buf(lp.x),
                    &lp.lin,
                    Src::Buf(lp.out),
                    1,
                    lp.norm,
                    lp.records.as_ref(),
                    Some(acc),
                );
            }
        }
        self.record(key!("add", acc, x, n), |s| {
            let c = cols as u32;
            Ok(vec![s.ops.eltwise(
                Eltwise::Add,
                Region::new(&s.buf(x)?.buf, 0, c),
                None,
                Region::new(&s.buf(acc)?.buf, 0, c),
                c,
                n as u32,
            )?])
        })?;
        self.last_add = Some((acc, x, n, self.pending.len()));
        Ok(())
    }

    fn copy_rows(
        &mut self,
        src: BufId,
        src_row: usize,
        dst: BufId,
        dst_row: usize,
        n: usize,
    ) -> Result<()> {
        self.touch(&[src, dst])?;
        let cols = self.buf(src)?.cols;
        if src == dst {
            return Err(bad("copy_rows within one buffer".into()));
        }
        self.check_rows(src, src_row + n, None, "copy_rows")?;
        self.check_rows(dst, dst_row + n, Some(cols), "copy_rows")?;
        self.record(key!("copy", src, src_row, dst, dst_row, n), |s| {
            let c = cols as u32;
            Ok(vec![s.ops.eltwise(
                Eltwise::Copy,
                Region::new(&s.buf(src)?.buf, (src_row * cols) as u32, c),
                None,
                Region::new(&s.buf(dst)?.buf, (dst_row * cols) as u32, c),
                c,
                n as u32,
            )?])
        })
    }

    fn argmax(&mut self, x: BufId, row: usize) -> Result<u32> {
        self.record_argmax(x, row)?;
        let b = self.flush_read(&[(Src::Chosen, 0, 4)])?;
        Ok(u32::from_le_bytes([b[0][0], b[0][1], b[0][2], b[0][3]]))
    }

    fn choose_greedy(&mut self, x: BufId, row: usize) -> Result<Choice> {
        self.record_argmax(x, row)?;
        let read = self.flush_and_read(&[(Src::Chosen, 0, 4)])?;
        let n = self.next_choice;
        self.next_choice += 1;
        // Choices nobody read (a turn that ended on the token before) are dropped.
        while self.choices.len() >= 2 {
            self.choices.pop_front();
        }
        self.choices.push_back((n, read));
        Ok(Choice::OnDevice(n))
    }

    fn embed_choice(&mut self, table: WeightId, choice: Choice, out: BufId) -> Result<()> {
        let n = match choice {
            Choice::Known(id) => return self.embed(table, &[id], out),
            Choice::OnDevice(n) => n,
        };
        // Only the latest choice is still in the buffer.
        if n + 1 != self.next_choice {
            return Err(bad(format!("choice {n} is no longer on the device")));
        }
        self.touch(&[out])?;
        let cols = self.weight(table)?.cols;
        self.check_rows(out, 1, Some(cols), "embed")?;
        self.record(key!("embed choice", table, out), |s| {
            Ok(s.ops
                .embed(s.weight(table)?, &s.chosen, &s.buf(out)?.buf, 1, 1.0)?)
        })
    }

    fn read_choice(&mut self, choice: Choice) -> Result<u32> {
        let n = match choice {
            Choice::Known(id) => return Ok(id),
            Choice::OnDevice(n) => n,
        };
        while let Some((m, read)) = self.choices.pop_front() {
            if m == n {
                let b = self.ctx.finish_read(read)?;
                return Ok(u32::from_le_bytes([b[0][0], b[0][1], b[0][2], b[0][3]]));
            }
        }
        Err(bad(format!("choice {n} was already read or dropped")))
    }

    fn top_k(&mut self, x: BufId, row: usize, k: usize) -> Result<Vec<(u32, f32)>> {
        self.check_rows(x, row + 1, None, "top_k")?;
        let cols = self.buf(x)?.cols;
        let k = k.min(cols);
        if k == 0 {
            return Ok(Vec::new());
        }
        self.scratch("selected ids", (k * 4) as u64);
        self.scratch("selected values", (k * 4) as u64);
        let lists = select_scratch_len(cols as u32, 1, k as u32) * 4;
        self.scratch("select lists", lists);
        self.scratch("counters", 4);
        self.record(key!("top_k", x, row, k), |s| {
            Ok(vec![s.ops.top_k(
                &s.buf(x)?.buf,
                (row * cols) as u32,
                cols as u32,
                1,
                k as u32,
                s.src(Src::Scratch("selected ids"))?,
                s.src(Src::Scratch("selected values"))?,
                s.src(Src::Scratch("select lists"))?,
                s.src(Src::Scratch("counters"))?,
            )?])
        })?;
        let b = self.flush_read(&[
            (Src::Scratch("selected ids"), 0, (k * 4) as u64),
            (Src::Scratch("selected values"), 0, (k * 4) as u64),
        ])?;
        let ids: Vec<u32> = bytemuck::pod_collect_to_vec(&b[0]);
        let vals: Vec<f32> = bytemuck::pod_collect_to_vec(&b[1]);
        Ok(ids.into_iter().zip(vals).collect())
    }

    fn device_memory(&self) -> Option<crate::backend::DeviceMemory> {
        self.ctx.memory()
    }

    fn read_rows(&mut self, x: BufId, first: usize, n: usize) -> Result<Vec<f32>> {
        self.check_rows(x, first + n, None, "read_rows")?;
        let cols = self.buf(x)?.cols;
        let b = self.flush_read(&[(
            Src::Buf(x),
            (first * cols * 4) as u64,
            (n * cols * 4) as u64,
        )])?;
        Ok(bytemuck::pod_collect_to_vec(&b[0]))
    }
}

impl GpuBackend {
    /// Records one product through `linear` (folding `norm` in) and remembers it, so that an
    /// add of its output right after it can fold in too. Returns the int8 records of its input
    /// that the kernel before it was made to write, if any.
    fn single_product(
        &mut self,
        x: BufId,
        lin: &Linear,
        out: BufId,
        n: usize,
        norm: Option<Deferred>,
    ) -> Result<Option<XRecords>> {
        let records = match self.attention_writing_records(x, lin, n, norm)? {
            Some(r) => Some(r),
            None => self.combine_writing_records(lin, n, norm)?,
        };
        let before = self.pending.len();
        self.linear_folded(
            Src::Buf(x),
            lin,
            Src::Buf(out),
            n,
            norm,
            records.as_ref(),
            None,
        )?;
        if n == 1 {
            self.last_product = Some(LastProduct {
                x,
                lin: *lin,
                out,
                norm,
                records: records.clone(),
                count: self.pending.len() - before,
                at: self.pending.len(),
            });
        }
        Ok(records)
    }

    /// Records the MoE combine adding into the residual stream; with `norm` (a deferred norm of
    /// the stream and the records' room) also writing the normed int8 records.
    fn record_combine_add(
        &mut self,
        a: &CombineAdd,
        norm: Option<(Deferred, &XRecords)>,
    ) -> Result<()> {
        let cols = self.buf(a.acc)?.cols as u32;
        let key = key!(
            "moe combine+add",
            a.x,
            a.acc,
            a.n,
            a.k,
            norm.map(|(d, _)| d.weight),
            norm.map(|(d, _)| d.eps)
        );
        self.record(key, |s| {
            Ok(vec![s.ops.moe_combine(
                s.src(Src::Scratch("moe expert out"))?,
                s.src(Src::Scratch("moe weights"))?,
                &s.buf(a.x)?.buf,
                cols,
                a.k as u32,
                a.n as u32,
                Some(&s.buf(a.acc)?.buf),
                norm.map(|(d, r)| NormFold {
                    records: Some(r),
                    ..s.norm_fold(&d)
                }),
            )?])
        })
    }

    /// For a decode product folding a norm of the residual stream right after the MoE combine
    /// that added into it, where the weight takes int8 x: that combine again, also writing
    /// the stream times the norm's weights as int8 records, and the records for the product.
    fn combine_writing_records(
        &mut self,
        lin: &Linear,
        n: usize,
        norm: Option<Deferred>,
    ) -> Result<Option<XRecords>> {
        let (Some(c), Some(d)) = (self.last_combine_add, norm) else {
            return Ok(None);
        };
        if c.acc != d.x || c.at != self.pending.len() || n != 1 || c.n != 1 {
            return Ok(None);
        }
        if !self.ops.takes_records(self.weight(lin.w.weight)?) {
            return Ok(None);
        }
        let cols = self.buf(c.acc)?.cols as u32;
        let Some(records) = self.ops.combine_records(cols, 1) else {
            return Ok(None);
        };
        self.pending.pop();
        self.record_combine_add(&c, Some((d, &records)))?;
        Ok(Some(records))
    }

    /// For a decode product of x right after the decode attention that wrote x, where the
    /// weight takes int8 x: that attention again, writing its output as int8 records too, and
    /// the records for the product to read (no quantizing dispatch).
    fn attention_writing_records(
        &mut self,
        x: BufId,
        lin: &Linear,
        n: usize,
        norm: Option<Deferred>,
    ) -> Result<Option<XRecords>> {
        let Some(a) = self.last_attention else {
            return Ok(None);
        };
        if a.out != x || a.at != self.pending.len() || n != 1 || norm.is_some() {
            return Ok(None);
        }
        if !self.ops.takes_records(self.weight(lin.w.weight)?) {
            return Ok(None);
        }
        let Some(records) = self.ops.attention_records(&a.shape) else {
            return Ok(None);
        };
        self.pending.pop();
        self.record_decode_rope(&a, Some(&records))?;
        Ok(Some(records))
    }

    /// Records the decode attention with RoPE and the cache write folded in
    /// (`Ops::decode_rope`), with `records` also writing its output as int8 records.
    fn record_decode_rope(&mut self, a: &LastAttention, records: Option<&XRecords>) -> Result<()> {
        let key = key!(a.key, records.is_some());
        self.record(key, |s| {
            let Some(Some(c)) = s.kvs.get(a.kv.0 as usize) else {
                return Err(bad(format!("unknown KV cache {}", a.kv.0)));
            };
            let rotary = s.rotary(&a.rope);
            let sinks = a
                .sinks
                .map(|(wid, off)| Region::new(s.vector_buf(wid), off, 0));
            let [q, k, v] = a.qkv;
            Ok(vec![s.ops.decode_rope(
                &a.shape,
                &c.cache,
                [&s.buf(q)?.buf, &s.buf(k)?.buf, &s.buf(v)?.buf],
                &rotary,
                Region::new(&s.buf(a.out)?.buf, 0, 0),
                s.src(Src::Scratch("attention"))?,
                s.src(Src::Scratch("counters"))?,
                sinks,
                &s.step,
                records,
            )?])
        })
    }

    /// The router's decode product over the input of the deferred norm `d` (whose output is
    /// `x`) into the "moe logits" scratch, writing `x` on the way.
    fn router_writing_norm(&mut self, x: BufId, router: &Linear, d: Deferred) -> Result<()> {
        let bias = match &router.bias {
            Some(b) => Some(self.vector(b)?),
            None => None,
        };
        let key = key!("moe router", x, router, d.x, d.weight, d.eps);
        let sel = self.sel(&router.w);
        self.record(key, |s| {
            let xr = Region::new(&s.buf(d.x)?.buf, 0, router.in_dim() as u32);
            let yr = Region::new(
                s.src(Src::Scratch("moe logits"))?,
                0,
                router.out_dim() as u32,
            );
            let bias = bias.map(|(wid, off)| Bias {
                buf: s.vector_buf(wid),
                offset: off,
                expert_stride: 0,
            });
            let folds = Folds {
                norm: Some(s.norm_fold(&d)),
                normed: Some(&s.buf(x)?.buf),
                ..Folds::default()
            };
            let w = s.weight(router.w.weight)?;
            Ok(s.ops.matvec(w, &sel, xr, yr, 1, bias, None, folds)?)
        })
    }

    /// Records one gated FFN of `n` rows of x into the "moe expert out" scratch.
    fn ffn(
        &mut self,
        x: Src,
        f: &crate::backend::GatedFfn,
        act: Eltwise,
        n: usize,
        width: usize,
    ) -> Result<()> {
        self.linear(x, &f.gate, Src::Scratch("moe gate"), n)?;
        self.linear(x, &f.up, Src::Scratch("moe up"), n)?;
        self.scratch("moe act", (n * width * 4) as u64);
        let key = key!("ffn act", n, width, act);
        self.record(key, |s| {
            let w = width as u32;
            let (g, u) = (
                s.src(Src::Scratch("moe gate"))?,
                s.src(Src::Scratch("moe up"))?,
            );
            let a = s.src(Src::Scratch("moe act"))?;
            Ok(vec![s.ops.eltwise(
                act,
                Region::new(g, 0, w),
                Some(Region::new(u, 0, w)),
                Region::new(a, 0, w),
                w,
                n as u32,
            )?])
        })?;
        self.linear(
            Src::Scratch("moe act"),
            &f.down,
            Src::Scratch("moe expert out"),
            n,
        )
    }

    /// Records out[:len] = 0.
    fn zero(&mut self, out: BufId, len: usize) -> Result<()> {
        self.scratch("zeros", (len * 4) as u64);
        self.record(key!("zero", out, len), |s| {
            Ok(vec![s.ops.eltwise(
                Eltwise::Copy,
                Region::new(s.src(Src::Scratch("zeros"))?, 0, 0),
                None,
                Region::new(&s.buf(out)?.buf, 0, 0),
                len as u32,
                1,
            )?])
        })
    }
}
