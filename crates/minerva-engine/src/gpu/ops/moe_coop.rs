//! Mixture-of-experts prefill on matrix cores: the items of each expert tile gathered as f16
//! rows (moe_coop.wgsl `gather`), multiplied on matrix cores tile by tile, and each item's row
//! moved back to its place with its expert's bias (`scatter`). Tiles in pairs go to
//! matmul_staged.wgsl, which reads the experts' weights as stored and decodes each step's rows
//! on their way to workgroup memory; other tiles to matmul_coop.wgsl, over f16 copies of a few
//! experts' matrices at a time (coop_weights.wgsl).

use super::coop_split::{input_shares, COOP_STEP, MIN_SPLIT_K};
use super::matmul::{
    coop_defines, coop_tokens, coop_weight_defines, CoopParams, CoopWeightsParams, COOP_BLOCK,
    COOP_DECODE_ROWS, COOP_WEIGHT_BYTES, STAGED_BLOCK, STAGED_STEP,
};
use super::{Bias, ExpertTiles, MatSel, Ops, Region, MATMUL_TOKENS};
use crate::gpu::error::GpuResult;
use crate::gpu::pipelines::Dispatch;
use crate::gpu::shader::{defines, Defines};
use crate::gpu::weights::GpuWeight;
use bytemuck::{Pod, Zeroable};

/// Most bytes of experts' f16 matrices one step of the matrix-core expert product decodes: 16 of
/// gpt-oss-20b's (16.6 MB each), so that each product dispatch has half of the tiles to run (4
/// experts at a time left the GPU half idle; 16 instead of 8 made its prompts 4–8 % faster,
/// benches/GPU.md entry 91); a 256 MiB scratch buffer while prompts run. Only tiles that are
/// not in pairs take this path: the staged kernel reads the experts' weights as stored.
pub const EXPERT_CHUNK_BYTES: u64 = 256 << 20;
/// Output values each thread of `moe_coop.wgsl`'s `scatter` moves (SCATTER_VALUES there): a
/// workgroup per 256 values of a slot rather than per 64.
const SCATTER_VALUES: u32 = 4;
/// Shares of its inputs an expert product is split into: each subgroup takes a share of every
/// row's inputs and the scatter adds the shares' partial sums, so that more subgroups wait on
/// the expert matrices' loads at once (they come from memory: each is read by one or two pairs
/// of tiles). gpt-oss-20b's prompts ran 11–15 % faster with 2 to 4 (benches/GPU.md, entry 95).
const EXPERT_SPLITS: u32 = 4;
/// ... for the staged kernel, whose workgroups of four subgroups keep more loads in flight
/// each: two shares made gpt-oss-20b's prompts 2–3 % faster than four (benches/GPU.md,
/// entries 114 and 115).
const STAGED_EXPERT_SPLITS: u32 = 2;
/// The most bytes all shares' partial sums take.
const EXPERT_SPLIT_BYTES: u64 = 256 << 20;

/// The shares of `k` inputs for partial sums of `split_bytes` each: `most` within `MIN_SPLIT_K`
/// inputs per share (as the dense products' splits), `EXPERT_SPLIT_BYTES` and one binding, at
/// least one.
fn expert_splits(most: u32, k: u32, split_bytes: u64, max_binding: u64) -> u32 {
    let room = EXPERT_SPLIT_BYTES.min(max_binding);
    let by_bytes = (room / split_bytes.max(1)).min(most as u64) as u32;
    most.min(k / MIN_SPLIT_K).min(by_bytes).max(1)
}

/// Most rows one dispatch decodes (its grid's y; wgpu's default limit per dimension).
const MAX_DECODED_ROWS: u64 = 65535;

/// Experts whose f16 matrices of `per_expert` bytes and `rows` rows one chunk decodes: as many
/// as `bytes` holds and one dispatch's grid allows, at least one.
fn experts_per_chunk(bytes: u64, per_expert: u64, rows: u32) -> usize {
    (bytes / per_expert.max(1))
        .min(MAX_DECODED_ROWS / rows.max(1) as u64)
        .max(1) as usize
}

