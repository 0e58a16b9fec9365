//! The step graph: the backend's coarse ops as the transformer calls them, recorded as data
//! until something must run. The planner (`fusion.rs`) turns a graph into a plan of kernels;
//! the graph's key, which leaves out the position, names its shape class, so that every decode
//! step replays one plan.

use super::key::{key, KeyPart};
use crate::backend::{AttnParams, BufId, KvId, Linear, MoeBlock, RopeParams, VecRef, WeightId};
use minerva_formats::Activation;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;

/// A MoE block kept by the backend (`MoeTable`): nodes name it by index, so that a step does not
/// copy its list of experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MoeRef(pub u32);

/// One recorded op, with its operands.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `out[:n] = table[ids]`, the ids in the backend's id buffer.
    Embed {
        table: WeightId,
        out: BufId,
        n: usize,
    },
    /// `out[0] = table[chosen]`, the token the last greedy choice left on the device.
    EmbedChoice { table: WeightId, out: BufId },
    /// RMSNorm of groups of `group` values of the first `n` rows.
    Norm {
        x: BufId,
        w: VecRef,
        out: BufId,
        n: usize,
        group: usize,
        eps: f32,
    },
    /// `out[:n] = x[:n] · Wᵀ + b`.
    Product {
        x: BufId,
        lin: Linear,
        out: BufId,
        n: usize,
    },
    /// In place: RoPE of the first `n` rows of x at positions `pos ..`.
    Rope {
        x: BufId,
        n: usize,
        pos: usize,
        rope: RopeParams,
    },
    /// Cache write and causal attention of `p.n` queries.
    Attention {
        q: BufId,
        k: BufId,
        v: BufId,
        kv: KvId,
        out: BufId,
        p: AttnParams,
    },
    /// `out = act(gate, up)`.
    Glu {
        gate: BufId,
        up: BufId,
        out: BufId,
        n: usize,
        act: Activation,
    },
    /// `out[:n] = moe(x[:n])`.
    Moe {
        x: BufId,
        block: MoeRef,
        out: BufId,
        n: usize,
    },
    /// In place: `acc[:n] += x[:n]`.
    Add { acc: BufId, x: BufId, n: usize },
    /// `dst[dst_row..][:n] = src[src_row..][:n]`.
    Copy {
        src: BufId,
        src_row: usize,
        dst: BufId,
        dst_row: usize,
        n: usize,
    },
    /// Index of the largest value of row `row` of x, into the chosen-token buffer.
    Argmax { x: BufId, row: usize },
    /// The `k` largest values of row `row` of x, into the selection buffers.
    TopK { x: BufId, row: usize, k: usize },
    /// In place: the repetition penalty on row `row` of x (the tokens in the step's settings).
    Penalize { x: BufId, row: usize },
    /// A draw from the `k` candidates `TopK` selected from row `row` of x, into the
    /// chosen-token buffer.
    Sample { x: BufId, row: usize, k: usize },
}

/// Up to three buffers an op reads or writes, without allocating.
#[derive(Debug, Clone, Copy)]
pub struct Bufs {
    ids: [BufId; 3],
    len: usize,
}

impl Bufs {
    fn of(list: &[BufId]) -> Bufs {
        let mut ids = [BufId(0); 3];
        ids[..list.len()].copy_from_slice(list);
        Bufs {
            ids,
            len: list.len(),
        }
    }

    pub fn as_slice(&self) -> &[BufId] {
        &self.ids[..self.len]
    }

    pub fn contains(&self, b: &BufId) -> bool {
        self.as_slice().contains(b)
    }
}

impl Node {
    /// The op's name, as `--explain-plan` prints it.
    pub fn name(&self) -> &'static str {
        match self {
            Node::Embed { .. } => "embed",
            Node::EmbedChoice { .. } => "embed chosen",
            Node::Norm { .. } => "rms_norm",
            Node::Product { .. } => "matmul",
            Node::Rope { .. } => "rope",
            Node::Attention { .. } => "attention",
            Node::Glu { .. } => "glu",
            Node::Moe { .. } => "moe",
            Node::Add { .. } => "add",
            Node::Copy { .. } => "copy_rows",
            Node::Argmax { .. } => "argmax",
            Node::TopK { .. } => "top_k",
            Node::Penalize { .. } => "repetition penalty",
            Node::Sample { .. } => "sample",
        }
    }

    /// The activation buffers the op reads.
    pub fn reads(&self) -> Bufs {
        match *self {
            Node::Embed { .. } | Node::EmbedChoice { .. } => Bufs::of(&[]),
            Node::Norm { x, .. } | Node::Product { x, .. } | Node::Rope { x, .. } => Bufs::of(&[x]),
            Node::Attention { q, k, v, .. } => Bufs::of(&[q, k, v]),
            Node::Glu { gate, up, .. } => Bufs::of(&[gate, up]),
            Node::Moe { x, .. } => Bufs::of(&[x]),
            Node::Add { acc, x, .. } => Bufs::of(&[acc, x]),
            Node::Copy { src, .. } => Bufs::of(&[src]),
            Node::Argmax { x, .. } | Node::TopK { x, .. } => Bufs::of(&[x]),
            Node::Penalize { x, .. } | Node::Sample { x, .. } => Bufs::of(&[x]),
        }
    }

    /// The activation buffers the op writes (RoPE and the attention turn q and k in place).
    pub fn writes(&self) -> Bufs {
        match *self {
            Node::Embed { out, .. } | Node::EmbedChoice { out, .. } => Bufs::of(&[out]),
            Node::Norm { out, .. } | Node::Product { out, .. } => Bufs::of(&[out]),
            Node::Rope { x, .. } => Bufs::of(&[x]),
            Node::Attention { q, k, out, .. } => Bufs::of(&[q, k, out]),
            Node::Glu { out, .. } | Node::Moe { out, .. } => Bufs::of(&[out]),
            Node::Add { acc, .. } => Bufs::of(&[acc]),
            Node::Copy { dst, .. } => Bufs::of(&[dst]),
            Node::Penalize { x, .. } => Bufs::of(&[x]),
            Node::Argmax { .. } | Node::TopK { .. } | Node::Sample { .. } => Bufs::of(&[]),
        }
    }

    /// The rows the op works on (tokens).
    pub fn rows(&self) -> usize {
        match *self {
            Node::Embed { n, .. }
            | Node::Norm { n, .. }
            | Node::Product { n, .. }
            | Node::Rope { n, .. }
            | Node::Glu { n, .. }
            | Node::Moe { n, .. }
            | Node::Add { n, .. }
            | Node::Copy { n, .. } => n,
            Node::Attention { p, .. } => p.n,
            Node::EmbedChoice { .. }
            | Node::Argmax { .. }
            | Node::TopK { .. }
            | Node::Penalize { .. }
            | Node::Sample { .. } => 1,
        }
    }
}

