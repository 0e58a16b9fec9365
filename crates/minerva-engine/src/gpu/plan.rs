//! A step plan: the kernels a graph of ops runs as, which nodes each kernel covers and what it
//! folds in. `fusion.rs` makes plans; `encode.rs` turns each kernel into dispatches; `explain`
//! prints a plan with its dispatches and the bytes each kernel reads.

use super::graph::{Graph, Node};
use std::fmt::Write;

/// One kernel of a plan (one or a few dispatches), by the node indices it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kernel {
    /// One node, on its own.
    Single { node: usize },
    /// A one-row norm that the products reading its output fold in. It is dispatched too
    /// (`needed`) where anything else reads its output, or nothing rewrites it in this step.
    Norm { node: usize, needed: bool },
    /// A residual add and the norm of its result, in one pass over each row.
    AddNorm { add: usize, norm: usize },
    /// Products of one input: one node (which may add its results into a residual), or two or
    /// three of one row of x through whole weights in one dispatch. `norm` is a one-row norm of
    /// x folded in (the products read its input); `records` the kernel that wrote x as int8
    /// records for them.
    Products {
        products: Vec<usize>,
        norm: Option<usize>,
        records: Option<usize>,
        residual: Option<usize>,
    },
    /// The gate and up products of one row and the activation over them, in one dispatch;
    /// `records_out`: the results written as int8 records (only) for the product reading them.
    GateUpAct {
        gate: usize,
        up: usize,
        glu: usize,
        norm: Option<usize>,
        records: Option<usize>,
        records_out: bool,
    },
    /// The same RoPE of q and k, in one dispatch.
    RopePair { q: usize, k: usize },
    /// The cache write and attention; with `rope` (the pair's nodes) the write also turns q
    /// and k, and with `decode` one kernel does RoPE, the write and the attention of one query,
    /// also writing its output as int8 records where `records`.
    Attention {
        node: usize,
        rope: Option<(usize, usize)>,
        decode: bool,
        records: bool,
    },
    /// Routing, experts and combine of a MoE block. `norm`: a one-row norm of x the router folds
    /// in (writing x for the experts); `add`: the residual add the combine does; `records`: the
    /// norm (of the residual) whose normed int8 records the combine writes for the next product.
    Moe {
        node: usize,
        norm: Option<usize>,
        add: Option<usize>,
        records: Option<usize>,
    },
}

impl Kernel {
    /// Every node the kernel covers, in graph order.
    pub fn nodes(&self) -> Vec<usize> {
        let mut v = match self {
            Kernel::Single { node } | Kernel::Norm { node, .. } => vec![*node],
            Kernel::AddNorm { add, norm } => vec![*add, *norm],
            Kernel::Products {
                products, residual, ..
            } => products.iter().copied().chain(*residual).collect(),
            Kernel::GateUpAct { gate, up, glu, .. } => vec![*gate, *up, *glu],
            Kernel::RopePair { q, k } => vec![*q, *k],
            Kernel::Attention { node, rope, .. } => {
                let mut v: Vec<usize> = rope.map(|(q, k)| vec![q, k]).unwrap_or_default();
                v.push(*node);
                v
            }
            Kernel::Moe { node, add, .. } => std::iter::once(*node).chain(*add).collect(),
        };
        v.sort_unstable();
        v
    }

    /// Whether the kernel runs anything (a norm folded everywhere does not).
    pub fn dispatched(&self) -> bool {
        !matches!(self, Kernel::Norm { needed: false, .. })
    }

    /// The fusion rules that made the kernel, by their names in `fusion::RULES`, with "int8
    /// records" on a product that reads records another kernel wrote ("" for one node on its
    /// own).
    pub fn rule(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        match self {
            Kernel::Single { .. } => {}
            Kernel::Norm { .. } => parts.push("norm→consumers"),
            Kernel::AddNorm { .. } => parts.push("add→norm"),
            Kernel::Products {
                products,
                norm,
                records,
                residual,
            } => {
                if norm.is_some() {
                    parts.push("norm→product");
                }
                if products.len() > 1 {
                    parts.push("products of one input");
                }
                if records.is_some() {
                    parts.push("int8 records");
                }
                if residual.is_some() {
                    parts.push("product→residual add");
                }
            }
            Kernel::GateUpAct {
                norm,
                records,
                records_out,
                ..
            } => {
                if norm.is_some() {
                    parts.push("norm→product");
                }
                parts.push("gate+up+activation");
                if records.is_some() {
                    parts.push("int8 records");
                }
                if *records_out {
                    parts.push("gate/up→int8 records");
                }
            }
            Kernel::RopePair { .. } => parts.push("rope q+k"),
            Kernel::Attention {
                rope,
                decode,
                records,
                ..
            } => {
                if rope.is_some() {
                    parts.extend(["rope q+k", "rope→KV write"]);
                }
                if *decode {
                    parts.push("decode attention doing both");
                }
                if *records {
                    parts.push("attention→int8 records");
                }
            }
            Kernel::Moe {
                norm, add, records, ..
            } => {
                if norm.is_some() {
                    parts.push("norm→router");
                }
                if add.is_some() {
                    parts.push("combine→residual add");
                }
                if records.is_some() {
                    parts.push("combine→int8 records");
                }
            }
        }
        parts.join(", ")
    }
}