/// Entries of the uniform tile list the matrix-core expert product reads (MOE_COOP_TILES in
/// matmul_coop.wgsl): 64 KiB, the smallest uniform binding limit adapters offer.
pub const MOE_COOP_TILES: u32 = 4096;

/// Adds the defines that make a matrix-core product (matmul_coop.wgsl, matmul_staged.wgsl) an
/// expert product over the tile list.
pub(super) fn add_expert_tiles(d: &mut Defines) {
    d.insert("EXPERTS".into(), String::new());
    d.insert("MOE_COOP_TILES".into(), format!("{MOE_COOP_TILES}u"));
}

/// Most tiles the gather and scatter kernels take: 32 slots each on a grid axis of ≤ 65,535.
const MOE_COOP_MAX_TILES: u32 = 65535 / MATMUL_TOKENS;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MoeCoopParams {
    cols: u32,
    stride: u32,
    x_offset: u32,
    x_stride: u32,
    x_div: u32,
    y_offset: u32,
    y_stride: u32,
    bias_offset: u32,
    bias_stride: u32,
    splits: u32,
    split_stride: u32,
    _pad: u32,
}

impl Ops {
    /// Whether `matmul_experts_coop` takes an expert product of `items` items in `max_tiles`
    /// tiles: matrix cores, whole output-major expert matrices of a multiple of 32 outputs whose
    /// f16 copy fits `COOP_WEIGHT_BYTES`, and enough items to fill a few tiles.
    pub fn experts_on_matrix_cores(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        items: u32,
        max_tiles: u32,
    ) -> bool {
        let rows = sel.out_dim as u32;
        let k = (sel.in_dim as u32).div_ceil(32) * 32;
        self.ctx.caps.matrix_cores
            && w.check_sel(sel).is_ok()
            && !sel.input_major
            && sel.matrix == 0
            && sel.offset == 0
            && sel.stride == 1
            && sel.out_dim == w.matrix_rows(false)
            && rows > 0
            && rows.is_multiple_of(COOP_BLOCK)
            && rows <= 65535
            && rows as u64 * k as u64 * 2 <= COOP_WEIGHT_BYTES.min(self.ctx.caps.max_binding)
            && items >= 2 * COOP_BLOCK
            && max_tiles <= MOE_COOP_MAX_TILES.min(MOE_COOP_TILES)
            && max_tiles as u64 * 32 * rows as u64 * 4 <= self.ctx.caps.max_binding
            && max_tiles as u64 * 32 * k as u64 * 2 <= self.ctx.caps.max_binding
    }