/// Feeds a node into a key; positions stay out (the step uniform carries them).
impl KeyPart for Node {
    fn feed(&self, h: &mut DefaultHasher) {
        macro_rules! feed {
            ($($e:expr),*) => {{ $( KeyPart::feed(&$e, h); )* }};
        }
        match self {
            Node::Embed { table, out, n } => feed!("embed", table, out, n),
            Node::EmbedChoice { table, out } => feed!("embed chosen", table, out),
            Node::Norm {
                x,
                w,
                out,
                n,
                group,
                eps,
            } => feed!("norm", x, w, out, n, group, eps),
            Node::Product { x, lin, out, n } => feed!("product", x, lin, out, n),
            Node::Rope { x, n, rope, .. } => feed!("rope", x, n, rope),
            Node::Attention {
                q,
                k,
                v,
                kv,
                out,
                p,
            } => feed!("attention", q, k, v, kv, out, p),
            Node::Glu {
                gate,
                up,
                out,
                n,
                act,
            } => feed!("glu", gate, up, out, n, act),
            Node::Moe { x, block, out, n } => feed!("moe", x, block.0, out, n),
            Node::Add { acc, x, n } => feed!("add", acc, x, n),
            Node::Copy {
                src,
                src_row,
                dst,
                dst_row,
                n,
            } => feed!("copy", src, src_row, dst, dst_row, n),
            Node::Argmax { x, row } => feed!("argmax", x, row),
            Node::TopK { x, row, k } => feed!("top_k", x, row, k),
            Node::Penalize { x, row } => feed!("penalize", x, row),
            Node::Sample { x, row, k } => feed!("sample", x, row, k),
        }
    }
}

/// The ops recorded since the last submit.
#[derive(Debug, Default, Clone)]
pub struct Graph {
    pub nodes: Vec<Node>,
}

impl Graph {
    pub fn with_capacity(n: usize) -> Graph {
        Graph {
            nodes: Vec::with_capacity(n),
        }
    }

    /// The graph's shape class: equal for two steps that differ only in positions.
    pub fn key(&self) -> u64 {
        key!(self.nodes.as_slice())
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The MoE blocks the transformer has passed in, each kept once.
#[derive(Default)]
pub struct MoeTable {
    blocks: Vec<MoeBlock>,
    index: HashMap<u64, Vec<u32>>,
}

impl MoeTable {
    /// The reference of `block`, adding it on first sight.
    pub fn intern(&mut self, block: &MoeBlock) -> MoeRef {
        let k = moe_key(block);
        let same = self.index.entry(k).or_default();
        if let Some(&i) = same.iter().find(|&&i| self.blocks[i as usize] == *block) {
            return MoeRef(i);
        }
        self.blocks.push(block.clone());
        let i = self.blocks.len() as u32 - 1;
        same.push(i);
        MoeRef(i)
    }

    pub fn get(&self, r: MoeRef) -> &MoeBlock {
        &self.blocks[r.0 as usize]
    }
}

fn moe_key(b: &MoeBlock) -> u64 {
    let shared = b.shared.as_ref().map(|(f, g)| key!(f, g));
    key!(
        b.router,
        b.experts.as_slice(),
        b.routing.top_k,
        b.routing.softmax_after_topk,
        b.routing.norm_topk_prob,
        b.activation,
        shared
    )
}

/// Whether the experts are the matrices 0..E of one stacked weight per projection, in order,
/// with identical views: then the GPU picks them by id.
pub fn stacked(block: &MoeBlock) -> bool {
    let e0 = &block.experts[0];
    let same = |a: &Linear, b: &Linear, e: usize| {
        a.w.weight == b.w.weight
            && b.w.matrix == e
            && crate::backend::MatView { matrix: e, ..a.w } == b.w
            && match (&a.bias, &b.bias) {
                (None, None) => true,
                (Some(x), Some(y)) => x.weight == y.weight && y.row == x.row + e && x.len == y.len,
                _ => false,
            }
    };
    e0.gate.w.matrix == 0
        && block.experts.iter().enumerate().all(|(e, f)| {
            same(&e0.gate, &f.gate, e) && same(&e0.up, &f.up, e) && same(&e0.down, &f.down, e)
        })
}
