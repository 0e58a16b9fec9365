//! Matrix-core products split along their inputs: a prompt of a few blocks of tokens gives the
//! product kernel (one subgroup per block of outputs and tokens, walking every input) too few
//! subgroups to keep the GPU busy, so each block's inputs are shared out among several, whose
//! partial sums `coop_splits.wgsl` adds (with the bias) into y. The same path runs a last block
//! of tokens that is not whole on matrix cores (its partial sums past the step's tokens are
//! never added), where the whole-block path leaves those tokens to the f32 tiles.

use super::matmul::{coop_defines, CoopParams, COOP_BLOCK};
use super::{Bias, Ops, Region};
use crate::gpu::error::GpuResult;
use crate::gpu::pipelines::Dispatch;
use crate::gpu::shader::{defines, Defines};
use bytemuck::{Pod, Zeroable};

/// Subgroups a product should have in flight: splits are added up to it (an H200 has 132
/// multiprocessors; at 512 tokens tinyllama's gate/up product has 1,408 and stays whole, its
/// 2,048-output products split in two). 2,048 measured the same within noise (benches/GPU.md,
/// entry 78).
pub(super) const SPLIT_TARGET: u32 = 1024;
/// Most splits of one product, and the fewest inputs a split takes.
const MAX_SPLITS: u32 = 8;
pub(super) const MIN_SPLIT_K: u32 = 256;

/// Inputs of one step of `matmul_coop.wgsl` (a matrix's 16).
pub(super) const COOP_STEP: u32 = 16;

/// `k` inputs cut into about `wanted` shares for workgroup z of a matrix-core product whose
/// steps take `step` inputs (`COOP_STEP`, `STAGED_STEP`): the inputs of each share (a multiple
/// of `step`) and how many shares that makes.
pub(super) fn input_shares(k: u32, wanted: u32, step: u32) -> (u32, u32) {
    let k_split = k.div_ceil(wanted.max(1)).next_multiple_of(step);
    (k_split, k.div_ceil(k_split))
}

/// One split product: `rows` outputs of `k` halves of input, over `tokens` tokens.
pub(super) struct SplitAt {
    pub rows: u32,
    pub k: u32,
    pub tokens: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SplitsParams {
    rows: u32,
    tokens: u32,
    splits: u32,
    split_stride: u32,
    y_offset: u32,
    y_stride: u32,
    bias_offset: u32,
    _pad: u32,
}

impl Ops {
    /// Splits for a product of `rows` outputs and `k` inputs over `tokens` tokens: enough for
    /// `SPLIT_TARGET` subgroups, within `MAX_SPLITS` and `MIN_SPLIT_K`, and partial sums that
    /// fit a binding.
    fn splits(&self, rows: u32, k: u32, tokens: u32) -> u32 {
        let padded = tokens.div_ceil(COOP_BLOCK) * COOP_BLOCK;
        let (_, per_group) = coop_defines(rows, false);
        let groups = (padded / COOP_BLOCK) * (rows / per_group);
        let mut s = (SPLIT_TARGET / groups.max(1)).clamp(1, MAX_SPLITS);
        s = s.min((k / MIN_SPLIT_K).max(1));
        let bytes = |s: u32| s as u64 * padded as u64 * rows as u64 * 4;
        while s > 1 && bytes(s) > self.ctx.caps.max_binding {
            s -= 1;
        }
        s
    }

    /// Whether a product of `chunk` outputs per chunk and `k` inputs over `tokens` tokens runs
    /// split (`Some`, with the splits of its largest chunk): it has fewer subgroups than
    /// `SPLIT_TARGET`, or a last block of tokens that is not whole, and its partial sums fit.
    pub(super) fn coop_split(&self, tokens: u32, chunk: u32, k: u32) -> Option<u32> {
        let s = self.splits(chunk, k, tokens);
        let padded = tokens.div_ceil(COOP_BLOCK) * COOP_BLOCK;
        let fits = padded as u64 * chunk as u64 * 4 <= self.ctx.caps.max_binding;
        let wanted = s > 1 || !tokens.is_multiple_of(COOP_BLOCK);
        (fits && wanted).then_some(s)
    }

    /// The split product of the f16 weight rows in `w16` and the f16 inputs in `x16` (every
    /// block of tokens), its partial sums added into `y` with `bias`.
    pub(super) fn coop_split_product(
        &self,
        w16: &wgpu::Buffer,
        x16: &wgpu::Buffer,
        y: Region,
        bias: Option<Bias>,
        at: SplitAt,
    ) -> GpuResult<Vec<Dispatch>> {
        let SplitAt { rows, k, tokens } = at;
        let padded = tokens.div_ceil(COOP_BLOCK) * COOP_BLOCK;
        let wanted = self.splits(rows, k, tokens);
        let (k_split, splits) = input_shares(k, wanted, COOP_STEP);
        let split_stride = padded * rows;
        let partials =
            self.scratch_buffer("coop partials", splits as u64 * split_stride as u64 * 4);
        let (d, per_group) = coop_defines(rows, false);
        let pipe = self.pipeline("matmul_coop.wgsl", &d, "main")?;
        let params = CoopParams {
            rows,
            k,
            y_offset: 0,
            y_stride: rows,
            first_expert: 0,
            experts: 0,
            k_split,
            split_stride,
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.params("coop split params", &params);
        let grid = [padded / COOP_BLOCK, rows / per_group, splits];
        let product = self.dispatch(pipe, &[(0, w16), (1, x16), (2, &partials), (3, &ub)], grid);
        let sum_defs = match bias {
            Some(_) => defines(&[("BIAS", String::new())]),
            None => Defines::new(),
        };
        let sum = self.pipeline("coop_splits.wgsl", &sum_defs, "main")?;
        let sp = SplitsParams {
            rows,
            tokens,
            splits,
            split_stride,
            y_offset: y.offset,
            y_stride: y.stride,
            bias_offset: bias.map_or(0, |b| b.offset),
            _pad: 0,
        };
        let sub = self.ctx.params("coop splits params", &sp);
        let mut entries = vec![(0, &partials), (1, y.buf), (2, &sub)];
        if let Some(b) = &bias {
            entries.push((3, b.buf));
        }
        let sum = self.dispatch(sum, &entries, [rows.div_ceil(64), tokens, 1]);
        Ok(vec![product, sum])
    }
}
