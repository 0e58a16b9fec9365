//! The fusion rules and the planner that applies them: a graph of ops in, a plan of kernels out.
//!
//! The planner walks the graph once. At each node it tries the rules for the node's op in the
//! order of `RULES`; a rule either merges the node into the kernel just planned (the pattern's
//! earlier ops) or starts a kernel; the first that applies wins, and a node no rule takes
//! becomes a kernel of its own. Afterwards each folded one-row norm is checked: it is dispatched
//! as well where anything but a kernel folding it reads its output. What a rule may fuse also
//! depends on the adapter and the weights (which products take int8 x, which attention shapes
//! the decode kernel serves); the planner asks those through `Facts`, so the rules can be tested
//! on graphs alone.

use super::graph::{stacked, Graph, MoeRef, Node};
use super::plan::{Kernel, Plan};
use crate::backend::{AttnParams, BufId, KvId, Linear, MoeBlock, WeightId};
use std::collections::HashMap;

/// What the rules need to know about buffers, weights and the adapter.
pub trait Facts {
    /// Columns of an activation buffer.
    fn cols(&self, b: BufId) -> usize;
    /// Whether a buffer is read only within the step that writes it
    /// (`Backend::alloc_step_local`).
    fn step_local(&self, b: BufId) -> bool;
    /// Output rows of a weight.
    fn rows(&self, w: WeightId) -> usize;
    /// Whether `lin` is a whole, unsplit 2-D weight that a multi-weight product can read.
    fn whole(&self, lin: &Linear) -> bool;
    /// Whether a one-row product of `w` can read x as int8 records another kernel wrote.
    fn takes_records(&self, w: WeightId) -> bool;
    /// Whether a gate/up/activation product over these weights takes int8 x.
    fn glu_int8(&self, gate: WeightId, up: WeightId, norm: bool) -> bool;
    /// Whether a gate/up/activation product over these weights can write its results as int8
    /// records.
    fn glu_records(&self, gate: WeightId, up: WeightId, norm: bool) -> bool;
    /// Whether the decode attention of `p` over cache `kv` takes RoPE of `rot_dim` dims in.
    fn folds_rope(&self, p: &AttnParams, kv: KvId, rot_dim: usize) -> bool;
    /// Whether the decode attention of `p` over cache `kv` can write its output as int8 records.
    fn attention_records(&self, p: &AttnParams, kv: KvId) -> bool;
    /// Whether the MoE combine of one token of `cols` values can write int8 records.
    fn combine_records(&self, cols: usize) -> bool;
    /// A MoE block the graph names.
    fn moe(&self, r: MoeRef) -> &MoeBlock;
}

/// A rule: the ops it fuses, and what they become.
pub struct Rule {
    pub name: &'static str,
    pub pattern: &'static str,
    pub kernel: &'static str,
    apply: fn(&mut Planner, usize) -> bool,
}