    /// `matmul_experts` on matrix cores (see `experts_on_matrix_cores`); `e.tiles` must be a
    /// buffer that may be bound as a uniform of `MOE_COOP_TILES` entries.
    pub fn matmul_experts_coop(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        bias: Option<Bias>,
        e: ExpertTiles,
    ) -> GpuResult<Vec<Dispatch>> {
        let rows = sel.out_dim as u32;
        let cols = sel.in_dim as u32;
        let k = cols.div_ceil(32) * 32;
        let slots = e.max_tiles * MATMUL_TOKENS;
        let x16 = self.scratch_buffer("coop expert inputs", slots as u64 * k as u64 * 2);
        let split_stride = slots * rows;
        // Tiles in pairs over whole blocks of 64 outputs go to the staged kernel, which reads
        // the experts' weights as stored; its shares of the inputs are whole steps of 32.
        let staged = self.ctx.caps.staged_matrices && e.pairs && rows.is_multiple_of(STAGED_BLOCK);
        let (most, step) = match staged {
            true => (STAGED_EXPERT_SPLITS, STAGED_STEP),
            false => (EXPERT_SPLITS, COOP_STEP),
        };
        let max_binding = self.ctx.caps.max_binding;
        let wanted = expert_splits(most, k, split_stride as u64 * 4, max_binding);
        let (k_split, splits) = input_shares(k, wanted, step);
        let products = self.scratch_buffer(
            "coop expert products",
            splits as u64 * split_stride as u64 * 4,
        );
        let mut out = Vec::new();
        // Each tile's items as f16 rows.
        let params = MoeCoopParams {
            cols,
            stride: k,
            x_offset: x.offset,
            x_stride: x.stride,
            x_div: e.x_div.max(1),
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.params("moe coop gather params", &params);
        let pipe = self.pipeline("moe_coop.wgsl", &Defines::new(), "gather")?;
        out.push(self.dispatch(
            pipe,
            &[(0, &ub), (1, e.order), (2, e.tiles), (3, x.buf), (4, &x16)],
            [(k / 4).div_ceil(64), slots, 1],
        ));
        let cp = CoopParams {
            rows,
            k,
            y_offset: 0,
            y_stride: rows,
            k_split,
            split_stride,
            cols,
            ..Zeroable::zeroed()
        };
        let product = ExpertProduct {
            x16: &x16,
            products: &products,
            params: cp,
            splits,
        };
        out.extend(match staged {
            true => self.experts_staged(w, sel, &e, &product)?,
            false => self.experts_decoded_first(w, sel, &e, &product)?,
        });
        // Each item's row in place, with its expert's bias.
        let params = MoeCoopParams {
            cols: rows,
            stride: rows,
            y_offset: y.offset,
            y_stride: y.stride,
            bias_offset: bias.map_or(0, |b| b.offset),
            bias_stride: bias.map_or(0, |b| b.expert_stride),
            splits,
            split_stride,
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.params("moe coop scatter params", &params);
        let d = match bias {
            Some(_) => defines(&[("BIAS", String::new())]),
            None => Defines::new(),
        };
        let pipe = self.pipeline("moe_coop.wgsl", &d, "scatter")?;
        let mut entries = vec![
            (0, &ub),
            (1, e.order),
            (2, e.tiles),
            (5, &products),
            (6, y.buf),
        ];
        if let Some(b) = &bias {
            entries.push((7, b.buf));
        }
        out.push(self.dispatch(
            pipe,
            &entries,
            [rows.div_ceil(64 * SCATTER_VALUES), slots, 1],
        ));
        Ok(out)
    }
}

/// What the product step of `matmul_experts_coop` reads and writes: the gathered inputs, the
/// partial sums, and the parameters every dispatch shares (its experts filled in per dispatch).
struct ExpertProduct<'a> {
    x16: &'a wgpu::Buffer,
    products: &'a wgpu::Buffer,
    params: CoopParams,
    splits: u32,
}

impl Ops {
    /// The product on the staged kernel (matmul_staged.wgsl with EXPERTS): one dispatch per
    /// weight part, whose experts' rows it decodes as it stages them.
    fn experts_staged(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        e: &ExpertTiles,
        p: &ExpertProduct,
    ) -> GpuResult<Vec<Dispatch>> {
        let rows = p.params.rows;
        let mrows = w.matrix_rows(false);
        let mut d = Defines::new();
        add_expert_tiles(&mut d);
        let decoder = [self.weight_defines(w, sel)];
        let pipe =
            self.pipelines
                .get_multi(&self.ctx, "matmul_staged.wgsl", &d, &decoder, "main")?;
        let mut out = Vec::new();
        for part in &w.parts {
            let params = CoopParams {
                first_expert: (part.first_row / mrows) as u32,
                experts: (part.rows / mrows) as u32,
                ..p.params
            };
            let ub = self.ctx.params("coop expert params", &params);
            let mut entries = part.entries();
            entries.extend([(3, p.x16), (4, p.products), (5, &ub), (6, e.tiles)]);
            let grid = [
                e.max_tiles * COOP_BLOCK / STAGED_BLOCK,
                rows / STAGED_BLOCK,
                p.splits,
            ];
            out.push(self.dispatch(pipe.clone(), &entries, grid));
        }
        Ok(out)
    }

