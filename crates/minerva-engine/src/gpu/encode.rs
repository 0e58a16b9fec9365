//! Turning a plan's kernels into dispatches: each kernel's pipelines, parameters and bind
//! groups, made once per shape class and replayed by every later step of that class.

use super::backend::{GpuBackend, Src};
use super::graph::{stacked, Graph, Node};
use super::ops::{
    Bias, Eltwise, ExpertSel, ExpertTiles, Folds, MatSel, Multi, NormFold, Region, XRecords,
};
use super::pipelines::Dispatch;
use super::plan::{Kernel, Plan};
use super::weights::GpuWeight;
use crate::backend::{AttnParams, BufId, Linear, MoeBlock, VecRef};
use crate::error::{EngineError, Result};
use minerva_formats::Activation;
use std::collections::HashMap;

/// A one-row norm as the kernels that fold it take it: its input and its weights.
#[derive(Clone, Copy)]
pub(super) struct Fold {
    x: BufId,
    weight: VecRef,
    eps: f32,
}

fn bad(what: String) -> EngineError {
    EngineError::Backend(what)
}

impl GpuBackend {
    /// The dispatches of each kernel of `plan`, in order.
    pub(super) fn encode(&self, g: &Graph, plan: &Plan) -> Result<Vec<Vec<Dispatch>>> {
        // Records a kernel writes for a later one, by the writer's index.
        let mut records: HashMap<usize, XRecords> = HashMap::new();
        let mut out = Vec::with_capacity(plan.kernels.len());
        for (at, k) in plan.kernels.iter().enumerate() {
            let d = match k {
                Kernel::Single { node } => self.encode_node(g, &g.nodes[*node])?,
                Kernel::Norm { node, needed } => match (needed, &g.nodes[*node]) {
                    (true, &Node::Norm { x, w, out, eps, .. }) => {
                        vec![self.norm(x, w, out, 1, self.buf(x)?.cols, eps)?]
                    }
                    _ => vec![],
                },
                Kernel::AddNorm { add, norm } => self.add_norm(&g.nodes[*add], &g.nodes[*norm])?,
                Kernel::Products {
                    products,
                    norm,
                    records: from,
                    residual,
                } => {
                    let norm = norm.map(|n| fold(&g.nodes[n]));
                    let recs = from.and_then(|r| records.get(&r));
                    let residual = residual.map(|a| match g.nodes[a] {
                        Node::Add { acc, .. } => acc,
                        _ => unreachable!("a residual is an add"),
                    });
                    if let [one] = products.as_slice() {
                        let Node::Product { x, lin, out, n } = g.nodes[*one] else {
                            unreachable!("products are products");
                        };
                        self.linear(Src::Buf(x), &lin, Src::Buf(out), n, norm, recs, residual)?
                    } else {
                        self.products(g, products, norm, recs)?
                    }
                }
                Kernel::GateUpAct {
                    gate,
                    up,
                    glu,
                    norm,
                    records: from,
                } => {
                    let norm = norm.map(|n| fold(&g.nodes[n]));
                    let recs = from.and_then(|r| records.get(&r));
                    self.gate_up_act(g, [*gate, *up, *glu], norm, recs)?
                }
                Kernel::RopePair { q, k } => vec![self.rope(&g.nodes[*q], Some(&g.nodes[*k]))?],
                Kernel::Attention {
                    node,
                    rope,
                    decode,
                    records: writes,
                } => {
                    let Node::Attention {
                        q,
                        k,
                        v,
                        kv,
                        out,
                        p,
                    } = g.nodes[*node]
                    else {
                        unreachable!("attention kernels hold attention");
                    };
                    let rope = rope.map(|(rq, _)| rope_of(&g.nodes[rq]));
                    let shape = self.attn_shape(kv, &p)?;
                    if *decode {
                        let rope = rope.expect("a decode attention folds a RoPE");
                        let recs = if *writes {
                            let r = self.ops.attention_records(&shape).ok_or_else(|| {
                                bad("attention: no int8 records for this shape".into())
                            })?;
                            records.insert(at, r.clone());
                            Some(r)
                        } else {
                            None
                        };
                        vec![self.decode_attention([q, k, v], kv, out, &p, rope, recs.as_ref())?]
                    } else {
                        self.attention(q, k, v, kv, out, &p, rope)?
                    }
                }
                Kernel::Moe {
                    node,
                    norm,
                    add,
                    records: normed,
                } => {
                    let Node::Moe { x, block, out, n } = g.nodes[*node] else {
                        unreachable!("moe kernels hold a moe");
                    };
                    let acc = add.map(|a| match g.nodes[a] {
                        Node::Add { acc, .. } => acc,
                        _ => unreachable!("a residual is an add"),
                    });
                    let recs = match normed {
                        Some(nn) => {
                            let cols = self.buf(x)?.cols as u32;
                            let r = self
                                .ops
                                .combine_records(cols, 1)
                                .ok_or_else(|| bad("moe: no int8 records".into()))?;
                            records.insert(at, r.clone());
                            Some((fold(&g.nodes[*nn]), r))
                        }
                        None => None,
                    };
                    let norm = norm.map(|nn| fold(&g.nodes[nn]));
                    let block = self.moes.get(block);
                    self.moe(
                        x,
                        block,
                        out,
                        n,
                        norm,
                        acc,
                        recs.as_ref().map(|(f, r)| (*f, r)),
                    )?
                }
            };
            out.push(d);
        }
        Ok(out)
    }

