//! Mixture of experts: routing (`moe_route`), grouping items by expert (`moe_group`), the
//! expert products (`matvec_glu_experts` for decode and short prompts, `matmul_experts` for
//! longer prompts) and combining their outputs (`moe_combine`).

use super::products::{multi_weight_entries, with_quantization, x_binding, xq_scales};
use super::{
    grid2, Bias, Eltwise, MatSel, MatmulTile, Multi, MultiFlags, MultiParams, NormFold, Ops,
    Region, XRecords, MATMUL_TOKENS,
};
use crate::gpu::error::{GpuError, GpuResult};
use crate::gpu::pipelines::Dispatch;
use crate::gpu::shader::Defines;
use crate::gpu::weights::GpuWeight;
use bytemuck::{Pod, Zeroable};

/// The fewest (token, expert) items of a prompt whose expert products group the items by
/// expert (`moe_grouped`); the matrix-core expert product starts at this count.
pub const MOE_GROUPED_ITEMS: u32 = 2 * super::matmul::COOP_BLOCK;

/// Whether a prompt's `items` (tokens × experts per token) over `experts` experts group by
/// expert (`Ops::moe_group`, then tiles of items per expert) rather than each running through
/// its expert's weights as a decode token's do. Grouping decodes every expert touched once, to
/// f16 on matrix cores (about 8 times the bytes of reading its stored weights); one by one,
/// each item reads its expert's weights: so items one by one while they are fewer than 4 per
/// expert, and at least until the matrix-core product takes them (`MOE_GROUPED_ITEMS`). On
/// the H200, gpt-oss-20b's 8- and 15-token prompts reached their first token 3.4 and 3.3
/// times sooner one by one (benches/GPU.md, entry 81).
pub fn moe_grouped(items: usize, experts: usize) -> bool {
    items >= (MOE_GROUPED_ITEMS as usize).max(4 * experts)
}

/// Mixture-of-experts addressing for a matvec over an [experts, rows, cols] weight.
#[derive(Clone, Copy)]
pub struct ExpertSel<'a> {
    /// Expert id of each batch item.
    pub ids: &'a wgpu::Buffer,
    /// Batch item z reads input vector z / x_div (k for gate/up, 1 for down).
    pub x_div: u32,
}

/// Mixture-of-experts addressing for the prefill product over an [experts, rows, cols] weight:
/// the items grouped by expert in tiles (`Ops::moe_group`).
#[derive(Clone, Copy)]
pub struct ExpertTiles<'a> {
    /// Item indices, expert by expert.
    pub order: &'a wgpu::Buffer,
    /// Per tile: expert, first position in `order`, items (0: an empty tile).
    pub tiles: &'a wgpu::Buffer,
    /// Tiles launched: `moe_max_tiles` of the item and expert counts.
    pub max_tiles: u32,
    /// Whether the tiles come in pairs (`moe_tile_pairs`).
    pub pairs: bool,
    /// Item i reads input vector i / x_div (k for gate/up, 1 for down).
    pub x_div: u32,
}

/// Largest expert count and top-k of the routing kernels (MAX_EXPERTS and MAX_K in moe.wgsl).
const MOE_MAX_EXPERTS: u32 = 256;
const MOE_MAX_K: u32 = 32;

/// Whether `moe_group` lists the tiles of `items` items over `experts` experts in pairs: where
/// the experts average at least 48 items, so that most of them fill more than one tile and a
/// matrix-core workgroup of 64 tokens (`TOKENS64`) loads each weight matrix for two tiles.
pub fn moe_tile_pairs(items: u32, experts: u32) -> bool {
    items >= 48 * experts
}

/// 2 where `moe_tile_pairs`, else 1: the tiles each expert's count rounds up to a multiple of.
fn tiles_per_pair(items: u32, experts: u32) -> u32 {
    if moe_tile_pairs(items, experts) {
        2
    } else {
        1
    }
}

/// Tiles of `MATMUL_TOKENS` that `items` items grouped by expert can need at most: each expert
/// with items rounds up once (to a whole pair where `moe_tile_pairs`), and each tile (pair)
/// holds at least one item.
pub fn moe_max_tiles(items: u32, experts: u32) -> u32 {
    let busy = experts.min(items);
    let per = tiles_per_pair(items, experts);
    let span = per * MATMUL_TOKENS;
    ((items + busy * (span - 1)) / span).min(items) * per
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
    groups_x: u32,
    tile_tokens: u32,
    max_tiles: u32,
    norm_offset: u32,
    xq_scales: u32,
    xq_sq: u32,
    tile_pairs: u32,
    _pad: [u32; 3],
}