/// The fusion rules, in the order the planner tries them.
pub const RULES: &[Rule] = &[
    Rule {
        name: "add→norm",
        pattern: "add(acc, x) · rms_norm(acc → x, whole rows)",
        kernel: "add_rms_norm: the add and the norm in one pass per row",
        apply: add_norm,
    },
    Rule {
        name: "norm→consumers",
        pattern: "rms_norm(one row, whole row, x → out ≠ x)",
        kernel: "none: the products and the router reading out fold it in",
        apply: defer_norm,
    },
    Rule {
        name: "combine→residual add",
        pattern: "moe(stacked experts, no shared expert) · add(acc, its out)",
        kernel: "moe_combine adds into acc",
        apply: combine_add,
    },
    Rule {
        name: "product→residual add",
        pattern: "matmul(one row) · add(acc, its out)",
        kernel: "the product adds its results into acc",
        apply: product_residual,
    },
    Rule {
        name: "gate+up+activation",
        pattern: "matmul(x → g) · matmul(x → u) · glu(g, u), one row",
        kernel: "matvec_multi: both products and the activation",
        apply: gate_up_act,
    },
    Rule {
        name: "products of one input",
        pattern: "matmul(x) · matmul(x) [· matmul(x)], one row, whole weights",
        kernel: "matvec_multi: two or three products",
        apply: join_products,
    },
    Rule {
        name: "attention→int8 records",
        pattern: "decode attention → out · matmul(out) (int8 weights)",
        kernel: "the attention writes out as int8 records the product reads",
        apply: attention_records,
    },
    Rule {
        name: "gate/up→int8 records",
        pattern: "gate+up+activation → out · matmul(out) (int8 weights), out read by it alone",
        kernel: "the gate/up product writes out as int8 records (only) the product reads",
        apply: gate_up_records,
    },
    Rule {
        name: "combine→int8 records",
        pattern: "moe + add(acc) · rms_norm(acc) · matmul (int8 weights)",
        kernel: "the combine writes the normed residual as int8 records the product reads",
        apply: combine_records,
    },
    Rule {
        name: "norm→product",
        pattern: "rms_norm(one row) · matmul(its out)",
        kernel: "the product reads the norm's input and applies it",
        apply: product,
    },
    Rule {
        name: "rope q+k",
        pattern: "rope(q) · rope(k), same rotation",
        kernel: "rope: both in one dispatch",
        apply: rope_pair,
    },
    Rule {
        name: "rope→KV write",
        pattern: "rope(q) · rope(k) · attention(q, k)",
        kernel: "the cache write turns q and k (one query: the decode attention does all)",
        apply: attention,
    },
    Rule {
        name: "norm→router",
        pattern: "rms_norm(one row) · moe(its out)",
        kernel: "the router's product folds the norm and writes its output for the experts",
        apply: moe,
    },
];

/// Plans `g`: every node ends up in exactly one kernel, in graph order.
pub fn plan(g: &Graph, facts: &dyn Facts) -> Plan {
    let mut p = Planner {
        g,
        f: facts,
        kernels: Vec::new(),
        last_write: HashMap::new(),
        deferred: vec![false; g.nodes.len()],
    };
    for i in 0..g.nodes.len() {
        if !RULES.iter().any(|r| (r.apply)(&mut p, i)) {
            p.kernels.push(Kernel::Single { node: i });
        }
        if let Some(Kernel::Norm { node, .. }) = p.kernels.last() {
            p.deferred[*node] = true;
        }
        for &b in g.nodes[i].writes().as_slice() {
            p.last_write.insert(b, i);
        }
    }
    p.settle_norms();
    Plan { kernels: p.kernels }
}

pub struct Planner<'a> {
    g: &'a Graph,
    f: &'a dyn Facts,
    kernels: Vec<Kernel>,
    /// The last node so far that wrote each buffer.
    last_write: HashMap<BufId, usize>,
    /// Which nodes are one-row norms left for their readers to fold.
    deferred: Vec<bool>,
}

