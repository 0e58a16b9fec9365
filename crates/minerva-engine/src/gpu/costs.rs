//! What `minerva run --explain-plan` prints of the last step submitted: each kernel's
//! dispatches and the bytes it reads (weights, activations from outside the kernel, the KV
//! cache), from which `plan::explain` gives its bandwidth floor.

use super::backend::GpuBackend;
use super::graph::{Graph, Node};
use super::plan::{explain, DispatchInfo, KernelCost};

impl GpuBackend {
    /// The plan of the last step submitted, with each kernel's dispatches, the bytes it reads,
    /// and its floor at `bandwidth` bytes/s.
    pub fn explain_plan(&self, bandwidth: f64) -> Option<String> {
        let (g, key) = self.last_graph.as_ref()?;
        let plan = self.plans.get(key)?;
        let enc = self.encoded.get(key)?;
        let mut at = 0;
        let costs: Vec<KernelCost> = plan
            .kernels
            .iter()
            .zip(&enc.per_kernel)
            .map(|(k, &count)| {
                let list = &enc.dispatches[at..at + count];
                at += count;
                let mut c = self.cost(g, &k.nodes(), k.dispatched());
                c.dispatches = list
                    .iter()
                    .map(|d| DispatchInfo {
                        label: d.label.to_string(),
                        groups: d.groups,
                    })
                    .collect();
                c
            })
            .collect();
        Some(explain(g, plan, &costs, bandwidth))
    }

    /// The bytes the nodes of one kernel read: weights, activations that come from outside the
    /// kernel, and the KV cache up to the step's position.
    fn cost(&self, g: &Graph, nodes: &[usize], dispatched: bool) -> KernelCost {
        let mut c = KernelCost::default();
        if !dispatched {
            return c;
        }
        let mut inside = Vec::new();
        for &i in nodes {
            let node = &g.nodes[i];
            for b in node.reads().as_slice().iter().copied() {
                if !inside.contains(&b) {
                    if let Ok(buf) = self.buf(b) {
                        c.activation_bytes += (node.rows() * buf.cols * 4) as u64;
                    }
                }
            }
            inside.extend_from_slice(node.writes().as_slice());
            c.weight_bytes += match node {
                Node::Product { lin, .. } => self.view_bytes(lin),
                Node::Embed { table, n, .. } => self.row_bytes(*table) * *n as u64,
                Node::EmbedChoice { table, .. } => self.row_bytes(*table),
                Node::Norm { w, .. } => w.len as u64 * 4,
                Node::Moe { block, n, .. } => {
                    let b = self.moes.get(*block);
                    let used = (n * b.routing.top_k).min(b.experts.len()) as u64;
                    let e = &b.experts[0];
                    self.view_bytes(&b.router)
                        + used
                            * (self.view_bytes(&e.gate)
                                + self.view_bytes(&e.up)
                                + self.view_bytes(&e.down))
                }
                _ => 0,
            };
            if let Node::Attention { kv, p, .. } = node {
                if let Some(Some(k)) = self.kvs.get(kv.0 as usize) {
                    let seen = (p.pos + p.n).min(k.cache_len) as u64;
                    let unit = if self.kv_f16 { 2 } else { 4 };
                    c.cache_bytes += 2 * seen * (p.n_kv_heads * p.head_dim) as u64 * unit;
                }
            }
        }
        c
    }
}