/// Routing that a decode token's expert gate/up product does itself (`Ops::routes_in_experts`)
/// instead of `Ops::moe_route` before it: the router's `experts` logits from `offset` of
/// `logits`, top-`k`, the softmax over the k with `renorm` (else over all), the ids into the
/// product's `ExpertSel::ids` and the weights into `weights` for the products and the combine
/// after it.
#[derive(Clone, Copy)]
pub struct RouteIn<'a> {
    pub logits: &'a wgpu::Buffer,
    pub offset: u32,
    pub experts: u32,
    pub k: u32,
    pub renorm: bool,
    pub weights: &'a wgpu::Buffer,
}

impl Ops {
    /// Whether one token's expert gate/up product can route it itself (`RouteIn`): a routing
    /// the GPU does, and decode products whose workgroups have a thread per expert the routing
    /// may rank (route.wgsl's MAX_EXPERTS). That saves the routing's dispatch, whose 32 logits
    /// took gpt-oss-20b ≈ 5 µs per layer on the H200 (benches/GPU.md, entry 97).
    pub fn routes_in_experts(&self, experts: u32, k: u32) -> bool {
        self.route_in
            && Self::check_routing(experts, k).is_ok()
            && self.product_shape.0 == MOE_MAX_EXPERTS
            && self.halves_shape.0 == MOE_MAX_EXPERTS
    }

    /// Gate, up and the activation of mixture-of-experts items in one product:
    /// y[z] = act(G_e · x[z / x_div] + bg_e, U_e · x[z / x_div] + bu_e) with e = ids[z], for
    /// `items` items, where G and U are the views `sels` of stacked [experts, rows, cols]
    /// weights (possibly one weight, as gpt-oss's interleaved gate_up) split alike into parts
    /// of whole experts: one dispatch per part, x read once for both products. With `route`,
    /// the k items of one token route it first (`RouteIn`, `routes_in_experts`), writing the
    /// ids that `experts` names.
    #[allow(clippy::too_many_arguments)]
    pub fn matvec_glu_experts(
        &self,
        weights: [&GpuWeight; 2],
        sels: [&MatSel; 2],
        x: Region,
        y: Region,
        items: u32,
        act: Eltwise,
        biases: Option<[Bias; 2]>,
        experts: ExpertSel,
        route: Option<RouteIn>,
    ) -> GpuResult<Vec<Dispatch>> {
        let [gw, uw] = weights;
        let [gs, us] = sels;
        gw.check_sel(gs)?;
        uw.check_sel(us)?;
        let bad = |reason: &str| {
            Err(GpuError::Unsupported {
                tensor: gw.name.clone(),
                reason: format!("{} fused with {}: {reason}", gw.name, uw.name),
            })
        };
        if let Some(r) = route {
            if !self.routes_in_experts(r.experts, r.k) || items != r.k || experts.x_div != r.k {
                let (k, e) = (r.k, r.experts);
                return bad(&format!(
                    "{items} items routing top-{k} of {e} experts themselves"
                ));
            }
        }
        if !matches!(act, Eltwise::SwiGlu | Eltwise::GluOss { .. }) {
            return bad(&format!("{act:?} is no gated activation"));
        }
        if (gs.out_dim, gs.in_dim, gs.input_major) != (us.out_dim, us.in_dim, us.input_major) {
            return bad("views of different shapes");
        }
        if !gw.same_parts(uw) || gw.matrix_rows(gs.input_major) != uw.matrix_rows(us.input_major) {
            return bad("weights split differently");
        }
        if biases.is_some_and(|[a, b]| a.expert_stride != b.expert_stride) {
            return bad("biases of different strides");
        }
        let decoders = vec![self.weight_defines(gw, gs), self.weight_defines(uw, us)];
        let int8 = self.dot_i8(&[gw, uw], true, gs.out_dim as u32 * items.max(1));
        let x_div = experts.x_div.max(1);
        let quantized = if int8 {
            let vectors = (items.max(1) - 1) / x_div + 1;
            Some(self.quantize_x(x, gs.in_dim as u32, vectors, None)?)
        } else {
            None
        };
        let flags = MultiFlags {
            norm: false,
            bias: biases.is_some(),
            experts: true,
            int8,
            xq_norm: false,
            local: false,
            route: route.is_some(),
            records_out: false,
            cols: gs.in_dim as u32,
            rows: gs.out_dim as u32,
        };
        let (pipe, rows_per_group) = self.multi_pipeline(decoders, Multi::Glu(act), flags)?;
        let mrows = gw.matrix_rows(gs.input_major);
        let stored = if gs.input_major { gs.in_dim } else { mrows }.max(1);
        let rows = gs.out_dim as u32;
        let (gx, gy) = grid2(rows.div_ceil(rows_per_group));
        let (alpha, limit) = match act {
            Eltwise::GluOss { alpha, limit } => (alpha, limit),
            _ => (0.0, 0.0),
        };
        let mut out = Vec::new();
        for (i, (gp, up)) in gw.parts.iter().zip(&uw.parts).enumerate() {
            let params = MultiParams {
                alpha,
                limit,
                bias_offsets: [
                    biases.map(|b| b[0].offset).unwrap_or(0),
                    biases.map(|b| b[1].offset).unwrap_or(0),
                    0,
                ],
                row_base: [gs.offset as u32, us.offset as u32],
                row_stride: [gs.stride as u32, us.stride as u32],
                matrix_rows: mrows as u32,
                bias_stride: biases.map(|b| b[0].expert_stride).unwrap_or(0),
                x_stride: x.stride,
                x_div,
                y_stride: y.stride,
                expert_first: (gp.first_row / stored) as u32,
                expert_count: (gp.rows / stored) as u32,
                xq_scales: xq_scales(&quantized),
                // Every part's dispatch routes; the first writes the ids and weights.
                route_experts: route.map_or(0, |r| r.experts),
                route_k: route.map_or(0, |r| r.k),
                route_renorm: route.is_some_and(|r| r.renorm) as u32,
                route_writes: (route.is_some() && i == 0) as u32,
                logits_offset: route.map_or(0, |r| r.offset),
                ..MultiParams::whole([rows, 0, 0], gs.in_dim as u32, x.offset, gx)
            };
            let ub = self.ctx.params("glu experts params", &params);
            let mut entries: Vec<(u32, &wgpu::Buffer)> = Vec::new();
            entries.extend(multi_weight_entries(0, gp));
            entries.extend(multi_weight_entries(1, up));
            let xbuf = x_binding(&quantized, x.buf);
            entries.extend([(30, xbuf), (31, y.buf), (34, &ub), (39, experts.ids)]);
            if let Some([bg, bu]) = &biases {
                entries.extend([(36, bg.buf), (37, bu.buf)]);
            }
            if let Some(r) = &route {
                entries.extend([(40, r.logits), (41, r.weights)]);
            }
            out.push(self.dispatch(pipe.clone(), &entries, [gx, gy, items]));
        }
        Ok(with_quantization(quantized, out))
    }