/// The kernels of one graph, in the order they run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub kernels: Vec<Kernel>,
}

/// One dispatch of a kernel, as `explain` prints it.
#[derive(Debug, Clone)]
pub struct DispatchInfo {
    pub label: String,
    pub groups: [u32; 3],
}

/// What `explain` prints of a kernel besides its plan: its dispatches and the bytes it reads.
#[derive(Debug, Clone, Default)]
pub struct KernelCost {
    pub dispatches: Vec<DispatchInfo>,
    pub weight_bytes: u64,
    pub activation_bytes: u64,
    pub cache_bytes: u64,
}

impl KernelCost {
    pub fn bytes(&self) -> u64 {
        self.weight_bytes + self.activation_bytes + self.cache_bytes
    }
}

/// The plan as text: one line per kernel with the ops it covers, the rule that fused them, its
/// dispatches, the bytes it reads, and the time those bytes take at `bandwidth` bytes/s (the
/// kernel's floor); totals at the end.
pub fn explain(g: &Graph, plan: &Plan, costs: &[KernelCost], bandwidth: f64) -> String {
    let mut s = String::new();
    let mut total = KernelCost::default();
    let mut dispatches = 0;
    let _ = writeln!(
        s,
        "{:>3} {:>11} {:>9}  dispatches (kernel [workgroups]) · fused by · ops",
        "#", "bytes read", "floor µs"
    );
    for (i, (k, c)) in plan.kernels.iter().zip(costs).enumerate() {
        let ops: Vec<String> = k.nodes().iter().map(|&n| describe(&g.nodes[n])).collect();
        let list: Vec<String> = c
            .dispatches
            .iter()
            .map(|d| {
                format!(
                    "{} [{}×{}×{}]",
                    d.label, d.groups[0], d.groups[1], d.groups[2]
                )
            })
            .collect();
        let list = if k.dispatched() {
            list.join(", ")
        } else {
            "none (folded into its readers)".to_string()
        };
        let rule = k.rule();
        let _ = writeln!(
            s,
            "{i:>3} {:>11} {:>9.2}  {} · {} · {}",
            c.bytes(),
            c.bytes() as f64 / bandwidth * 1e6,
            list,
            if rule.is_empty() { "-" } else { &rule },
            ops.join(" + ")
        );
        total.weight_bytes += c.weight_bytes;
        total.activation_bytes += c.activation_bytes;
        total.cache_bytes += c.cache_bytes;
        dispatches += c.dispatches.len();
    }
    let _ = writeln!(
        s,
        "{} ops in {} kernels, {} dispatches; reads {:.1} MB (weights {:.1}, activations {:.2}, \
         KV cache {:.2}); floor {:.1} µs at {:.0} GB/s",
        g.nodes.len(),
        plan.kernels.iter().filter(|k| k.dispatched()).count(),
        dispatches,
        total.bytes() as f64 / 1e6,
        total.weight_bytes as f64 / 1e6,
        total.activation_bytes as f64 / 1e6,
        total.cache_bytes as f64 / 1e6,
        total.bytes() as f64 / bandwidth * 1e6,
        bandwidth / 1e9
    );
    s
}

/// A node in a few words: its op and its main operands.
fn describe(n: &Node) -> String {
    match n {
        Node::Product { lin, n, .. } => {
            format!(
                "matmul w{} {}×{} n{}",
                lin.w.weight.0, lin.w.out_dim, lin.w.in_dim, n
            )
        }
        Node::Norm { n, group, .. } => format!("rms_norm g{group} n{n}"),
        Node::Attention { p, .. } => format!(
            "attention {}/{}×{} n{}",
            p.n_heads, p.n_kv_heads, p.head_dim, p.n
        ),
        Node::Moe { n, .. } => format!("moe n{n}"),
        other => format!("{} n{}", other.name(), other.rows()),
    }
}