    fn encode_node(&self, _g: &Graph, node: &Node) -> Result<Vec<Dispatch>> {
        Ok(match *node {
            Node::Embed { table, out, n } => self.ops.embed(
                self.weight(table)?,
                &self.ids,
                &self.buf(out)?.buf,
                n as u32,
                1.0,
            )?,
            Node::EmbedChoice { table, out } => self.ops.embed(
                self.weight(table)?,
                &self.chosen,
                &self.buf(out)?.buf,
                1,
                1.0,
            )?,
            Node::Norm {
                x,
                w,
                out,
                n,
                group,
                eps,
            } => vec![self.norm(x, w, out, n, group, eps)?],
            Node::Product { x, lin, out, n } => {
                self.linear(Src::Buf(x), &lin, Src::Buf(out), n, None, None, None)?
            }
            Node::Rope { .. } => vec![self.rope(node, None)?],
            Node::Attention {
                q,
                k,
                v,
                kv,
                out,
                p,
            } => self.attention(q, k, v, kv, out, &p, None)?,
            Node::Glu {
                gate,
                up,
                out,
                n,
                act,
            } => {
                let c = self.buf(gate)?.cols as u32;
                vec![self.ops.eltwise(
                    glu_op(act),
                    Region::new(&self.buf(gate)?.buf, 0, c),
                    Some(Region::new(&self.buf(up)?.buf, 0, c)),
                    Region::new(&self.buf(out)?.buf, 0, c),
                    c,
                    n as u32,
                )?]
            }
            Node::Moe { x, block, out, n } => {
                self.moe(x, self.moes.get(block), out, n, None, None, None)?
            }
            Node::Add { acc, x, n } => {
                let c = self.buf(acc)?.cols as u32;
                vec![self.ops.eltwise(
                    Eltwise::Add,
                    Region::new(&self.buf(x)?.buf, 0, c),
                    None,
                    Region::new(&self.buf(acc)?.buf, 0, c),
                    c,
                    n as u32,
                )?]
            }
            Node::Copy {
                src,
                src_row,
                dst,
                dst_row,
                n,
            } => {
                let cols = self.buf(src)?.cols;
                let c = cols as u32;
                vec![self.ops.eltwise(
                    Eltwise::Copy,
                    Region::new(&self.buf(src)?.buf, (src_row * cols) as u32, c),
                    None,
                    Region::new(&self.buf(dst)?.buf, (dst_row * cols) as u32, c),
                    c,
                    n as u32,
                )?]
            }
            Node::Argmax { x, row } => {
                let cols = self.buf(x)?.cols;
                vec![self.ops.argmax(
                    &self.buf(x)?.buf,
                    (row * cols) as u32,
                    cols as u32,
                    1,
                    &self.chosen,
                    self.src(Src::Scratch("select lists"))?,
                    self.src(Src::Scratch("counters"))?,
                )?]
            }
            Node::TopK { x, row, k } => {
                let cols = self.buf(x)?.cols;
                vec![self.ops.top_k(
                    &self.buf(x)?.buf,
                    (row * cols) as u32,
                    cols as u32,
                    1,
                    k as u32,
                    self.src(Src::Scratch("selected ids"))?,
                    self.src(Src::Scratch("selected values"))?,
                    self.src(Src::Scratch("select lists"))?,
                    self.src(Src::Scratch("counters"))?,
                )?]
            }
        })
    }

