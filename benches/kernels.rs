//! The engine's kernels one at a time, through the backend interface the transformer uses, on
//! the CPU and on the GPU (when an adapter is found): the product of a weight and a vector per
//! stored dtype (decode) and with 64 rows (prefill), decode attention over 512 and 2,048
//! cached positions, and a mixture-of-experts block. On the GPU each measurement ends with a
//! one-value read, so it includes a submit and a wait (tens of microseconds).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use minerva_benches::{backends, Weight};
use minerva_engine::backend::{AttnParams, GatedFfn, KvSpec, Linear, MatView, MoeBlock, Routing};
use minerva_engine::Backend;
use minerva_formats::{Activation, DType};
use std::time::Duration;

/// tinyllama-1.1b's hidden width.
const HIDDEN: usize = 2048;

fn sync(b: &mut dyn Backend, buf: minerva_engine::backend::BufId) {
    b.read_rows(buf, 0, 1).expect("read");
}

fn products(c: &mut Criterion) {
    let dtypes = [
        ("f32", DType::F32),
        ("f16", DType::F16),
        ("bf16", DType::BF16),
        ("q8_0", DType::Q8_0),
        ("q4_0", DType::Q4_0),
        ("q4_1", DType::Q4_1),
        ("q4_k", DType::Q4_K),
        ("mxfp4", DType::MXFP4),
        ("mlx-4bit", DType::MlxAffine { bits: 4, group: 64 }),
        ("mlx-mxfp4", DType::MlxMxfp4),
    ];
    let weights: Vec<(&str, Weight)> = dtypes
        .iter()
        .map(|&(name, d)| (name, Weight::random(d, HIDDEN, HIDDEN, 1)))
        .collect();
    for (backend_name, mut b) in backends() {
        let mut group = c.benchmark_group(format!("product {HIDDEN}x{HIDDEN} ({backend_name})"));
        let x = b.alloc(64, HIDDEN).expect("alloc");
        let y = b.alloc(64, HIDDEN).expect("alloc");
        for (name, w) in &weights {
            let id = b.upload(&w.view()).expect("upload");
            let lin = Linear {
                w: MatView::plain(id, HIDDEN, HIDDEN),
                bias: None,
            };
            for n in [1usize, 64] {
                group.throughput(Throughput::Elements((n * HIDDEN * HIDDEN) as u64));
                group.bench_with_input(
                    BenchmarkId::new(*name, format!("{n} rows")),
                    &n,
                    |bench, &n| {
                        bench.iter(|| {
                            b.matmul(x, &lin, y, n).expect("matmul");
                            sync(b.as_mut(), y);
                        })
                    },
                );
            }
        }
        group.finish();
    }
}

fn attention(c: &mut Criterion) {
    // tinyllama-1.1b: 32 query heads, 4 KV heads of 64.
    let (heads, kv_heads, head_dim) = (32, 4, 64);
    for (backend_name, mut b) in backends() {
        let mut group = c.benchmark_group(format!("decode attention ({backend_name})"));
        for ctx in [512usize, 2048] {
            let chunk = 256;
            let q = b.alloc(chunk, heads * head_dim).expect("alloc");
            let k = b.alloc(chunk, kv_heads * head_dim).expect("alloc");
            let v = b.alloc(chunk, kv_heads * head_dim).expect("alloc");
            let out = b.alloc(chunk, heads * head_dim).expect("alloc");
            let kv = b
                .alloc_kv(&KvSpec {
                    n_kv_heads: kv_heads,
                    head_dim,
                    ctx: ctx + 1,
                    window: None,
                    max_batch: chunk,
                })
                .expect("kv");
            let params = |n, pos| AttnParams {
                n,
                pos,
                n_heads: heads,
                n_kv_heads: kv_heads,
                head_dim,
                window: None,
                sinks: None,
                scale: 0.125,
            };
            // Fill the cache up to `ctx`, then time one query at that position.
            for pos in (0..ctx).step_by(chunk) {
                b.attention(q, k, v, kv, out, &params(chunk, pos))
                    .expect("prefill attention");
            }
            sync(b.as_mut(), out);
            group.bench_function(
                BenchmarkId::from_parameter(format!("{ctx} positions")),
                |bench| {
                    bench.iter(|| {
                        b.attention(q, k, v, kv, out, &params(1, ctx))
                            .expect("attention");
                        sync(b.as_mut(), out);
                    })
                },
            );
            b.free_kv(kv);
        }
        group.finish();
    }
}

fn moe(c: &mut Criterion) {
    // gpt-oss-20b's widths with 8 of its 32 experts (4 chosen per token), MXFP4.
    let (hidden, ffn, experts, top_k) = (2880, 2880, 8, 4);
    let stack = |seed| Weight::random(DType::MXFP4, experts * ffn, hidden, seed);
    let (gate, up, down) = (
        stack(2),
        stack(3),
        Weight::random(DType::MXFP4, experts * hidden, ffn, 4),
    );
    let router = Weight::random(DType::F32, experts, hidden, 5);
    for (backend_name, mut b) in backends() {
        let mut group = c.benchmark_group(format!("moe 8 experts, top-4 ({backend_name})"));
        let upload_stack = |b: &mut Box<dyn Backend>, w: &Weight, out, inp| {
            let id = b
                .upload(&w.view_as(vec![experts, out, inp]))
                .expect("upload");
            (0..experts)
                .map(|e| Linear {
                    w: MatView {
                        matrix: e,
                        out_dim: out,
                        in_dim: inp,
                        ..MatView::plain(id, out, inp)
                    },
                    bias: None,
                })
                .collect::<Vec<_>>()
        };
        let gates = upload_stack(&mut b, &gate, ffn, hidden);
        let ups = upload_stack(&mut b, &up, ffn, hidden);
        let downs = upload_stack(&mut b, &down, hidden, ffn);
        let router_id = b.upload(&router.view()).expect("upload");
        let block = MoeBlock {
            router: Linear {
                w: MatView::plain(router_id, experts, hidden),
                bias: None,
            },
            experts: (0..experts)
                .map(|e| GatedFfn {
                    gate: gates[e],
                    up: ups[e],
                    down: downs[e],
                })
                .collect(),
            routing: Routing {
                top_k,
                softmax_after_topk: true,
                norm_topk_prob: false,
            },
            activation: Activation::GptOssClamped {
                alpha: 1.702,
                limit: 7.0,
            },
            shared: None,
        };
        let x = b.alloc(64, hidden).expect("alloc");
        let out = b.alloc(64, hidden).expect("alloc");
        for n in [1usize, 64] {
            group.bench_function(BenchmarkId::from_parameter(format!("{n} rows")), |bench| {
                bench.iter(|| {
                    b.moe(x, &block, out, n).expect("moe");
                    sync(b.as_mut(), out);
                })
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = products, attention, moe
}
criterion_main!(benches);
