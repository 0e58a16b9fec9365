//! The fusion rules on graphs alone: the ops a transformer step records in, the plan out.

use super::*;
use crate::backend::{GatedFfn, MatView, RopeParams, Routing, VecRef};
use minerva_formats::{Activation, RopeStyle};
use std::collections::{HashMap, HashSet};

/// Facts set by each test: every weight whole, int8 where asked.
#[derive(Default)]
struct Fake {
    cols: HashMap<BufId, usize>,
    int8: bool,
    moes: Vec<MoeBlock>,
    step_local: HashSet<BufId>,
}

impl Facts for Fake {
    fn cols(&self, b: BufId) -> usize {
        self.cols[&b]
    }
    fn step_local(&self, b: BufId) -> bool {
        self.step_local.contains(&b)
    }
    fn rows(&self, _w: WeightId) -> usize {
        64
    }
    fn whole(&self, lin: &Linear) -> bool {
        lin.w.matrix == 0
    }
    fn takes_records(&self, _w: WeightId) -> bool {
        self.int8
    }
    fn glu_int8(&self, _g: WeightId, _u: WeightId, norm: bool) -> bool {
        self.int8 && norm
    }
    fn glu_records(&self, _g: WeightId, _u: WeightId, norm: bool) -> bool {
        self.int8 && norm
    }
    fn folds_rope(&self, p: &AttnParams, _kv: KvId, _dim: usize) -> bool {
        p.n == 1
    }
    fn attention_records(&self, _p: &AttnParams, _kv: KvId) -> bool {
        self.int8
    }
    fn combine_records(&self, _cols: usize) -> bool {
        self.int8
    }
    fn moe(&self, r: MoeRef) -> &MoeBlock {
        &self.moes[r.0 as usize]
    }
}

// Buffers as the transformer names them.
const X: BufId = BufId(0);
const H: BufId = BufId(1);
const Q: BufId = BufId(2);
const K: BufId = BufId(3);
const V: BufId = BufId(4);
const ATT: BufId = BufId(5);
const GATE: BufId = BufId(6);
const UP: BufId = BufId(7);
const ACT: BufId = BufId(8);
const LAST: BufId = BufId(9);
const LOGITS: BufId = BufId(10);
const MOE_OUT: BufId = BufId(11);

fn lin(w: u32) -> Linear {
    Linear {
        w: MatView::plain(WeightId(w), 64, 64),
        bias: None,
    }
}

fn norm_w(w: u32) -> VecRef {
    VecRef {
        weight: WeightId(w),
        row: 0,
        len: 64,
    }
}

fn rope() -> RopeParams {
    RopeParams {
        freqs: WeightId(99),
        style: RopeStyle::Halves,
        dim: 16,
        head_dim: 16,
        attention_factor: 1.0,
    }
}

fn attn(n: usize, pos: usize) -> AttnParams {
    AttnParams {
        n,
        pos,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        window: None,
        sinks: None,
        scale: 0.25,
    }
}

fn facts(int8: bool) -> Fake {
    let mut f = Fake {
        int8,
        ..Fake::default()
    };
    for b in 0..12 {
        f.cols.insert(BufId(b), 64);
    }
    // As the transformer allocates it: only the down product reads it.
    f.step_local.insert(ACT);
    f.moes.push(MoeBlock {
        router: lin(40),
        experts: (0..4)
            .map(|e| GatedFfn {
                gate: Linear {
                    w: MatView {
                        matrix: e,
                        ..MatView::plain(WeightId(41), 64, 64)
                    },
                    bias: None,
                },
                up: Linear {
                    w: MatView {
                        matrix: e,
                        ..MatView::plain(WeightId(42), 64, 64)
                    },
                    bias: None,
                },
                down: Linear {
                    w: MatView {
                        matrix: e,
                        ..MatView::plain(WeightId(43), 64, 64)
                    },
                    bias: None,
                },
            })
            .collect(),
        routing: Routing {
            top_k: 2,
            softmax_after_topk: true,
            norm_topk_prob: false,
        },
        activation: Activation::Silu,
        shared: None,
    });
    f
}