    /// RMSNorm over groups of `group` values of `n` rows (in place where x is out).
    fn norm(
        &self,
        x: BufId,
        w: VecRef,
        out: BufId,
        n: usize,
        group: usize,
        eps: f32,
    ) -> Result<Dispatch> {
        let cols = self.buf(x)?.cols;
        let y = Region::new(&self.buf(out)?.buf, 0, 0);
        let xr = (x != out).then(|| Region::new(&self.buf(x).expect("checked").buf, 0, 0));
        let (wid, woff) = self.vector_at(&w)?;
        let w = Region::new(self.vector_buf(wid), woff, 0);
        Ok(self
            .ops
            .rms_norm(xr, y, w, group as u32, (n * cols / group) as u32, eps)?)
    }

    fn add_norm(&self, add: &Node, norm: &Node) -> Result<Vec<Dispatch>> {
        let (
            &Node::Add { .. },
            &Node::Norm {
                x,
                w,
                out,
                n,
                group,
                eps,
            },
        ) = (add, norm)
        else {
            unreachable!("add→norm holds an add and a norm");
        };
        let (wid, woff) = self.vector_at(&w)?;
        Ok(vec![self.ops.add_rms_norm(
            Region::new(&self.buf(x)?.buf, 0, 0),
            Region::new(&self.buf(out)?.buf, 0, 0),
            Region::new(self.vector_buf(wid), woff, 0),
            group as u32,
            n as u32,
            eps,
        )?])
    }

