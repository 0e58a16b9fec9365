//! Encoding a MoE block: routing, the experts (picked by id on the GPU from stacked weights,
//! or every expert densely for separate tensors), an optional shared expert, and the combine.

use super::backend::GpuBackend;
use super::buffers::Src;
use super::encode::{glu_op, sel, Fold};
use super::graph::stacked;
use super::ops::{
    moe_grouped, Eltwise, ExpertSel, ExpertTiles, Folds, MatSel, NormFold, Region, RouteIn,
    XRecords,
};
use super::pipelines::Dispatch;
use crate::backend::{BufId, Linear, MoeBlock};
use crate::error::{EngineError, Result};

impl GpuBackend {
    /// A MoE block: routing (the router folding a one-row `norm` of x and writing its output),
    /// the experts, and the combine (adding into `acc`, and with `records` writing the normed
    /// residual as int8 records for the next product).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn moe(
        &self,
        x: BufId,
        block: &MoeBlock,
        out: BufId,
        n: usize,
        norm: Option<Fold>,
        acc: Option<BufId>,
        records: Option<(Fold, &XRecords)>,
    ) -> Result<Vec<Dispatch>> {
        let hidden = self.buf(x)?.cols;
        let experts = block.experts.len();
        let k = block.routing.top_k.min(experts);
        let width = block.experts[0].gate.out_dim();
        let renorm = block.routing.softmax_after_topk || block.routing.norm_topk_prob;
        let logits = Src::Scratch("moe logits");
        let mut d = match norm {
            Some(f) => self.router_writing_norm(x, &block.router, f)?,
            None => self.linear(Src::Buf(x), &block.router, logits, n, None, None, None)?,
        };
        // One token's gate/up product routes it itself: no routing dispatch before it.
        let route = RouteIn {
            logits: self.src(logits)?,
            offset: 0,
            experts: experts as u32,
            k: k as u32,
            renorm,
            weights: self.src(Src::Scratch("moe weights"))?,
        };
        let routed = n == 1
            && stacked(block)
            && self.glu_fuses(block)?
            && self.ops.routes_in_experts(experts as u32, k as u32);
        if !routed {
            d.push(self.ops.moe_route(
                route.logits,
                route.offset,
                route.experts,
                route.k,
                n as u32,
                renorm,
                self.src(Src::Scratch("moe ids"))?,
                route.weights,
            )?);
        }
        let act = glu_op(block.activation);
        if stacked(block) {
            let route = routed.then_some(route);
            d.extend(self.stacked_experts(x, block, n, k, hidden, width, act, route)?);
            let fold = match &records {
                Some((f, r)) => Some(NormFold {
                    records: Some(*r),
                    ..self.norm_fold(f)?
                }),
                None => None,
            };
            let acc_buf = match acc {
                Some(a) => Some(&self.buf(a)?.buf),
                None => None,
            };
            d.push(self.ops.moe_combine(
                self.src(Src::Scratch("moe expert out"))?,
                self.src(Src::Scratch("moe weights"))?,
                &self.buf(out)?.buf,
                hidden as u32,
                k as u32,
                n as u32,
                acc_buf,
                fold,
            )?);
        } else {
            d.extend(self.dense_experts(x, block, out, n, hidden, width, act)?);
        }
        if let Some((shared, gate)) = &block.shared {
            let sw = shared.gate.out_dim();
            d.extend(self.ffn(Src::Buf(x), shared, act, n, sw)?);
            d.extend(self.linear(
                Src::Buf(x),
                gate,
                Src::Scratch("moe shared gate"),
                n,
                None,
                None,
                None,
            )?);
            d.push(self.ops.eltwise(
                Eltwise::ScaledAdd { sigmoid: true },
                Region::new(self.src(Src::Scratch("moe expert out"))?, 0, hidden as u32),
                Some(Region::new(
                    self.src(Src::Scratch("moe shared gate"))?,
                    0,
                    1,
                )),
                Region::new(&self.buf(out)?.buf, 0, hidden as u32),
                hidden as u32,
                n as u32,
            )?);
        }
        Ok(d)
    }

    /// Experts of one stacked weight per projection, picked by id on the GPU. Prompts of many
    /// items (`moe_grouped`) group them by expert, so each expert's weights are decoded once
    /// per tile of items; fewer items each run through their expert's weights as a decode
    /// token's do.
    #[allow(clippy::too_many_arguments)]
    fn stacked_experts(
        &self,
        x: BufId,
        block: &MoeBlock,
        n: usize,
        k: usize,
        hidden: usize,
        width: usize,
        act: Eltwise,
        route: Option<RouteIn>,
    ) -> Result<Vec<Dispatch>> {
        let items = n * k;
        let experts = block.experts.len();
        let grouped = moe_grouped(items, experts);
        let max_tiles = super::ops::moe_max_tiles(items as u32, experts as u32);
        let e0 = block.experts[0];
        let ids = self.src(Src::Scratch("moe ids"))?;
        let actb = self.src(Src::Scratch("moe act"))?;
        let eo = self.src(Src::Scratch("moe expert out"))?;
        let xb = &self.buf(x)?.buf;
        let mut d = Vec::new();
        let groups = if grouped {
            let order = self.src(Src::Scratch("moe order"))?;
            let tiles = self.src(Src::Scratch("moe tiles"))?;
            d.push(
                self.ops
                    .moe_group(ids, experts as u32, k as u32, n as u32, order, tiles)?,
            );
            Some((order, tiles))
        } else {
            None
        };
        // One projection of every item through its expert; item i reads x row i / x_div.
        let product = |i: usize, lin: &Linear, xr: Region, yr: Region| -> Result<Vec<Dispatch>> {
            // Gate and up read each token's x k times (once per slot); down one row per item.
            let x_div = if i < 2 { k as u32 } else { 1 };
            let w = self.weight(lin.w.weight)?;
            let sel = MatSel {
                matrix: 0,
                ..sel(lin)
            };
            let bias = self.bias(&lin.bias, true)?;
            Ok(match groups {
                Some((order, tiles)) => {
                    let e = ExpertTiles {
                        order,
                        tiles,
                        max_tiles,
                        pairs: super::ops::moe_tile_pairs(items as u32, experts as u32),
                        x_div,
                    };
                    // The tile list is bound as a uniform of MOE_COOP_TILES entries.
                    let listed = tiles.size() <= super::ops::MOE_COOP_TILES as u64 * 16;
                    if listed
                        && self
                            .ops
                            .experts_on_matrix_cores(w, &sel, items as u32, max_tiles)
                    {
                        self.ops.matmul_experts_coop(w, &sel, xr, yr, bias, e)?
                    } else {
                        self.ops.matmul_experts(w, &sel, xr, yr, bias, e)?
                    }
                }
                None => self.ops.matvec(
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
        // Items run one by one: gate, up and the activation in one product per weight part.
        if !grouped && self.glu_fuses(block)? {
            let biases = self
                .bias(&e0.gate.bias, true)?
                .zip(self.bias(&e0.up.bias, true)?)
                .map(|(g, u)| [g, u]);
            let weights = [self.weight(e0.gate.w.weight)?, self.weight(e0.up.w.weight)?];
            let gs = MatSel {
                matrix: 0,
                ..sel(&e0.gate)
            };
            let us = MatSel {
                matrix: 0,
                ..sel(&e0.up)
            };
            let yr = Region::new(actb, 0, w);
            d.extend(self.ops.matvec_glu_experts(
                weights,
                [&gs, &us],
                xr,
                yr,
                items as u32,
                act,
                biases,
                ExpertSel {
                    ids,
                    x_div: k as u32,
                },
                route,
            )?);
        } else {
            if route.is_some() {
                return Err(EngineError::Backend(
                    "a MoE block routed inside expert products that do not fuse gate and up".into(),
                ));
            }
            let gate = self.src(Src::Scratch("moe gate"))?;
            let up = self.src(Src::Scratch("moe up"))?;
            d.extend(product(0, &e0.gate, xr, Region::new(gate, 0, w))?);
            d.extend(product(1, &e0.up, xr, Region::new(up, 0, w))?);
            d.push(self.ops.eltwise(
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
        Ok(d)
    }

    /// Whether a block's expert gate and up (one stacked weight each) can run with their
    /// activation in one product per weight part (`Ops::matvec_glu_experts`) for items one by
    /// one: biases on both or neither, weights split alike.
    fn glu_fuses(&self, block: &MoeBlock) -> Result<bool> {
        let e0 = block.experts[0];
        Ok(e0.gate.bias.is_some() == e0.up.bias.is_some()
            && self
                .weight(e0.gate.w.weight)?
                .same_parts(self.weight(e0.up.w.weight)?))
    }

    /// Separate tensors per expert: every expert runs densely, weighted by its routing weight
    /// (0 for tokens that did not choose it).
    #[allow(clippy::too_many_arguments)]
    fn dense_experts(
        &self,
        x: BufId,
        block: &MoeBlock,
        out: BufId,
        n: usize,
        hidden: usize,
        width: usize,
        act: Eltwise,
    ) -> Result<Vec<Dispatch>> {
        let experts = block.experts.len();
        let k = block.routing.top_k.min(experts);
        let dense = self.src(Src::Scratch("moe dense"))?;
        let mut d = vec![self.ops.moe_scatter(
            self.src(Src::Scratch("moe ids"))?,
            self.src(Src::Scratch("moe weights"))?,
            dense,
            experts as u32,
            k as u32,
            n as u32,
        )?];
        let len = n * hidden;
        d.push(self.ops.eltwise(
            Eltwise::Copy,
            Region::new(self.src(Src::Scratch("zeros"))?, 0, 0),
            None,
            Region::new(&self.buf(out)?.buf, 0, 0),
            len as u32,
            1,
        )?);
        for (e, f) in block.experts.iter().enumerate() {
            d.extend(self.ffn(Src::Buf(x), f, act, n, width)?);
            d.push(self.ops.eltwise(
                Eltwise::ScaledAdd { sigmoid: false },
                Region::new(self.src(Src::Scratch("moe expert out"))?, 0, hidden as u32),
                Some(Region::new(dense, e as u32, experts as u32)),
                Region::new(&self.buf(out)?.buf, 0, hidden as u32),
                hidden as u32,
                n as u32,
            )?);
        }
        Ok(d)
    }

    /// The router's one-row product over the norm's input into the "moe logits" scratch,
    /// writing `x`, the norm's output, on the way.
    fn router_writing_norm(&self, x: BufId, router: &Linear, f: Fold) -> Result<Vec<Dispatch>> {
        let xr = Region::new(&self.buf(f.x)?.buf, 0, router.in_dim() as u32);
        let yr = Region::new(
            self.src(Src::Scratch("moe logits"))?,
            0,
            router.out_dim() as u32,
        );
        let folds = Folds {
            norm: Some(self.norm_fold(&f)?),
            normed: Some(&self.buf(x)?.buf),
            ..Folds::default()
        };
        let w = self.weight(router.w.weight)?;
        Ok(self.ops.matvec(
            w,
            &sel(router),
            xr,
            yr,
            1,
            self.bias(&router.bias, false)?,
            None,
            folds,
        )?)
    }

    /// One gated FFN of `n` rows of x into the "moe expert out" scratch.
    fn ffn(
        &self,
        x: Src,
        f: &crate::backend::GatedFfn,
        act: Eltwise,
        n: usize,
        width: usize,
    ) -> Result<Vec<Dispatch>> {
        let (gate, up) = (Src::Scratch("moe gate"), Src::Scratch("moe up"));
        let mut d = self.linear(x, &f.gate, gate, n, None, None, None)?;
        d.extend(self.linear(x, &f.up, up, n, None, None, None)?);
        let w = width as u32;
        d.push(self.ops.eltwise(
            act,
            Region::new(self.src(gate)?, 0, w),
            Some(Region::new(self.src(up)?, 0, w)),
            Region::new(self.src(Src::Scratch("moe act"))?, 0, w),
            w,
            n as u32,
        )?);
        d.extend(self.linear(
            Src::Scratch("moe act"),
            &f.down,
            Src::Scratch("moe expert out"),
            n,
            None,
            None,
            None,
        )?);
        Ok(d)
    }
}