    /// The product on matmul_coop.wgsl with EXPERTS: a few experts at a time, their matrices
    /// decoded to f16 (coop_weights.wgsl), then every tile of theirs.
    fn experts_decoded_first(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        e: &ExpertTiles,
        p: &ExpertProduct,
    ) -> GpuResult<Vec<Dispatch>> {
        let CoopParams { rows, k, cols, .. } = p.params;
        let per_expert = rows as u64 * k as u64 * 2;
        let most = self.expert_chunk_bytes.min(self.ctx.caps.max_binding);
        let chunk = experts_per_chunk(most, per_expert, rows);
        let w16 = self.scratch_buffer("coop weights", chunk as u64 * per_expert);
        let mrows = w.matrix_rows(false);
        let (mut d, per_group) = coop_defines(rows, false);
        // Tiles in pairs: a workgroup of 64 tokens per pair where it computes 64 rows.
        let per_tokens = match e.pairs {
            true => coop_tokens(&mut d, per_group, 2 * COOP_BLOCK),
            false => COOP_BLOCK,
        };
        add_expert_tiles(&mut d);
        let product = self.pipeline("matmul_coop.wgsl", &d, "main")?;
        let defs = coop_weight_defines(self.weight_defines(w, sel));
        let decode = self.pipeline("coop_weights.wgsl", &defs, "main")?;
        let lanes = cols.div_ceil(32) * 4;
        let mut out = Vec::new();
        for part in &w.parts {
            let first = part.first_row / mrows;
            let count = part.rows / mrows;
            let mut e0 = first;
            while e0 < first + count {
                let n = chunk.min(first + count - e0);
                let wp = CoopWeightsParams {
                    rows: n as u32 * rows,
                    cols,
                    stride: k,
                    first_out: 0,
                    row_base: ((e0 - first) * mrows) as u32,
                    row_stride: 1,
                    bias_offset: 0,
                    out_rows: n as u32 * rows,
                };
                let wub = self.ctx.params("coop expert weights params", &wp);
                let mut entries = part.entries();
                entries.extend([(3, &w16), (4, &wub)]);
                out.push(self.dispatch(
                    decode.clone(),
                    &entries,
                    [
                        lanes.div_ceil(64),
                        (n as u32 * rows).div_ceil(COOP_DECODE_ROWS),
                        1,
                    ],
                ));
                let params = CoopParams {
                    first_expert: e0 as u32,
                    experts: n as u32,
                    ..p.params
                };
                let cub = self.ctx.params("coop expert params", &params);
                out.push(self.dispatch(
                    product.clone(),
                    &[
                        (0, &w16),
                        (1, p.x16),
                        (2, p.products),
                        (3, &cub),
                        (5, e.tiles),
                    ],
                    [
                        e.max_tiles * COOP_BLOCK / per_tokens,
                        rows / per_group,
                        p.splits,
                    ],
                ));
                e0 += n;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_of_experts_fits_its_bytes_and_one_dispatch() {
        // gpt-oss-20b: 2,880 × 2,880 f16 matrices of 16.6 MB.
        let per = 2880 * 2880 * 2;
        assert_eq!(experts_per_chunk(EXPERT_CHUNK_BYTES, per, 2880), 16);
        assert_eq!(experts_per_chunk(128 << 20, per, 2880), 8);
        // 512 MiB would hold 32, but 32 × 2,880 rows is past a grid's 65,535.
        assert_eq!(experts_per_chunk(512 << 20, per, 2880), 22);
        // A matrix larger than the bytes still goes one at a time.
        assert_eq!(experts_per_chunk(1 << 20, per, 2880), 1);
    }

    #[test]
    fn expert_products_split_within_their_inputs_and_bytes() {
        // gpt-oss-20b, 512 tokens: 4,032 slots of 2,880 outputs.
        let share = 4032 * 2880 * 4;
        let most = EXPERT_SPLITS;
        assert_eq!(expert_splits(most, 2880, share, 4 << 30), 4);
        assert_eq!(expert_splits(STAGED_EXPERT_SPLITS, 2880, share, 4 << 30), 2);
        // Short rows: a share has at least 256 inputs.
        assert_eq!(expert_splits(most, 512, share, 4 << 30), 2);
        assert_eq!(expert_splits(most, 96, share, 4 << 30), 1);
        // Partial sums within 256 MiB and one binding.
        assert_eq!(expert_splits(most, 2880, 100 << 20, 4 << 30), 2);
        assert_eq!(expert_splits(most, 2880, share, 2 * share), 2);
        assert_eq!(expert_splits(most, 2880, 300 << 20, 4 << 30), 1);
    }
}