    fn norm_fold(&self, f: &Fold) -> Result<NormFold<'_>> {
        let (wid, woff) = self.vector_at(&f.weight)?;
        Ok(NormFold {
            buf: self.vector_buf(wid),
            offset: woff,
            eps: f.eps,
            records: None,
        })
    }

    fn bias(&self, b: &Option<VecRef>, expert_stride: bool) -> Result<Option<Bias<'_>>> {
        Ok(match b {
            Some(v) => {
                let (wid, off) = self.vector_at(v)?;
                Some(Bias {
                    buf: self.vector_buf(wid),
                    offset: off,
                    expert_stride: if expert_stride {
                        self.weights[wid as usize].cols as u32
                    } else {
                        0
                    },
                })
            }
            None => None,
        })
    }

    /// `out = x · Wᵀ + b` over `n` rows. A one-row product may fold a norm of x in (x is then
    /// the norm's output; the product reads its input), read x as the int8 `records` the
    /// kernel before it wrote (with a norm: of the norm's input times its weights), and add its
    /// results into `residual`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn linear(
        &self,
        x: Src,
        lin: &Linear,
        out: Src,
        n: usize,
        norm: Option<Fold>,
        records: Option<&XRecords>,
        residual: Option<BufId>,
    ) -> Result<Vec<Dispatch>> {
        let sel = sel(lin);
        let w = self.weight(lin.w.weight)?;
        let xb = match norm {
            Some(f) => &self.buf(f.x)?.buf,
            None => self.src(x)?,
        };
        let xr = Region::new(xb, 0, lin.in_dim() as u32);
        let yr = Region::new(self.src(out)?, 0, lin.out_dim() as u32);
        let bias = self.bias(&lin.bias, false)?;
        let folds = Folds {
            norm: match &norm {
                Some(f) => Some(NormFold {
                    records,
                    ..self.norm_fold(f)?
                }),
                None => None,
            },
            residual: match residual {
                Some(r) => Some(&self.buf(r)?.buf),
                None => None,
            },
            normed: None,
            records: records.filter(|_| norm.is_none()),
        };
        Ok(if n == 1 {
            self.ops.matvec(w, &sel, xr, yr, 1, bias, None, folds)?
        } else {
            self.ops.matmul(w, &sel, xr, yr, n as u32, bias)?
        })
    }

    /// Two or three one-row products of one input in one dispatch.
    fn products(
        &self,
        g: &Graph,
        nodes: &[usize],
        norm: Option<Fold>,
        records: Option<&XRecords>,
    ) -> Result<Vec<Dispatch>> {
        let mut ws: Vec<&GpuWeight> = Vec::new();
        let mut outs: Vec<&wgpu::Buffer> = Vec::new();
        let mut biases: Vec<Bias> = Vec::new();
        let mut input = None;
        for &i in nodes {
            let Node::Product { x, lin, out, .. } = g.nodes[i] else {
                unreachable!("products are products");
            };
            input = Some(x);
            ws.push(self.weight(lin.w.weight)?);
            outs.push(&self.buf(out)?.buf);
            biases.extend(self.bias(&lin.bias, false)?);
        }
        let input = norm.map(|f| f.x).or(input).expect("a product");
        Ok(self.ops.matvec_multi(
            &ws,
            Region::new(&self.buf(input)?.buf, 0, 0),
            &outs,
            Multi::Split,
            match &norm {
                Some(f) => Some(NormFold {
                    records,
                    ..self.norm_fold(f)?
                }),
                None => None,
            },
            &biases,
        )?)
    }

    fn gate_up_act(
        &self,
        g: &Graph,
        [gate, up, glu]: [usize; 3],
        norm: Option<Fold>,
        records: Option<&XRecords>,
    ) -> Result<Vec<Dispatch>> {
        let (
            Node::Product { x, lin: lg, .. },
            Node::Product { lin: lu, .. },
            Node::Glu { out, act, .. },
        ) = (&g.nodes[gate], &g.nodes[up], &g.nodes[glu])
        else {
            unreachable!("gate+up+activation holds two products and a glu");
        };
        let ws = [self.weight(lg.w.weight)?, self.weight(lu.w.weight)?];
        let input = norm.map(|f| f.x).unwrap_or(*x);
        Ok(self.ops.matvec_multi(
            &ws,
            Region::new(&self.buf(input)?.buf, 0, 0),
            &[&self.buf(*out)?.buf],
            Multi::Glu(glu_op(*act)),
            match &norm {
                Some(f) => Some(NormFold {
                    records,
                    ..self.norm_fold(f)?
                }),
                None => None,
            },
            &[],
        )?)
    }

    /// RoPE of one buffer, or of q and k with the same rotation in one dispatch.
    fn rope(&self, first: &Node, second: Option<&Node>) -> Result<Dispatch> {
        let Node::Rope { x, n, rope, .. } = *first else {
            unreachable!("rope kernels hold ropes");
        };
        let cols = self.buf(x)?.cols;
        let second = match second {
            Some(&Node::Rope { x: k, .. }) => Some((
                &self.buf(k)?.buf,
                (self.buf(k)?.cols / rope.head_dim) as u32,
            )),
            _ => None,
        };
        let (fid, _) = self.vector_at(&freqs(&rope))?;
        Ok(self.ops.rope(
            &self.buf(x)?.buf,
            0,
            self.vector_buf(fid),
            &self.step,
            n as u32,
            (cols / rope.head_dim) as u32,
            rope.head_dim as u32,
            rope.dim as u32,
            rope.style == minerva_formats::RopeStyle::Halves,
            rope.attention_factor,
            second,
        )?)
    }

    /// The cache write (turning q and k on the way where `rope` is given) and the attention.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: BufId,
        k: BufId,
        v: BufId,
        kv: crate::backend::KvId,
        out: BufId,
        p: &AttnParams,
        rope: Option<crate::backend::RopeParams>,
    ) -> Result<Vec<Dispatch>> {
        let shape = self.attn_shape(kv, p)?;
        let cache = self.cache(kv)?;
        let write = match rope {
            Some(r) => self.ops.rope_write(
                &shape,
                cache,
                &self.buf(q)?.buf,
                &self.buf(k)?.buf,
                &self.buf(v)?.buf,
                &self.rotary(&r)?,
                &self.step,
                p.n as u32,
            )?,
            None => self.ops.write_kv(
                &shape,
                cache,
                Region::new(&self.buf(k)?.buf, 0, 0),
                Region::new(&self.buf(v)?.buf, 0, 0),
                &self.step,
                p.n as u32,
            )?,
        };
        let mut d = vec![write];
        d.extend(self.ops.attention(
            &shape,
            cache,
            &self.buf(q)?.buf,
            0,
            &self.buf(out)?.buf,
            0,
            self.src(Src::Scratch("attention"))?,
            self.src(Src::Scratch("counters"))?,
            self.sinks(p)?,
            &self.step,
            p.n as u32,
        )?);
        Ok(d)
    }

    /// The decode attention with RoPE and the cache write folded in, with `records` also
    /// writing its output as int8 records.
    fn decode_attention(
        &self,
        [q, k, v]: [BufId; 3],
        kv: crate::backend::KvId,
        out: BufId,
        p: &AttnParams,
        rope: crate::backend::RopeParams,
        records: Option<&XRecords>,
    ) -> Result<Dispatch> {
        let shape = self.attn_shape(kv, p)?;
        Ok(self.ops.decode_rope(
            &shape,
            self.cache(kv)?,
            [&self.buf(q)?.buf, &self.buf(k)?.buf, &self.buf(v)?.buf],
            &self.rotary(&rope)?,
            Region::new(&self.buf(out)?.buf, 0, 0),
            self.src(Src::Scratch("attention"))?,
            self.src(Src::Scratch("counters"))?,
            self.sinks(p)?,
            &self.step,
            records,
        )?)
    }

    fn sinks(&self, p: &AttnParams) -> Result<Option<Region<'_>>> {
        Ok(match &p.sinks {
            Some(s) => {
                let (wid, off) = self.vector_at(s)?;
                Some(Region::new(self.vector_buf(wid), off, 0))
            }
            None => None,
        })
    }

    /// A MoE block: routing (the router folding a one-row `norm` of x and writing its output),
    /// the experts, and the combine (adding into `acc`, and with `records` writing the normed
    /// residual as int8 records for the next product).
    #[allow(clippy::too_many_arguments)]
    fn moe(
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
        d.push(self.ops.moe_route(
            self.src(logits)?,
            0,
            experts as u32,
            k as u32,
            n as u32,
            renorm,
            self.src(Src::Scratch("moe ids"))?,
            self.src(Src::Scratch("moe weights"))?,
        )?);
        let act = glu_op(block.activation);
        if stacked(block) {
            d.extend(self.stacked_experts(x, block, n, k, hidden, width, act)?);
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

    /// Experts of one stacked weight per projection, picked by id on the GPU. Prompts group
    /// the items by expert, so each expert's weights are decoded once per tile of items.
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
    ) -> Result<Vec<Dispatch>> {
        let items = n * k;
        let experts = block.experts.len();
        let grouped = n > 1;
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
                Some((order, tiles)) => self.ops.matmul_experts(
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
        // Decode: gate, up and the activation in one product per weight part.
        let fuse_glu = !grouped
            && e0.gate.bias.is_some() == e0.up.bias.is_some()
            && self
                .weight(e0.gate.w.weight)?
                .same_parts(self.weight(e0.up.w.weight)?);
        if fuse_glu {
            let biases = self
                .bias(&e0.gate.bias, true)?
                .zip(self.bias(&e0.up.bias, true)?);
            d.extend(self.ops.matvec_glu_experts(
                [self.weight(e0.gate.w.weight)?, self.weight(e0.up.w.weight)?],
                [
                    &MatSel {
                        matrix: 0,
                        ..sel(&e0.gate)
                    },
                    &MatSel {
                        matrix: 0,
                        ..sel(&e0.up)
                    },
                ],
                xr,
                Region::new(actb, 0, w),
                items as u32,
                act,
                biases.map(|(g, u)| [g, u]),
                ExpertSel {
                    ids,
                    x_div: k as u32,
                },
            )?);
        } else {
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

/// The view of a linear layer as the product kernels take it.
fn sel(lin: &Linear) -> MatSel {
    let m = &lin.w;
    MatSel {
        matrix: m.matrix,
        offset: m.offset,
        stride: m.stride,
        out_dim: m.out_dim,
        in_dim: m.in_dim,
        input_major: m.input_major,
    }
}

fn fold(n: &Node) -> Fold {
    match *n {
        Node::Norm { x, w, eps, .. } => Fold { x, weight: w, eps },
        _ => unreachable!("only norms fold"),
    }
}

fn rope_of(n: &Node) -> crate::backend::RopeParams {
    match *n {
        Node::Rope { rope, .. } => rope,
        _ => unreachable!("a rope pair holds ropes"),
    }
}

/// The RoPE frequencies as a vector weight.
pub(super) fn freqs(rope: &crate::backend::RopeParams) -> VecRef {
    VecRef {
        weight: rope.freqs,
        row: 0,
        len: rope.dim / 2,
    }
}

pub(super) fn glu_op(act: Activation) -> Eltwise {
    match act {
        Activation::Silu => Eltwise::SwiGlu,
        Activation::GptOssClamped { alpha, limit } => Eltwise::GluOss { alpha, limit },
    }
}
