//! The backend's buffers: activations, KV caches, the f32 copies of vector weights, named
//! scratch buffers, and the lookups that encoding and the planner's facts go through.

use super::backend::GpuBackend;
use super::fusion::Facts;
use super::graph::{stacked, MoeRef};
use super::ops::{moe_max_tiles, AttnShape, KvCache, Rotary};
use super::weights::GpuWeight;
use crate::backend::{
    AttnParams, BufId, KvId, Linear, MatView, MoeBlock, RopeParams, VecRef, WeightId,
};
use crate::error::{EngineError, Result};
use minerva_formats::{DType, RopeStyle};

fn bad(what: String) -> EngineError {
    EngineError::Backend(what)
}

pub(super) struct Buf {
    pub buf: wgpu::Buffer,
    pub rows: usize,
    pub cols: usize,
    /// Read only within the step that writes it (`Backend::alloc_step_local`).
    pub step_local: bool,
}

pub(super) struct Kv {
    pub cache: KvCache,
    pub cache_len: usize,
}

/// Where an operand lives: a transformer buffer, a named scratch buffer, or the chosen token.
#[derive(Debug, Clone, Copy)]
pub(super) enum Src {
    Buf(BufId),
    Scratch(&'static str),
    /// The last greedy choice.
    Chosen,
}

impl GpuBackend {
    /// An activation buffer of `rows × cols` f32 values (`Backend::alloc`), `step_local` as
    /// `Backend::alloc_step_local` makes it.
    pub(super) fn alloc_buf(
        &mut self,
        rows: usize,
        cols: usize,
        step_local: bool,
    ) -> Result<BufId> {
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
            step_local,
        });
        self.ctx.check()?;
        Ok(BufId(self.bufs.len() as u32 - 1))
    }

    pub(super) fn buf(&self, id: BufId) -> Result<&Buf> {
        self.bufs
            .get(id.0 as usize)
            .ok_or_else(|| bad(format!("unknown buffer handle {}", id.0)))
    }

    pub(super) fn weight(&self, id: WeightId) -> Result<&GpuWeight> {
        self.weights
            .get(id.0 as usize)
            .ok_or_else(|| bad(format!("unknown weight handle {}", id.0)))
    }

    pub(super) fn check_rows(
        &self,
        id: BufId,
        n: usize,
        cols: Option<usize>,
        op: &str,
    ) -> Result<()> {
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

    /// Makes sure the f32 buffer of a vector weight exists (decoding it once on the GPU), so
    /// that encoding finds it.
    pub(super) fn vector(&mut self, v: &VecRef) -> Result<()> {
        let w = self.weight(v.weight)?;
        if v.row >= w.rows.max(1) || v.len > w.cols {
            return Err(bad(format!("vector {v:?} of '{}' {:?}", w.name, w.shape)));
        }
        let plain = w.dtype == DType::F32 && w.parts.len() == 1;
        if plain || self.vectors.contains_key(&v.weight.0) {
            return Ok(());
        }
        // Decoded once on the GPU by the embedding kernel over every row.
        let ids: Vec<u32> = (0..w.rows as u32).collect();
        let ib = self.ctx.storage_with("vector rows", &ids);
        let out = self.ctx.storage(&w.name, (w.rows * w.cols * 4) as u64);
        let d = self.ops.embed(w, &ib, &out, w.rows as u32, 1.0)?;
        self.flush()?;
        self.ctx.submit(&d.iter().collect::<Vec<_>>())?;
        self.vectors.insert(v.weight.0, out);
        Ok(())
    }

    pub(super) fn vector_opt(&mut self, v: &Option<VecRef>) -> Result<()> {
        match v {
            Some(v) => self.vector(v),
            None => Ok(()),
        }
    }

    /// The f32 buffer holding a vector weight (see `vector`), and the element offset of `v`.
    pub(super) fn vector_at(&self, v: &VecRef) -> Result<(u32, u32)> {
        let w = self.weight(v.weight)?;
        Ok((v.weight.0, (v.row * w.cols) as u32))
    }

    pub(super) fn vector_buf(&self, weight: u32) -> &wgpu::Buffer {
        match self.vectors.get(&weight) {
            Some(b) => b,
            None => &self.weights[weight as usize].parts[0].buffers[0],
        }
    }

    /// The rotation of a RoPE, for the kernels that fold it in.
    pub(super) fn rotary(&self, r: &RopeParams) -> Result<Rotary<'_>> {
        let (fid, _) = self.vector_at(&super::encode::freqs(r))?;
        Ok(Rotary {
            freq: self.vector_buf(fid),
            rot_dim: r.dim as u32,
            halves: r.style == RopeStyle::Halves,
            mscale: r.attention_factor,
        })
    }

    pub(super) fn cache(&self, kv: KvId) -> Result<&KvCache> {
        match self.kvs.get(kv.0 as usize) {
            Some(Some(c)) => Ok(&c.cache),
            _ => Err(bad(format!("unknown KV cache {}", kv.0))),
        }
    }

    pub(super) fn attn_shape(&self, kv: KvId, p: &AttnParams) -> Result<AttnShape> {
        let cache_len = match self.kvs.get(kv.0 as usize) {
            Some(Some(c)) => c.cache_len,
            _ => return Err(bad(format!("unknown KV cache {}", kv.0))),
        };
        Ok(AttnShape {
            heads: p.n_heads as u32,
            kv_heads: p.n_kv_heads as u32,
            head_dim: p.head_dim as u32,
            cache_len: cache_len as u32,
            window: p.window.unwrap_or(0) as u32,
            scale: p.scale,
        })
    }

    /// A scratch buffer of at least `bytes`; growing it submits the graph recorded so far and
    /// drops the encoded plans (they bind the old buffer).
    pub(super) fn scratch(&mut self, name: &'static str, bytes: u64) {
        self.scratch_as(name, bytes, false);
    }

    /// `scratch`, of a buffer that kernels may also bind as a uniform (`uniform`).
    fn scratch_as(&mut self, name: &'static str, bytes: u64, uniform: bool) {
        let small = self.scratch.get(name).is_none_or(|b| b.size() < bytes);
        if small {
            let _ = self.flush();
            self.forget_dispatches();
            let bytes = super::context::scratch_size(bytes);
            let b = if uniform {
                self.ctx.storage_uniform(name, bytes)
            } else {
                self.ctx.storage(name, bytes)
            };
            self.scratch.insert(name, b);
        }
    }

    pub(super) fn src(&self, s: Src) -> Result<&wgpu::Buffer> {
        match s {
            Src::Buf(id) => Ok(&self.buf(id)?.buf),
            Src::Scratch(name) => self
                .scratch
                .get(name)
                .ok_or_else(|| bad(format!("scratch {name} missing"))),
            Src::Chosen => Ok(&self.chosen),
        }
    }

    /// The scratch buffers and vectors a MoE block's kernels bind.
    pub(super) fn prepare_moe(&mut self, x: BufId, block: &MoeBlock, n: usize) -> Result<()> {
        let hidden = self.buf(x)?.cols;
        let experts = block.experts.len();
        let k = block.routing.top_k.min(experts);
        let width = block.experts[0].gate.out_dim();
        self.vector_opt(&block.router.bias)?;
        self.scratch("moe logits", (n * experts * 4) as u64);
        self.scratch("moe ids", (n * k * 4) as u64);
        self.scratch("moe weights", (n * k * 4) as u64);
        let mut act = 0;
        let mut out_rows = n;
        if stacked(block) {
            let items = n * k;
            act = items * width;
            out_rows = items;
            self.scratch("moe gate", (items * width * 4) as u64);
            self.scratch("moe up", (items * width * 4) as u64);
            if super::ops::moe_grouped(items, experts) {
                self.scratch("moe order", (items * 4) as u64);
                let tiles = moe_max_tiles(items as u32, experts as u32);
                // Also bound as a uniform list by the matrix-core expert product.
                let bytes = (tiles as u64 * 16).max(super::ops::MOE_COOP_TILES as u64 * 16);
                self.scratch_as("moe tiles", bytes, true);
            }
            let e0 = block.experts[0];
            for l in [&e0.gate, &e0.up, &e0.down] {
                self.vector_opt(&l.bias)?;
            }
        } else {
            act = act.max(n * width);
            self.scratch("moe dense", (n * experts * 4) as u64);
            self.scratch("moe gate", (n * width * 4) as u64);
            self.scratch("moe up", (n * width * 4) as u64);
            self.scratch("zeros", (n * hidden * 4) as u64);
            for f in &block.experts {
                for l in [&f.gate, &f.up, &f.down] {
                    self.vector_opt(&l.bias)?;
                }
            }
        }
        if let Some((shared, gate)) = &block.shared {
            let sw = shared.gate.out_dim();
            act = act.max(n * sw);
            self.scratch("moe gate", (n * sw.max(width) * 4) as u64);
            self.scratch("moe up", (n * sw.max(width) * 4) as u64);
            self.scratch("moe shared gate", (n * 4) as u64);
            for l in [&shared.gate, &shared.up, &shared.down, gate] {
                self.vector_opt(&l.bias)?;
            }
        }
        self.scratch("moe act", (act * 4) as u64);
        self.scratch("moe expert out", (out_rows * hidden * 4) as u64);
        Ok(())
    }
    pub(super) fn weight_bytes(&self, w: WeightId) -> (u64, u64) {
        self.weight(w).map_or((0, 1), |w| {
            let bytes = w
                .parts
                .iter()
                .flat_map(|p| &p.buffers)
                .map(|b| b.size())
                .sum();
            (bytes, w.shape.iter().product::<usize>().max(1) as u64)
        })
    }

    /// The stored bytes of the matrix a view reads.
    pub(super) fn view_bytes(&self, lin: &Linear) -> u64 {
        let (bytes, values) = self.weight_bytes(lin.w.weight);
        bytes * (lin.w.out_dim * lin.w.in_dim) as u64 / values
    }

    pub(super) fn row_bytes(&self, w: WeightId) -> u64 {
        let (bytes, _) = self.weight_bytes(w);
        bytes / self.weight(w).map_or(1, |w| w.rows.max(1)) as u64
    }
}

