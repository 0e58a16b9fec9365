//! Selection over rows of logits: `argmax` and `top_k` (select.wgsl), and sampling from the
//! top-k candidates (sample.wgsl).

use super::Ops;
use crate::gpu::error::{GpuError, GpuResult};
use crate::gpu::pipelines::Dispatch;
use crate::gpu::shader::{defines, Defines};
use bytemuck::{Pod, Zeroable};

/// Workgroup size and block lists merged per thread of select.wgsl (WG, LISTS).
const SELECT_WG: u32 = 256;
const SELECT_LISTS: u32 = 4;

/// The most candidates select.wgsl's sorted top-k takes (SORTED: half its sort's SORT entries,
/// so that every window still brings new ones); more go one pick at a time.
const SORTED_MOST: u32 = 1024;

/// The defines of select.wgsl's top-k of `k` candidates.
pub(super) fn top_k_defines(k: u32) -> Defines {
    if k <= SORTED_MOST {
        defines(&[("TOPK", String::new()), ("SORTED", String::new())])
    } else {
        defines(&[("TOPK", String::new())])
    }
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

impl Ops {
    /// The index of the largest value of each of `rows` rows of n values → ids[row] (ties:
    /// the lowest index). `scratch` holds `select_scratch_len(n, rows, 1)` words, `counters`
    /// one zero u32 per row (left zero). With `advance` (the step, one row) the kernel also
    /// moves the step on to the next token's (`Step::advanced`).
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
        advance: Option<&wgpu::Buffer>,
    ) -> GpuResult<Dispatch> {
        let params = Self::select_params(n, rows, 1, offset);
        let ub = self.ctx.params("argmax params", &params);
        let mut entries = vec![(0, &ub), (1, logits), (2, ids), (4, scratch), (5, counters)];
        let mut d = Defines::new();
        if let Some(step) = advance {
            if rows != 1 {
                return Err(GpuError::Validation(format!(
                    "argmax moving the step on over {rows} rows"
                )));
            }
            d.insert("ADVANCE".into(), String::new());
            entries.push((6, step));
        }
        let pipe = self.pipeline("select.wgsl", &d, "main")?;
        Ok(self.dispatch(pipe, &entries, [params.blocks, rows, 1]))
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
        let pipe = self.pipeline("select.wgsl", &top_k_defines(k), "main")?;
        let params = Self::select_params(n, rows, k, offset);
        let ub = self.ctx.params("top-k params", &params);
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

/// The per-step settings of sample.wgsl, written by the host before each sampled step.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
pub struct SampleParams {
    pub n: u32,
    pub offset: u32,
    pub k: u32,
    pub top_k: u32,
    pub temperature: f32,
    pub top_p: f32,
    pub min_p: f32,
    pub u: f32,
    pub penalty: f32,
    pub penalized: u32,
    pub with_chosen: u32,
    pub _pad: u32,
}

impl Ops {
    /// The repetition penalty on row of logits that `params` names, for the `pen_ids` it lists
    /// and, where it says so, the token in `chosen`.
    pub fn sample_penalize(
        &self,
        params: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        chosen: &wgpu::Buffer,
        pen_ids: &wgpu::Buffer,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("sample.wgsl", &Defines::new(), "penalize")?;
        Ok(self.dispatch(
            pipe,
            &[(0, params), (1, logits), (2, chosen), (3, pen_ids)],
            [1, 1, 1],
        ))
    }

    /// A draw from the top-k candidates (`top_k` wrote them) as `params` says → chosen[0],
    /// moving `step` on to the next token's (`Step::advanced`).
    pub fn sample_pick(
        &self,
        params: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        chosen: &wgpu::Buffer,
        cand_ids: &wgpu::Buffer,
        cand_vals: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> GpuResult<Dispatch> {
        let pipe = self.pipeline("sample.wgsl", &Defines::new(), "pick")?;
        Ok(self.dispatch(
            pipe,
            &[
                (0, params),
                (1, logits),
                (2, chosen),
                (4, cand_ids),
                (5, cand_vals),
                (6, step),
            ],
            [1, 1, 1],
        ))
    }
}