/// The ops of one step as `Model::step` records them: attention, then a dense FFN or a MoE
/// block, then the last row's logits.
fn step(n: usize, pos: usize, moe: bool) -> Graph {
    let mut g = vec![
        Node::Embed {
            table: WeightId(0),
            out: X,
            n,
        },
        Node::Norm {
            x: X,
            w: norm_w(1),
            out: H,
            n,
            group: 64,
            eps: 1e-5,
        },
        Node::Product {
            x: H,
            lin: lin(2),
            out: Q,
            n,
        },
        Node::Product {
            x: H,
            lin: lin(3),
            out: K,
            n,
        },
        Node::Product {
            x: H,
            lin: lin(4),
            out: V,
            n,
        },
        Node::Rope {
            x: Q,
            n,
            pos,
            rope: rope(),
        },
        Node::Rope {
            x: K,
            n,
            pos,
            rope: rope(),
        },
        Node::Attention {
            q: Q,
            k: K,
            v: V,
            kv: KvId(0),
            out: ATT,
            p: attn(n, pos),
        },
        Node::Product {
            x: ATT,
            lin: lin(5),
            out: H,
            n,
        },
        Node::Add { acc: X, x: H, n },
        Node::Norm {
            x: X,
            w: norm_w(6),
            out: H,
            n,
            group: 64,
            eps: 1e-5,
        },
    ];
    let out = if moe {
        g.push(Node::Moe {
            x: H,
            block: MoeRef(0),
            out: MOE_OUT,
            n,
        });
        MOE_OUT
    } else {
        g.extend([
            Node::Product {
                x: H,
                lin: lin(7),
                out: GATE,
                n,
            },
            Node::Product {
                x: H,
                lin: lin(8),
                out: UP,
                n,
            },
            Node::Glu {
                gate: GATE,
                up: UP,
                out: ACT,
                n,
                act: Activation::Silu,
            },
            Node::Product {
                x: ACT,
                lin: lin(9),
                out: H,
                n,
            },
        ]);
        H
    };
    g.push(Node::Add { acc: X, x: out, n });
    let last = if n > 1 {
        g.push(Node::Copy {
            src: X,
            src_row: n - 1,
            dst: LAST,
            dst_row: 0,
            n: 1,
        });
        LAST
    } else {
        X
    };
    g.extend([
        Node::Norm {
            x: last,
            w: norm_w(10),
            out: H,
            n: 1,
            group: 64,
            eps: 1e-5,
        },
        Node::Product {
            x: H,
            lin: lin(11),
            out: LOGITS,
            n: 1,
        },
        Node::Argmax { x: LOGITS, row: 0 },
    ]);
    Graph { nodes: g }
}

fn products(
    products: Vec<usize>,
    norm: Option<usize>,
    records: Option<usize>,
    residual: Option<usize>,
) -> Kernel {
    Kernel::Products {
        products,
        norm,
        records,
        residual,
    }
}

#[test]
fn a_dense_decode_step_folds_norms_ropes_records_and_residuals() {
    let g = step(1, 7, false);
    let p = plan(&g, &facts(true));
    let want = vec![
        Kernel::Single { node: 0 },
        // Folded into q/k/v; the output product rewrites h before anything else reads it.
        Kernel::Norm {
            node: 1,
            needed: false,
        },
        products(vec![2, 3, 4], Some(1), None, None),
        Kernel::Attention {
            node: 7,
            rope: Some((5, 6)),
            decode: true,
            records: true,
        },
        products(vec![8], None, Some(3), Some(9)),
        Kernel::Norm {
            node: 10,
            needed: false,
        },
        Kernel::GateUpAct {
            gate: 11,
            up: 12,
            glu: 13,
            norm: Some(10),
            records: None,
            records_out: true,
        },
        products(vec![14], None, Some(6), Some(15)),
        // Nothing rewrites the final norm's output in this step: it is dispatched as well.
        Kernel::Norm {
            node: 16,
            needed: true,
        },
        products(vec![17], Some(16), None, None),
        Kernel::Single { node: 18 },
    ];
    assert_eq!(p.kernels, want);
    // Every node is in exactly one kernel, in order.
    let covered: Vec<usize> = p.kernels.iter().flat_map(|k| k.nodes()).collect();
    assert_eq!(covered, (0..g.nodes.len()).collect::<Vec<_>>());
}

#[test]
fn a_final_norm_into_a_step_local_buffer_is_only_folded() {
    let g = step(1, 7, false);
    let mut f = facts(true);
    f.step_local.insert(H);
    let p = plan(&g, &f);
    let last_norm = g.nodes.len() - 3;
    assert!(matches!(g.nodes[last_norm], Node::Norm { out: H, .. }));
    let k = p
        .kernels
        .iter()
        .position(|k| matches!(k, Kernel::Norm { node, .. } if *node == last_norm))
        .expect("the final norm's kernel");
    assert_eq!(
        p.kernels[k],
        Kernel::Norm {
            node: last_norm,
            needed: false
        }
    );
    assert_eq!(
        p.kernels[k + 1],
        products(vec![last_norm + 1], Some(last_norm), None, None)
    );
    // Without the mark the same step dispatches it (a_dense_decode_step_…).
    let p = plan(&g, &facts(true));
    assert!(p.kernels.contains(&Kernel::Norm {
        node: last_norm,
        needed: true
    }));
}