    /// y[i] = W_{e(i)} · x[i / x_div] (+ the expert's bias) for the items grouped by expert in
    /// `experts` (`moe_group`): the tiled prefill kernel, each tile over one expert's items (the
    /// mid tile, whose token count the grouping uses).
    pub fn matmul_experts(
        &self,
        w: &GpuWeight,
        sel: &MatSel,
        x: Region,
        y: Region,
        bias: Option<Bias>,
        experts: ExpertTiles,
    ) -> GpuResult<Vec<Dispatch>> {
        if experts.max_tiles > 65535 {
            return Err(GpuError::Unsupported {
                tensor: w.name.clone(),
                reason: format!("{} expert tiles in one dispatch", experts.max_tiles),
            });
        }
        self.tiled(w, sel, x, y, 0, bias, MatmulTile::Mid, Some(experts))
    }

    /// Router logits [tokens, experts] (at `offset` of `logits`) → ids and weights [tokens, k]:
    /// one workgroup per token, one thread per expert.
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
        Self::check_routing(experts, k)?;
        let pipe = self.pipeline("moe.wgsl", &Defines::new(), "route")?;
        let (gx, gy) = grid2(tokens);
        let params = MoeParams {
            experts,
            k,
            tokens,
            renorm: renorm as u32,
            logits_offset: offset,
            groups_x: gx,
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.params("route params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (1, logits), (2, ids), (3, weights)],
            [gx, gy, 1],
        ))
    }

    fn check_routing(experts: u32, k: u32) -> GpuResult<()> {
        if experts > MOE_MAX_EXPERTS || k > MOE_MAX_K || k > experts {
            return Err(GpuError::Unsupported {
                tensor: "moe router".into(),
                reason: format!(
                    "top-{k} of {experts} experts (the GPU routes at most top-{MOE_MAX_K} of \
                     {MOE_MAX_EXPERTS})"
                ),
            });
        }
        Ok(())
    }

    /// The tokens · k items of `ids` grouped by expert for `matmul_experts`: `order` gets the
    /// item indices expert by expert, `tiles` (`moe_max_tiles` entries of 4 u32) each tile's
    /// expert, first position in `order` and item count.
    pub fn moe_group(
        &self,
        ids: &wgpu::Buffer,
        experts: u32,
        k: u32,
        tokens: u32,
        order: &wgpu::Buffer,
        tiles: &wgpu::Buffer,
    ) -> GpuResult<Dispatch> {
        Self::check_routing(experts, k)?;
        let pipe = self.pipeline("moe.wgsl", &Defines::new(), "group")?;
        let params = MoeParams {
            experts,
            k,
            tokens,
            tile_tokens: MATMUL_TOKENS,
            max_tiles: moe_max_tiles(tokens * k, experts),
            tile_pairs: tiles_per_pair(tokens * k, experts),
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.params("group params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (2, ids), (5, order), (6, tiles)],
            [1, 1, 1],
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
        let ub = self.ctx.params("scatter params", &params);
        Ok(self.dispatch(
            pipe,
            &[(0, &ub), (2, ids), (3, weights), (4, dense)],
            [experts.div_ceil(64), tokens, 1],
        ))
    }

    /// y[t] = Σ_s weights[t, s] · expert_out[t·k + s] over rows of n values, also added into
    /// `residual` when given. With `norm` (its records from `combine_records`) it also writes
    /// the new residual times the norm's weights as the int8 records that products folding
    /// that norm read (`NormFold::records`).
    #[allow(clippy::too_many_arguments)]
    pub fn moe_combine(
        &self,
        expert_out: &wgpu::Buffer,
        weights: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: u32,
        k: u32,
        tokens: u32,
        residual: Option<&wgpu::Buffer>,
        norm: Option<NormFold>,
    ) -> GpuResult<Dispatch> {
        let mut d = Defines::new();
        if residual.is_some() {
            d.insert("RESIDUAL".into(), String::new());
        }
        let records = norm.and_then(|f| f.records.map(|r| (f, r)));
        if norm.is_some() {
            if records.is_none() || residual.is_none() || !self.combine_writes_records(n, tokens) {
                return Err(GpuError::Validation(format!(
                    "moe combine of {tokens} tokens of {n} values writing int8 records"
                )));
            }
            d.insert("XQ_NORM_OUT".into(), String::new());
            d.insert("XQ_OUT".into(), String::new());
        }
        let pipe = self.pipeline("moe.wgsl", &d, "combine")?;
        let params = MoeParams {
            k,
            tokens,
            n,
            norm_offset: norm.map(|f| f.offset).unwrap_or(0),
            xq_scales: records.map(|(_, r)| r.scales).unwrap_or(0),
            xq_sq: records.map(|(_, r)| r.sq_at()).unwrap_or(0),
            ..Zeroable::zeroed()
        };
        let ub = self.ctx.params("combine params", &params);
        let mut entries = vec![(0, &ub), (1, expert_out), (3, weights), (4, y)];
        if let Some(r) = residual {
            entries.push((7, r));
        }
        if let Some((f, r)) = records {
            entries.push((8, f.buf));
            entries.push((9, &r.buf));
        }
        Ok(self.dispatch(pipe, &entries, [n.div_ceil(64), tokens, 1]))
    }

    /// Where the MoE combine of `tokens` tokens of `n` values writes its int8 records, if it
    /// can (`combine_writes_records`).
    pub fn combine_records(&self, n: u32, tokens: u32) -> Option<XRecords> {
        self.combine_writes_records(n, tokens)
            .then(|| self.records_buffer(n / 8))
    }

    /// Whether the MoE combine can write its new residual as int8 records: int8 products on,
    /// one token, whole units of 32.
    fn combine_writes_records(&self, n: u32, tokens: u32) -> bool {
        self.int8_products && tokens == 1 && n.is_multiple_of(32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiles `moe.wgsl`'s `group` lists for per-expert item counts.
    fn listed(counts: &[u32], pairs: bool) -> u32 {
        let per = if pairs { 2 } else { 1 };
        let span = per * MATMUL_TOKENS;
        counts.iter().map(|c| c.div_ceil(span) * per).sum()
    }

    #[test]
    fn the_tile_bound_covers_every_grouping_in_pairs_or_not() {
        let mut seed = 7u64;
        let mut next = |n: u32| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) % n as u64) as u32
        };
        for (items, experts) in [(64, 32), (548, 32), (2048, 32), (600, 6), (260, 5), (97, 3)] {
            let pairs = moe_tile_pairs(items, experts);
            let bound = moe_max_tiles(items, experts);
            assert!(
                !pairs || bound.is_multiple_of(2),
                "{items} items: {bound} tiles"
            );
            for spread in [1, 2, experts] {
                let mut counts = vec![0; experts as usize];
                for _ in 0..items {
                    counts[next(spread) as usize] += 1;
                }
                let n = listed(&counts, pairs);
                assert!(
                    n <= bound,
                    "{items} items over {spread}: {n} > {bound} tiles"
                );
            }
            // Busy experts one item past a whole span each: the most tiles.
            let span = if pairs { 64 } else { 32 };
            let worst = (items / (span + 1)).min(experts);
            let mut counts = vec![0; experts as usize];
            for c in counts.iter_mut().take(worst as usize) {
                *c = span + 1;
            }
            counts[0] += items - worst * (span + 1);
            assert!(listed(&counts, pairs) <= bound, "{items} items, worst case");
        }
        assert!(moe_tile_pairs(2048, 32) && !moe_tile_pairs(548, 32));
    }
}
