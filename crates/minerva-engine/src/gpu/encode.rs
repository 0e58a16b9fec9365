//! Turning a plan's kernels into dispatches: each kernel's pipelines, parameters and bind
//! groups, made once per shape class and replayed by every later step of that class.

use super::backend::GpuBackend;
use super::buffers::Src;
use super::graph::{Graph, Node};
use super::ops::{Bias, Eltwise, Folds, MatSel, Multi, NormFold, Region, XRecords};
use super::pipelines::Dispatch;
use super::plan::{Kernel, Plan};
use super::weights::GpuWeight;
use crate::backend::{AttnParams, BufId, Linear, VecRef};
use crate::error::{EngineError, Result};
use minerva_formats::Activation;
use std::collections::HashMap;

/// A one-row norm as the kernels that fold it take it: its input and its weights.
#[derive(Clone, Copy)]
pub(super) struct Fold {
    pub x: BufId,
    pub weight: VecRef,
    pub eps: f32,
}

fn bad(what: String) -> EngineError {
    EngineError::Backend(what)
}

impl GpuBackend {
    /// The dispatches of each kernel of `plan`, in order. `encoded` sees the kernels encoded so
    /// far after each one, so that a caller can send them to the GPU while the rest encode.
    pub(super) fn encode(
        &self,
        g: &Graph,
        plan: &Plan,
        encoded: &mut dyn FnMut(&[Vec<Dispatch>]) -> Result<()>,
    ) -> Result<Vec<Vec<Dispatch>>> {
        // Records a kernel writes for a later one, by the writer's index.
        let mut records: HashMap<usize, XRecords> = HashMap::new();
        let mut out = Vec::with_capacity(plan.kernels.len());
        for (at, k) in plan.kernels.iter().enumerate() {
            let d = match k {
                Kernel::Single { node } => self.encode_node(&g.nodes[*node])?,
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
                    records_out,
                } => {
                    let norm = norm.map(|n| fold(&g.nodes[n]));
                    let writes = match (records_out, &g.nodes[*gate]) {
                        (true, Node::Product { lin, .. }) => {
                            let rows = self.weight(lin.w.weight)?.rows as u32;
                            let r = self.ops.glu_records(rows);
                            records.insert(at, r.clone());
                            Some(r)
                        }
                        _ => None,
                    };
                    let recs = from.and_then(|r| records.get(&r));
                    self.gate_up_act(g, [*gate, *up, *glu], norm, recs, writes.as_ref())?
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
            encoded(&out)?;
        }
        Ok(out)
    }

    fn encode_node(&self, node: &Node) -> Result<Vec<Dispatch>> {
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
                    Some(&self.step),
                )?]
            }
            Node::Penalize { x, .. } => vec![self.ops.sample_penalize(
                &self.sample_params,
                &self.buf(x)?.buf,
                &self.chosen,
                &self.pen_ids,
            )?],
            Node::Sample { x, .. } => vec![self.ops.sample_pick(
                &self.sample_params,
                &self.buf(x)?.buf,
                &self.chosen,
                self.src(Src::Scratch("selected ids"))?,
                self.src(Src::Scratch("selected values"))?,
                &self.step,
            )?],
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

    pub(super) fn norm_fold(&self, f: &Fold) -> Result<NormFold<'_>> {
        let (wid, woff) = self.vector_at(&f.weight)?;
        Ok(NormFold {
            buf: self.vector_buf(wid),
            offset: woff,
            eps: f.eps,
            records: None,
        })
    }

    pub(super) fn bias(&self, b: &Option<VecRef>, expert_stride: bool) -> Result<Option<Bias<'_>>> {
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

    /// The gate/up/activation product; with `writes` its results go out as those int8
    /// records instead of into the glu's output.
    fn gate_up_act(
        &self,
        g: &Graph,
        [gate, up, glu]: [usize; 3],
        norm: Option<Fold>,
        records: Option<&XRecords>,
        writes: Option<&XRecords>,
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
        let xr = Region::new(&self.buf(input)?.buf, 0, 0);
        let norm = match &norm {
            Some(f) => Some(NormFold {
                records,
                ..self.norm_fold(f)?
            }),
            None => None,
        };
        Ok(match writes {
            Some(r) => self.ops.gate_up_records(&ws, xr, glu_op(*act), norm, r)?,
            None => self.ops.matvec_multi(
                &ws,
                xr,
                &[&self.buf(*out)?.buf],
                Multi::Glu(glu_op(*act)),
                norm,
                &[],
            )?,
        })
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
            super::key::attention_keys(p),
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
}

/// The view of a linear layer as the product kernels take it.
pub(super) fn sel(lin: &Linear) -> MatSel {
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