impl Planner<'_> {
    fn node(&self, i: usize) -> &Node {
        &self.g.nodes[i]
    }

    /// The one-row norm that node `i`, reading x into `out` over `n` rows, folds in: the last
    /// writer of x, when that is a deferred norm whose input nothing has rewritten since.
    fn folded_norm(&self, i: usize, x: BufId, out: BufId, n: usize) -> Option<usize> {
        if n != 1 || x == out {
            return None;
        }
        let w = *self.last_write.get(&x)?;
        match *self.node(w) {
            Node::Norm { x: input, .. }
                if self.deferred[w] && self.last_write.get(&input).is_none_or(|&l| l < w) =>
            {
                debug_assert!(w < i);
                Some(w)
            }
            _ => None,
        }
    }

    /// Decides for each deferred norm whether it is dispatched too: where a kernel that does
    /// not fold it reads its output before something rewrites it, or nothing does in this
    /// graph and its output is not step-local (a later step may read it).
    fn settle_norms(&mut self) {
        for k in 0..self.kernels.len() {
            let Kernel::Norm { node, .. } = self.kernels[k] else {
                continue;
            };
            let Node::Norm { out, .. } = *self.node(node) else {
                continue;
            };
            let needed = self.norm_needed(k, node, out);
            self.kernels[k] = Kernel::Norm { node, needed };
        }
    }

    fn norm_needed(&self, k: usize, norm: usize, out: BufId) -> bool {
        for later in &self.kernels[k + 1..] {
            let folds = match later {
                Kernel::Products { norm: n, .. } | Kernel::GateUpAct { norm: n, .. } => {
                    *n == Some(norm)
                }
                // The router writes the norm's output itself.
                Kernel::Moe { norm: n, .. } if *n == Some(norm) => return false,
                _ => false,
            };
            // A read after a write inside one kernel sees the kernel's own value.
            let mut written = false;
            for i in later.nodes() {
                let node = self.node(i);
                if !folds && !written && node.reads().contains(&out) {
                    return true;
                }
                written |= node.writes().contains(&out);
            }
            if written {
                return false;
            }
        }
        !self.f.step_local(out)
    }

    /// Whether a node after `i` reads `b` before one rewrites it, or a later step may (`b` is
    /// not step-local).
    fn read_after(&self, i: usize, b: BufId) -> bool {
        for node in &self.g.nodes[i + 1..] {
            if node.reads().contains(&b) {
                return true;
            }
            if node.writes().contains(&b) {
                return false;
            }
        }
        !self.f.step_local(b)
    }

    /// Plans product `i` on its own (folding the norm `norm`), reading x as the int8 records
    /// that kernel `from` writes.
    fn push_record_reader(&mut self, i: usize, norm: Option<usize>, from: usize) {
        self.kernels.push(Kernel::Products {
            products: vec![i],
            norm,
            records: Some(from),
            residual: None,
        });
    }

    fn last(&self) -> Option<&Kernel> {
        self.kernels.last()
    }
}

fn add_norm(p: &mut Planner, i: usize) -> bool {
    let Node::Norm {
        x, out, n, group, ..
    } = *p.node(i)
    else {
        return false;
    };
    let Some(&Kernel::Single { node: a }) = p.last() else {
        return false;
    };
    let fits = matches!(*p.node(a), Node::Add { acc, x: added, n: rows }
        if acc == x && added == out && rows == n && group == p.f.cols(x));
    if fits {
        *p.kernels.last_mut().expect("checked") = Kernel::AddNorm { add: a, norm: i };
    }
    fits
}

fn defer_norm(p: &mut Planner, i: usize) -> bool {
    let Node::Norm {
        x, out, n, group, ..
    } = *p.node(i)
    else {
        return false;
    };
    let one_row = n == 1 && group == p.f.cols(x) && x != out;
    if one_row {
        p.kernels.push(Kernel::Norm {
            node: i,
            needed: true,
        });
    }
    one_row
}

fn combine_add(p: &mut Planner, i: usize) -> bool {
    let Node::Add { x, n, .. } = *p.node(i) else {
        return false;
    };
    let Some(Kernel::Moe {
        node: m, add: None, ..
    }) = p.kernels.last()
    else {
        return false;
    };
    let Node::Moe {
        block,
        out,
        n: rows,
        ..
    } = *p.node(*m)
    else {
        return false;
    };
    let b = p.f.moe(block);
    if out != x || rows != n || !stacked(b) || b.shared.is_some() {
        return false;
    }
    if let Some(Kernel::Moe { add, .. }) = p.kernels.last_mut() {
        *add = Some(i);
    }
    true
}

fn product_residual(p: &mut Planner, i: usize) -> bool {
    let Node::Add { acc, x, n } = *p.node(i) else {
        return false;
    };
    let Some(Kernel::Products {
        products,
        norm,
        residual: None,
        ..
    }) = p.last()
    else {
        return false;
    };
    let [only] = products.as_slice() else {
        return false;
    };
    let Node::Product {
        x: input,
        out,
        n: rows,
        ..
    } = *p.node(*only)
    else {
        return false;
    };
    let norm_input = norm.map(|d| match *p.node(d) {
        Node::Norm { x, .. } => x,
        _ => input,
    });
    let reads_acc = input == acc || norm_input == Some(acc);
    if out != x || n != 1 || rows != 1 || reads_acc {
        return false;
    }
    if let Some(Kernel::Products { residual, .. }) = p.kernels.last_mut() {
        *residual = Some(i);
    }
    true
}

