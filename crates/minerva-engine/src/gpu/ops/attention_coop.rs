//! Prefill attention on matrix cores (`attention_coop.wgsl`, `attention_softmax.wgsl`): the
//! step's queries converted to f16, then per group of heads the scores of every block of keys
//! and queries under the diagonal, their softmax as f16 weights, and the weights times the
//! values in partial sums over ranges of keys; then the partial sums added into the output.

use super::attention::{AttnShape, KvCache};
use super::matmul::COOP_BLOCK;
use super::{Ops, Region};
use crate::gpu::error::GpuResult;
use crate::gpu::pipelines::Dispatch;
use crate::gpu::shader::{defines, Defines};
use bytemuck::{Pod, Zeroable};

/// Scores (f32) and weights (f16) that one group of heads may hold: the heads of a step run in
/// groups of as many as fit, so that the scratch stays bounded for long caches.
pub const SCORES_BYTES: u64 = 64 << 20;

/// The values kernel's partial sums per block of queries (KEY_SPLITS in the kernels).
const KEY_SPLITS: u32 = 4;

/// Query rows per workgroup of the softmax (one subgroup each; ROWS_PER_GROUP there).
const SOFTMAX_ROWS: u32 = 8;

/// Positions a KV cache holds past its length, which the last blocks of keys the matrix-core
/// attention reads may reach (their scores are masked and their weights zero).
pub const CACHE_SLACK: u32 = 32;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CoopAttnParams {
    heads: u32,
    group: u32,
    head_dim: u32,
    kv_row: u32,
    q_row: u32,
    row_len: u32,
    rows: u32,
    head0: u32,
    scale: f32,
    sinks_offset: u32,
    out_offset: u32,
    _pad: u32,
}

/// The scratch layout of one step: query rows per head, keys per row, heads per group.
struct Layout {
    rows: u32,
    row_len: u32,
    heads_per_group: u32,
}

impl Layout {
    /// The layout of `tokens` queries that see at most `keys` keys.
    fn new(shape: &AttnShape, tokens: u32, keys: u32, scores_bytes: u64) -> Layout {
        let rows = tokens.div_ceil(COOP_BLOCK) * COOP_BLOCK;
        let keys = keys.clamp(tokens, shape.cache_len.max(tokens));
        let row_len = keys.div_ceil(COOP_BLOCK) * COOP_BLOCK + CACHE_SLACK;
        let per_head = (rows as u64 * row_len as u64 * 6).max(1);
        let heads_per_group = (scores_bytes / per_head).clamp(1, shape.heads.max(1) as u64) as u32;
        Layout {
            rows,
            row_len,
            heads_per_group,
        }
    }
}

impl Ops {
    /// Whether `tokens` queries of `shape` over `cache`, seeing at most `keys` keys, run on
    /// matrix cores: an adapter with them, an f16 cache, no window (the cache never wraps), a
    /// prompt of at least a block of queries, head_dim a multiple of 64 (the values kernel's
    /// blocks), and grids that fit.
    pub fn attention_on_matrix_cores(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        tokens: u32,
        keys: u32,
    ) -> bool {
        let kind = self.ctx.caps.matrix_cores
            && cache.f16
            && shape.kv_heads > 0
            && shape.heads.is_multiple_of(shape.kv_heads)
            && shape.heads > 0
            && shape.window == 0
            && tokens >= COOP_BLOCK
            && shape.head_dim.is_multiple_of(64);
        if !kind {
            return false;
        }
        let layout = Layout::new(shape, tokens, keys, self.scores_bytes);
        let scores = layout.heads_per_group as u64 * layout.rows as u64 * layout.row_len as u64 * 4;
        let values = layout.rows as u64 * shape.heads as u64 * shape.head_dim as u64 * 4;
        layout.row_len / COOP_BLOCK <= 65535
            && layout.rows <= 65535
            && scores <= self.ctx.caps.max_binding
            && KEY_SPLITS as u64 * values <= self.ctx.caps.max_binding
    }