#[test]
fn without_int8_the_gate_up_product_reads_the_dispatched_norm() {
    let p = plan(&step(1, 7, false), &facts(false));
    assert!(p.kernels.contains(&Kernel::Norm {
        node: 10,
        needed: true
    }));
    assert!(p.kernels.contains(&Kernel::GateUpAct {
        gate: 11,
        up: 12,
        glu: 13,
        norm: None,
        records: None,
        records_out: false,
    }));
    // The attention writes no records; the output product reads att as it is.
    assert!(p.kernels.contains(&Kernel::Attention {
        node: 7,
        rope: Some((5, 6)),
        decode: true,
        records: false
    }));
    assert!(p.kernels.contains(&products(vec![8], None, None, Some(9))));
}

#[test]
fn the_gate_up_product_writes_records_only_where_the_down_product_alone_reads_them() {
    let gate_up = |records_out| Kernel::GateUpAct {
        gate: 11,
        up: 12,
        glu: 13,
        norm: Some(10),
        records: None,
        records_out,
    };
    let g = step(1, 7, false);
    let p = plan(&g, &facts(true));
    assert!(p.kernels.contains(&gate_up(true)));
    assert!(p
        .kernels
        .contains(&products(vec![14], None, Some(6), Some(15))));
    // A later step may read act: its f32 values are written.
    let mut f = facts(true);
    f.step_local.remove(&ACT);
    let p = plan(&g, &f);
    assert!(p.kernels.contains(&gate_up(false)));
    assert!(p
        .kernels
        .contains(&products(vec![14], None, None, Some(15))));
    // So where another node of the step reads act after the down product.
    let mut g = step(1, 7, false);
    g.nodes.push(Node::Add {
        acc: LAST,
        x: ACT,
        n: 1,
    });
    let p = plan(&g, &facts(true));
    assert!(p.kernels.contains(&gate_up(false)));
    // The explanation names the rule.
    assert_eq!(
        gate_up(true).rule(),
        "norm→product, gate+up+activation, gate/up→int8 records"
    );
}

#[test]
fn a_prompt_step_fuses_add_and_norm_and_writes_the_cache_with_rope() {
    let g = step(5, 0, false);
    let p = plan(&g, &facts(true));
    let want = vec![
        Kernel::Single { node: 0 },
        Kernel::Single { node: 1 },
        products(vec![2], None, None, None),
        products(vec![3], None, None, None),
        products(vec![4], None, None, None),
        Kernel::Attention {
            node: 7,
            rope: Some((5, 6)),
            decode: false,
            records: false,
        },
        products(vec![8], None, None, None),
        Kernel::AddNorm { add: 9, norm: 10 },
        products(vec![11], None, None, None),
        products(vec![12], None, None, None),
        Kernel::Single { node: 13 },
        products(vec![14], None, None, None),
        Kernel::Single { node: 15 },
        Kernel::Single { node: 16 },
        Kernel::Norm {
            node: 17,
            needed: true,
        },
        products(vec![18], Some(17), None, None),
        Kernel::Single { node: 19 },
    ];
    assert_eq!(p.kernels, want);
}

#[test]
fn a_moe_decode_step_routes_through_the_norm_and_combines_into_the_residual() {
    let mut g = step(1, 3, true);
    // The next layer's norm and q product after the combine: the combine writes the normed
    // residual as int8 records for it.
    let n = g.nodes.len();
    g.nodes.truncate(n - 3);
    g.nodes.extend([
        Node::Norm {
            x: X,
            w: norm_w(20),
            out: H,
            n: 1,
            group: 64,
            eps: 1e-5,
        },
        Node::Product {
            x: H,
            lin: lin(21),
            out: Q,
            n: 1,
        },
        Node::Product {
            x: H,
            lin: lin(22),
            out: K,
            n: 1,
        },
    ]);
    let p = plan(&g, &facts(true));
    let tail = &p.kernels[p.kernels.len() - 4..];
    assert_eq!(
        tail,
        [
            Kernel::Norm {
                node: 10,
                needed: false
            },
            Kernel::Moe {
                node: 11,
                norm: Some(10),
                add: Some(12),
                records: Some(13)
            },
            Kernel::Norm {
                node: 13,
                needed: true
            },
            products(vec![14, 15], Some(13), Some(p.kernels.len() - 3), None),
        ]
    );
}