/// A product that may join others of its input: one row, through a whole weight, into
/// another buffer.
fn joinable(p: &Planner, i: usize) -> Option<(BufId, Linear, BufId)> {
    match *p.node(i) {
        Node::Product { x, lin, out, n: 1 } if x != out && p.f.whole(&lin) => Some((x, lin, out)),
        _ => None,
    }
}

fn join_products(p: &mut Planner, i: usize) -> bool {
    let Some((x, lin, out)) = joinable(p, i) else {
        return false;
    };
    let norm = p.folded_norm(i, x, out, 1);
    let Some(Kernel::Products {
        products,
        norm: pnorm,
        records,
        residual: None,
    }) = p.last()
    else {
        return false;
    };
    let fits = products.len() < 3
        && *pnorm == norm
        && (records.is_none() || (norm.is_some() && p.f.takes_records(lin.w.weight)))
        && products.iter().all(|&j| {
            joinable(p, j).is_some_and(|(px, plin, pout)| {
                px == x && pout != out && plin.bias.is_some() == lin.bias.is_some()
            })
        });
    if fits {
        if let Some(Kernel::Products { products, .. }) = p.kernels.last_mut() {
            products.push(i);
        }
    }
    fits
}

fn gate_up_act(p: &mut Planner, i: usize) -> bool {
    let Node::Glu {
        gate, up, out, n, ..
    } = *p.node(i)
    else {
        return false;
    };
    let Some(Kernel::Products {
        products,
        norm,
        records,
        residual: None,
    }) = p.last()
    else {
        return false;
    };
    let [g, u] = products.as_slice() else {
        return false;
    };
    let (Some((x, lg, og)), Some((_, lu, ou))) = (joinable(p, *g), joinable(p, *u)) else {
        return false;
    };
    let fits = og == gate
        && ou == up
        && out != x
        && n == 1
        && lg.bias.is_none()
        && lu.bias.is_none()
        && p.f.rows(lg.w.weight) == p.f.rows(lu.w.weight);
    if !fits {
        return false;
    }
    // Without int8 x the norm is dispatched on its own rather than folded in: folded, its
    // weights and x² cost this product more than the norm's own dispatch (benches/GPU.md,
    // entry 43). With int8 x, the quantization of x (a dispatch anyway) applies it.
    let int8 = p.f.glu_int8(lg.w.weight, lu.w.weight, norm.is_some());
    let kernel = Kernel::GateUpAct {
        gate: *g,
        up: *u,
        glu: i,
        norm: norm.filter(|_| int8),
        records: records.filter(|_| int8),
        records_out: false,
    };
    *p.kernels.last_mut().expect("checked") = kernel;
    true
}

fn attention_records(p: &mut Planner, i: usize) -> bool {
    let Node::Product { x, lin, out, n } = *p.node(i) else {
        return false;
    };
    let k = p.kernels.len();
    let Some(Kernel::Attention {
        node,
        decode: true,
        records: false,
        ..
    }) = p.last()
    else {
        return false;
    };
    let Node::Attention {
        kv,
        out: written,
        p: ap,
        ..
    } = *p.node(*node)
    else {
        return false;
    };
    let fits = written == x
        && n == 1
        && x != out
        && p.folded_norm(i, x, out, n).is_none()
        && p.f.takes_records(lin.w.weight)
        && p.f.attention_records(&ap, kv);
    if !fits {
        return false;
    }
    if let Some(Kernel::Attention { records, .. }) = p.kernels.last_mut() {
        *records = true;
    }
    p.push_record_reader(i, None, k - 1);
    true
}

fn gate_up_records(p: &mut Planner, i: usize) -> bool {
    let Node::Product { x, lin, out, n } = *p.node(i) else {
        return false;
    };
    let k = p.kernels.len();
    let Some(&Kernel::GateUpAct {
        gate,
        up,
        glu,
        norm,
        records_out: false,
        ..
    }) = p.last()
    else {
        return false;
    };
    let (
        Node::Glu { out: written, .. },
        Node::Product { lin: lg, .. },
        Node::Product { lin: lu, .. },
    ) = (p.node(glu), p.node(gate), p.node(up))
    else {
        return false;
    };
    // The f32 results are not written at all: nothing else may read them.
    let fits = *written == x
        && n == 1
        && x != out
        && !p.read_after(i, x)
        && p.f.takes_records(lin.w.weight)
        && p.f.glu_records(lg.w.weight, lu.w.weight, norm.is_some());
    if !fits {
        return false;
    }
    if let Some(Kernel::GateUpAct { records_out, .. }) = p.kernels.last_mut() {
        *records_out = true;
    }
    p.push_record_reader(i, None, k - 1);
    true
}

