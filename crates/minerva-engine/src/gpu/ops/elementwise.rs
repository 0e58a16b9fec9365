//! Element-wise kernels: the embedding lookup, RMSNorm (with the residual add), RoPE in place
//! and the ops of `elementwise.wgsl` (`Eltwise`).

use super::{grid2, Ops, Region};
use crate::gpu::error::GpuResult;
use crate::gpu::pipelines::Dispatch;
use crate::gpu::shader::{defines, Defines};
use crate::gpu::weights::GpuWeight;
use bytemuck::{Pod, Zeroable};

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

impl Ops {
    pub(super) fn eltwise_defines(op: Eltwise) -> Defines {
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
            let ub = self.ctx.params("embed params", &params);
            let mut entries = part.entries();
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
        let ub = self.ctx.params("norm params", &params);
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
        let ub = self.ctx.params("rope params", &params);
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
        let ub = self.ctx.params("eltwise params", &params);
        let mut entries = vec![(0, a.buf), (2, y.buf), (3, &ub)];
        if !one_input {
            entries.push((1, bb.buf));
        }
        let (gx, gy) = grid2((n * rows).div_ceil(256));
        Ok(self.dispatch(pipe, &entries, [gx, gy, 1]))
    }
}