/// What the fusion rules ask about this backend's buffers, weights and adapter.
impl Facts for GpuBackend {
    fn cols(&self, b: BufId) -> usize {
        self.buf(b).map_or(0, |b| b.cols)
    }

    fn step_local(&self, b: BufId) -> bool {
        self.buf(b).is_ok_and(|b| b.step_local)
    }

    fn rows(&self, w: WeightId) -> usize {
        self.weight(w).map_or(0, |w| w.rows)
    }

    fn whole(&self, lin: &Linear) -> bool {
        let m = &lin.w;
        self.weight(m.weight).is_ok_and(|w| {
            w.parts.len() == 1
                && w.shape.len() == 2
                && *m == MatView::plain(m.weight, w.rows, w.cols)
        })
    }

    fn takes_records(&self, w: WeightId) -> bool {
        self.weight(w).is_ok_and(|w| self.ops.takes_records(w))
    }

    fn glu_int8(&self, gate: WeightId, up: WeightId, norm: bool) -> bool {
        match (self.weight(gate), self.weight(up)) {
            (Ok(g), Ok(u)) => self.ops.glu_takes_int8(&[g, u], norm),
            _ => false,
        }
    }

    fn glu_records(&self, gate: WeightId, up: WeightId, norm: bool) -> bool {
        match (self.weight(gate), self.weight(up)) {
            (Ok(g), Ok(u)) => self.ops.glu_writes_records(&[g, u], norm),
            _ => false,
        }
    }

    fn folds_rope(&self, p: &AttnParams, kv: KvId, rot_dim: usize) -> bool {
        self.attn_shape(kv, p)
            .is_ok_and(|s| self.ops.folds_rope(&s, rot_dim as u32, p.n as u32))
    }

    fn attention_records(&self, p: &AttnParams, kv: KvId) -> bool {
        self.attn_shape(kv, p)
            .is_ok_and(|s| self.ops.writes_records(&s))
    }

    fn combine_records(&self, cols: usize) -> bool {
        self.ops.combine_records(cols as u32, 1).is_some()
    }

    fn moe(&self, r: MoeRef) -> &MoeBlock {
        self.moes.get(r)
    }
}