    /// The attention of `tokens` queries (q: [tokens, heads, head_dim] from element q_offset)
    /// into `out` from out_offset, on matrix cores (see `attention_on_matrix_cores`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention_coop(
        &self,
        shape: &AttnShape,
        cache: &KvCache,
        q: &wgpu::Buffer,
        q_offset: u32,
        out: &wgpu::Buffer,
        out_offset: u32,
        sinks: Option<Region>,
        step: &wgpu::Buffer,
        tokens: u32,
        keys: u32,
    ) -> GpuResult<Vec<Dispatch>> {
        let layout = Layout::new(shape, tokens, keys, self.scores_bytes);
        let q_row = shape.heads * shape.head_dim;
        let group_cells =
            layout.heads_per_group as u64 * layout.rows as u64 * layout.row_len as u64;
        let q16 = self.scratch_buffer("attention queries", layout.rows as u64 * q_row as u64 * 2);
        let scores = self.scratch_buffer("attention scores", group_cells * 4);
        let weights = self.scratch_buffer("attention weights", group_cells * 2);
        let o = self.scratch_buffer(
            "attention values",
            KEY_SPLITS as u64 * layout.rows as u64 * q_row as u64 * 4,
        );
        let mut d =
            vec![self.coop_inputs(Region::new(q, q_offset, q_row), &q16, q_row, q_row, tokens)?];
        let plain = Defines::new();
        let scores_pipe = self.pipeline("attention_coop.wgsl", &plain, "scores")?;
        let values_pipe = self.pipeline("attention_coop.wgsl", &plain, "values")?;
        let softmax_defs = match sinks {
            Some(_) => defines(&[("SINKS", String::new())]),
            None => Defines::new(),
        };
        let softmax_pipe = self.pipeline("attention_softmax.wgsl", &softmax_defs, "main")?;
        let gather_pipe = self.pipeline("attention_softmax.wgsl", &plain, "gather")?;
        let base = CoopAttnParams {
            heads: shape.heads,
            group: shape.heads / shape.kv_heads,
            head_dim: shape.head_dim,
            kv_row: shape.kv_heads * shape.head_dim,
            q_row,
            row_len: layout.row_len,
            rows: layout.rows,
            head0: 0,
            scale: shape.scale,
            sinks_offset: sinks.map(|r| r.offset).unwrap_or(0),
            out_offset,
            _pad: 0,
        };
        let mut head0 = 0;
        while head0 < shape.heads {
            let n = layout.heads_per_group.min(shape.heads - head0);
            let params = CoopAttnParams { head0, ..base };
            let ub = self.ctx.params("coop attention params", &params);
            let blocks = layout.rows / COOP_BLOCK;
            d.push(self.dispatch(
                scores_pipe.clone(),
                &[(0, &ub), (1, step), (2, &cache.k), (3, &q16), (4, &scores)],
                [layout.row_len / COOP_BLOCK, blocks, n],
            ));
            let mut entries = vec![(0, &ub), (1, step), (4, &scores), (5, &weights)];
            if let Some(r) = &sinks {
                entries.push((7, r.buf));
            }
            d.push(self.dispatch(
                softmax_pipe.clone(),
                &entries,
                [layout.rows / SOFTMAX_ROWS, n, 1],
            ));
            d.push(self.dispatch(
                values_pipe.clone(),
                &[(0, &ub), (1, step), (2, &cache.v), (5, &weights), (6, &o)],
                [blocks, KEY_SPLITS, n * (shape.head_dim / 64)],
            ));
            head0 += n;
        }
        let ub = self.ctx.params("coop attention params", &base);
        d.push(self.dispatch(
            gather_pipe,
            &[(0, &ub), (1, step), (6, &o), (8, out)],
            [q_row.div_ceil(256), tokens, 1],
        ));
        Ok(d)
    }
}
