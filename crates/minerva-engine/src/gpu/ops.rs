//! The GPU ops: each builds the `Dispatch`es of one operation over given buffers (pipelines from
//! the cache, a small uniform of static parameters, the bind group). Built once, recorded into
//! every step's compute pass; values that change per step (position, token count) come from the
//! shared `Step` uniform.

use super::context::GpuContext;
use super::error::GpuResult;
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

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatvecParams {
    rows: u32,
    cols: u32,
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
    _pad: [u32; 3],
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
    _pad: u32,
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
    _pad: u32,
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

/// Keys per chunk of the split-K attention kernel (CHUNK in attention.wgsl).
pub const ATTN_CHUNK: u32 = 256;

/// The element-wise operations of elementwise.wgsl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eltwise {
    /// y += a
    Add,
    /// y = silu(a) · b
    SwiGlu,
    /// gpt-oss: y = (clamp(b, −7, 7) + 1) · g · σ(1.702 g), g = min(a, 7)
    GluOss,
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
    /// Chunks per (head, token) of the scratch buffer.
    pub fn chunks(&self) -> u32 {
        let keys = if self.window == 0 {
            self.cache_len
        } else {
            self.window.min(self.cache_len)
        };
        keys.div_ceil(ATTN_CHUNK).max(1)
    }

    /// f32 values of scratch needed for `tokens` queries.
    pub fn scratch_len(&self, tokens: u32) -> u64 {
        tokens as u64 * self.heads as u64 * self.chunks() as u64 * (self.head_dim as u64 + 2)
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
    pipelines: Pipelines,
}

const MATVEC_WG: u32 = 128;
const MATVEC_RPW: u32 = 2;

impl Ops {
    pub fn new(ctx: Arc<GpuContext>) -> Ops {
        Ops {
            ctx,
            pipelines: Pipelines::default(),
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
        Dispatch::new(&self.ctx, pipe, entries, groups)
    }

    /// y[z] = W · x[z] (+ bias) for `batch` vectors; with `experts`, W is [experts, rows, cols] and
    /// batch item z uses expert ids[z] (bias then [experts, rows]).
    pub fn matvec(
        &self,
        w: &GpuWeight,
        x: Region,
        y: Region,
        batch: u32,
        bias: Option<&wgpu::Buffer>,
        experts: Option<ExpertSel>,
    ) -> GpuResult<Vec<Dispatch>> {
        let tpr = MATVEC_WG / MATVEC_RPW;
        let caps = self.ctx.caps;
        let mut d = with(
            w.decoder(),
            &[
                ("WG", format!("{MATVEC_WG}u")),
                ("RPW", format!("{MATVEC_RPW}u")),
            ],
        );
        if caps.subgroups && caps.subgroup_max <= tpr && tpr % caps.subgroup_max == 0 {
            d.insert("SUBGROUPS".into(), String::new());
        }
        if experts.is_some() {
            d.insert("MOE".into(), String::new());
        }
        if bias.is_some() {
            d.insert("BIAS".into(), String::new());
        }
        let pipe = self.pipeline("matvec.wgsl", &d, "main")?;
        let n_experts = if experts.is_some() {
            w.shape.first().copied().unwrap_or(1).max(1)
        } else {
            1
        };
        let expert_rows = w.rows / n_experts;
        let mut out = Vec::new();
        for part in &w.parts {
            let rows = if experts.is_some() {
                expert_rows
            } else {
                part.rows
            };
            let groups = (rows as u32).div_ceil(MATVEC_RPW);
            let (gx, gy) = grid2(groups);
            let params = MatvecParams {
                rows: rows as u32,
                cols: w.cols as u32,
                x_offset: x.offset,
                x_stride: x.stride,
                x_div: experts.map(|e| e.x_div.max(1)).unwrap_or(1),
                y_offset: y.offset
                    + if experts.is_some() {
                        0
                    } else {
                        part.first_row as u32
                    },
                y_stride: y.stride,
                expert_first: (part.first_row / expert_rows.max(1)) as u32,
                expert_count: (part.rows / expert_rows.max(1)) as u32,
                groups_x: gx,
                bias_offset: if experts.is_some() {
                    0
                } else {
                    part.first_row as u32
                },
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
            if let Some(b) = bias {
                entries.push((7, b));
            }
            out.push(self.dispatch(pipe.clone(), &entries, [gx, gy, batch]));
        }
        Ok(out)
    }

    /// y[t] = W · x[t] (+ bias) for `tokens` rows of x: the tiled prefill kernel.
    pub fn matmul(
        &self,
        w: &GpuWeight,
        x: Region,
        y: Region,
        tokens: u32,
        bias: Option<&wgpu::Buffer>,
    ) -> GpuResult<Vec<Dispatch>> {
        let mut d = w.decoder();
        if bias.is_some() {
            d.insert("BIAS".into(), String::new());
        }
        let pipe = self.pipeline("matmul.wgsl", &d, "main")?;
        let mut out = Vec::new();
        for part in &w.parts {
            let params = MatmulParams {
                rows: part.rows as u32,
                cols: w.cols as u32,
                tokens,
                x_offset: x.offset,
                x_stride: x.stride,
                y_offset: y.offset + part.first_row as u32,
                y_stride: y.stride,
                bias_offset: part.first_row as u32,
            };
            let ub = self.ctx.uniform("matmul params", &params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = part
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| (i as u32, b))
                .collect();
            entries.extend([(3, x.buf), (4, y.buf), (5, &ub)]);
            if let Some(b) = bias {
                entries.push((7, b));
            }
            out.push(self.dispatch(
                pipe.clone(),
                &entries,
                [(part.rows as u32).div_ceil(64), tokens.div_ceil(32), 1],
            ));
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

    /// RMSNorm of `rows` rows of `n` values from x into y (in place when x is None), weight w [n].
    pub fn rms_norm(
        &self,
        x: Option<Region>,
        y: Region,
        w: &wgpu::Buffer,
        n: u32,
        rows: u32,
        eps: f32,
    ) -> GpuResult<Dispatch> {
        let d = if x.is_none() {
            defines(&[("INPLACE", String::new())])
        } else {
            Defines::new()
        };
        let pipe = self.pipeline("norm.wgsl", &d, "main")?;
        let params = NormParams {
            n,
            rows,
            x_offset: x.map(|r| r.offset).unwrap_or(0),
            y_offset: y.offset,
            eps,
            _pad: [0; 3],
        };
        let ub = self.ctx.uniform("norm params", &params);
        let mut entries = vec![(1, y.buf), (2, w), (3, &ub)];
        if let Some(x) = x {
            entries.push((0, x.buf));
        }
        let (gx, gy) = grid2(rows);
        Ok(self.dispatch(pipe, &entries, [gx, gy, 1]))
    }

    /// RoPE in place on [tokens, heads, head_dim] at `offset` of `v`; `freq` holds rot_dim / 2
    /// frequencies; positions start at the step's pos0.
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
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("rope.wgsl", &Defines::new(), "main")?;
        let params = RopeParams {
            tokens,
            heads,
            head_dim,
            rot_dim,
            halves: halves as u32,
            offset,
            mscale,
            _pad: 0,
        };
        let ub = self.ctx.uniform("rope params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, v), (1, freq), (2, &ub), (3, step)],
            [(rot_dim / 2).div_ceil(64), heads, tokens],
        ))
    }

    /// An element-wise op over `rows` rows of `n` values (b unused by Add).
    pub fn eltwise(
        &self,
        op: Eltwise,
        a: Region,
        b: Option<Region>,
        y: Region,
        n: u32,
        rows: u32,
    ) -> GpuResult<Dispatch> {
        let flag = match op {
            Eltwise::Add => "OP_ADD",
            Eltwise::SwiGlu => "OP_SWIGLU",
            Eltwise::GluOss => "OP_GLU_OSS",
        };
        let pipe = self.pipeline(
            "elementwise.wgsl",
            &defines(&[(flag, String::new())]),
            "main",
        )?;
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
        };
        let ub = self.ctx.uniform("eltwise params", &params);
        let mut entries = vec![(0, a.buf), (2, y.buf), (3, &ub)];
        if op != Eltwise::Add {
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
        src: &wgpu::Buffer,
        k_offset: u32,
        v_offset: u32,
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
            &self.attn_params(shape, 0, k_offset, v_offset, 0),
        );
        let per_token = shape.kv_heads * shape.head_dim / 2;
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (1, step), (2, &cache.k), (3, &cache.v), (4, src)],
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
        sinks: Option<&wgpu::Buffer>,
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
            &self.attn_params(shape, q_offset, 0, 0, out_offset),
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
            [shape.chunks(), shape.heads, tokens],
        );
        let mut entries = vec![(0, &ub), (1, step), (5, scratch), (6, out)];
        if let Some(s) = sinks {
            entries.push((7, s));
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

    fn attn_params(
        &self,
        s: &AttnShape,
        q_offset: u32,
        k_offset: u32,
        v_offset: u32,
        out_offset: u32,
    ) -> AttnParams {
        AttnParams {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            cache_len: s.cache_len,
            window: s.window,
            chunks: s.chunks(),
            q_offset,
            k_offset,
            v_offset,
            out_offset,
            scale: s.scale,
            _pad: 0,
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
            n: 0,
            logits_offset: offset,
            _pad: [0; 2],
        };
        let ub = self.ctx.uniform("route params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (1, logits), (2, ids), (3, weights)],
            [tokens.div_ceil(64), 1, 1],
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
            experts: 0,
            k,
            tokens,
            renorm: 0,
            n,
            logits_offset: 0,
            _pad: [0; 2],
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