fn combine_records(p: &mut Planner, i: usize) -> bool {
    let Node::Product { x, lin, out, n } = *p.node(i) else {
        return false;
    };
    let Some(norm) = p.folded_norm(i, x, out, n) else {
        return false;
    };
    // The kernels since the combine: only the deferred norm this product folds.
    let k = p.kernels.len();
    if k < 2
        || p.kernels[k - 1]
            != (Kernel::Norm {
                node: norm,
                needed: true,
            })
    {
        return false;
    }
    let Kernel::Moe {
        node: m,
        add: Some(a),
        records: None,
        ..
    } = p.kernels[k - 2]
    else {
        return false;
    };
    let (Node::Add { acc, .. }, Node::Moe { n: rows, .. }, Node::Norm { x: normed, .. }) =
        (p.node(a), p.node(m), p.node(norm))
    else {
        return false;
    };
    let fits = acc == normed
        && *rows == 1
        && p.f.takes_records(lin.w.weight)
        && p.f.combine_records(p.f.cols(*acc));
    if !fits {
        return false;
    }
    if let Kernel::Moe { records, .. } = &mut p.kernels[k - 2] {
        *records = Some(norm);
    }
    p.push_record_reader(i, Some(norm), k - 2);
    true
}

fn product(p: &mut Planner, i: usize) -> bool {
    let Node::Product { x, out, n, .. } = *p.node(i) else {
        return false;
    };
    let norm = p.folded_norm(i, x, out, n);
    p.kernels.push(Kernel::Products {
        products: vec![i],
        norm,
        records: None,
        residual: None,
    });
    true
}

fn rope_pair(p: &mut Planner, i: usize) -> bool {
    let Node::Rope { x, n, pos, rope } = *p.node(i) else {
        return false;
    };
    let Some(&Kernel::Single { node: r }) = p.last() else {
        return false;
    };
    let fits = matches!(*p.node(r), Node::Rope { x: q, n: rows, pos: at, rope: turn }
        if q != x && rows == n && at == pos && turn == rope);
    if fits {
        *p.kernels.last_mut().expect("checked") = Kernel::RopePair { q: r, k: i };
    }
    fits
}

fn attention(p: &mut Planner, i: usize) -> bool {
    let Node::Attention {
        q, k, v, kv, p: ap, ..
    } = *p.node(i)
    else {
        return false;
    };
    let mut rope = None;
    if let Some(&Kernel::RopePair { q: rq, k: rk }) = p.last() {
        if let (
            Node::Rope {
                x: qx,
                n,
                pos,
                rope: turn,
            },
            Node::Rope { x: kx, .. },
        ) = (p.node(rq), p.node(rk))
        {
            let same_step = *pos == ap.pos && *n == ap.n && turn.head_dim == ap.head_dim;
            if *qx == q && *kx == k && v != q && v != k && same_step {
                rope = Some((rq, rk, turn.dim));
            }
        }
    }
    if rope.is_some() {
        p.kernels.pop();
    }
    let decode = rope.is_some_and(|(_, _, dim)| p.f.folds_rope(&ap, kv, dim));
    p.kernels.push(Kernel::Attention {
        node: i,
        rope: rope.map(|(q, k, _)| (q, k)),
        decode,
        records: false,
    });
    true
}

fn moe(p: &mut Planner, i: usize) -> bool {
    let Node::Moe { x, out, n, .. } = *p.node(i) else {
        return false;
    };
    let norm = p.folded_norm(i, x, out, n);
    p.kernels.push(Kernel::Moe {
        node: i,
        norm,
        add: None,
        records: None,
    });
    true
}

#[cfg(test)]
#[path = "fusion_tests.rs"]
mod tests;