#[test]
fn a_norm_whose_input_changes_before_its_reader_is_not_folded() {
    let g = Graph {
        nodes: vec![
            Node::Norm {
                x: X,
                w: norm_w(1),
                out: H,
                n: 1,
                group: 64,
                eps: 1e-5,
            },
            Node::Add { acc: X, x: V, n: 1 },
            Node::Product {
                x: H,
                lin: lin(2),
                out: Q,
                n: 1,
            },
        ],
    };
    let p = plan(&g, &facts(true));
    assert_eq!(
        p.kernels,
        vec![
            Kernel::Norm {
                node: 0,
                needed: true
            },
            Kernel::Single { node: 1 },
            products(vec![2], None, None, None),
        ]
    );
}

#[test]
fn a_norm_read_by_another_op_is_dispatched_as_well() {
    let g = Graph {
        nodes: vec![
            Node::Norm {
                x: X,
                w: norm_w(1),
                out: H,
                n: 1,
                group: 64,
                eps: 1e-5,
            },
            Node::Product {
                x: H,
                lin: lin(2),
                out: Q,
                n: 1,
            },
            Node::Add { acc: V, x: H, n: 1 },
            Node::Product {
                x: X,
                lin: lin(3),
                out: H,
                n: 1,
            },
        ],
    };
    let p = plan(&g, &facts(true));
    assert_eq!(
        p.kernels[0],
        Kernel::Norm {
            node: 0,
            needed: true
        }
    );
    assert_eq!(p.kernels[1], products(vec![1], Some(0), None, None));
}

#[test]
fn products_join_only_with_the_same_input_and_up_to_three() {
    let g = Graph {
        nodes: (0..4)
            .map(|i| Node::Product {
                x: H,
                lin: lin(i),
                out: BufId(20 + i),
                n: 1,
            })
            .chain([Node::Product {
                x: X,
                lin: lin(9),
                out: BufId(30),
                n: 1,
            }])
            .collect(),
    };
    let mut f = facts(false);
    for b in 20..31 {
        f.cols.insert(BufId(b), 64);
    }
    let p = plan(&g, &f);
    assert_eq!(
        p.kernels,
        vec![
            products(vec![0, 1, 2], None, None, None),
            products(vec![3], None, None, None),
            products(vec![4], None, None, None),
        ]
    );
}

#[test]
fn ropes_pair_only_with_the_same_rotation_and_position() {
    let other = RopeParams { dim: 8, ..rope() };
    let g = Graph {
        nodes: vec![
            Node::Rope {
                x: Q,
                n: 1,
                pos: 3,
                rope: rope(),
            },
            Node::Rope {
                x: K,
                n: 1,
                pos: 3,
                rope: other,
            },
        ],
    };
    let p = plan(&g, &facts(true));
    assert_eq!(
        p.kernels,
        vec![Kernel::Single { node: 0 }, Kernel::Single { node: 1 }]
    );
}

#[test]
fn every_rule_fires_on_some_step() {
    let mut fired = HashSet::new();
    for (g, int8) in [
        (step(1, 7, false), true),
        (step(5, 0, false), true),
        (step(1, 3, true), true),
    ] {
        for k in plan(&g, &facts(int8)).kernels {
            for r in k.rule().split(", ").filter(|r| !r.is_empty()) {
                fired.insert(r.to_string());
            }
        }
    }
    let mut g = step(1, 3, true);
    let n = g.nodes.len();
    g.nodes.truncate(n - 3);
    g.nodes.extend([
        Node::Norm {
            x: X,
            w: norm_w(20),
            out: H,
            n: 1,
            group: 64,
            eps: 1e-5,
        },
        Node::Product {
            x: H,
            lin: lin(21),
            out: Q,
            n: 1,
        },
    ]);
    for k in plan(&g, &facts(true)).kernels {
        fired.extend(k.rule().split(", ").map(str::to_string));
    }
    for r in RULES {
        assert!(
            fired.contains(r.name),
            "rule {} never fired: {fired:?}",
            r.name
        );
    }
}

/// One query: every position shares a class. A prompt: positions whose keys fit the same power
/// of two (the matrix-core attention's scores are sized by it).
#[test]
fn the_shape_class_leaves_positions_out() {
    assert_eq!(step(1, 7, false).key(), step(1, 8, false).key());
    assert_eq!(step(1, 7, false).key(), step(1, 5000, false).key());
    assert_ne!(step(1, 7, false).key(), step(2, 7, false).key());
    assert_eq!(step(40, 30, false).key(), step(40, 88, false).key());
    assert_ne!(step(40, 88, false).key(), step(40, 89, false).key());
}
