//! GPU mixture-of-experts routing and combining against the CPU: routing (ties, k = E, many
//! tokens, and one token's routing inside its gate/up product) and the combine into the residual
//! stream, with the int8 records the next products read.

mod gpu_common;

use gpu_common::activations::*;
use gpu_common::weights::*;
use gpu_common::*;
use minerva_engine::backend::Routing;
use minerva_engine::cpu::route;
use minerva_engine::gpu::{Eltwise, ExpertSel, GpuWeight, MatSel, NormFold, Ops, Region, RouteIn};
use minerva_formats::DType;

#[test]
fn moe_route_and_combine() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(14);
    let (experts, k, tokens, n) = (9usize, 3usize, 4usize, 33usize);
    let logits = rng.vec(tokens * experts);
    let lb = ctx.storage_with("logits", &logits);
    for renorm in [true, false] {
        let (ib, wb) = (
            ctx.storage("ids", (tokens * k * 4) as u64),
            ctx.storage("w", (tokens * k * 4) as u64),
        );
        let d = ops
            .moe_route(
                &lb,
                0,
                experts as u32,
                k as u32,
                tokens as u32,
                renorm,
                &ib,
                &wb,
            )
            .unwrap();
        run(&ctx, &[&d]);
        let ids = ctx.read_u32(&ib, 0, tokens * k).unwrap();
        let ws = ctx.read_f32(&wb, 0, tokens * k).unwrap();
        for t in 0..tokens {
            let row = &logits[t * experts..(t + 1) * experts];
            let mut order: Vec<usize> = (0..experts).collect();
            order.sort_by(|a, b| row[*b].total_cmp(&row[*a]));
            let m = row[order[0]];
            let all: f32 = row.iter().map(|v| (v - m).exp()).sum();
            let chosen: f32 = order[..k].iter().map(|&e| (row[e] - m).exp()).sum();
            for s in 0..k {
                assert_eq!(ids[t * k + s] as usize, order[s], "token {t} slot {s}");
                let want = (row[order[s]] - m).exp() / if renorm { chosen } else { all };
                assert!(
                    (ws[t * k + s] - want).abs() < 1e-5,
                    "weight {t},{s}: {} vs {want}",
                    ws[t * k + s]
                );
            }
        }
        let outs = rng.vec(tokens * k * n);
        let ob = ctx.storage_with("expert out", &outs);
        let yb = ctx.storage("y", (tokens * n * 4) as u64);
        let d = ops
            .moe_combine(&ob, &wb, &yb, n as u32, k as u32, tokens as u32, None, None)
            .unwrap();
        run(&ctx, &[&d]);
        let want: Vec<f32> = (0..tokens * n)
            .map(|i| {
                (0..k)
                    .map(|s| ws[(i / n) * k + s] * outs[((i / n) * k + s) * n + i % n])
                    .sum()
            })
            .collect();
        assert_close(
            "moe combine",
            &ctx.read_f32(&yb, 0, tokens * n).unwrap(),
            &want,
            1e-5,
        );

        // With a residual stream: y as before, and the same sums added into it.
        let resid = rng.vec(tokens * n);
        let rb = ctx.storage_with("resid", &resid);
        let d = ops
            .moe_combine(
                &ob,
                &wb,
                &yb,
                n as u32,
                k as u32,
                tokens as u32,
                Some(&rb),
                None,
            )
            .unwrap();
        run(&ctx, &[&d]);
        let added: Vec<f32> = resid.iter().zip(&want).map(|(r, w)| r + w).collect();
        let y = ctx.read_f32(&yb, 0, tokens * n).unwrap();
        assert_close("moe combine, y beside the residual", &y, &want, 1e-5);
        let r = ctx.read_f32(&rb, 0, tokens * n).unwrap();
        assert_close("moe combine into the residual", &r, &added, 1e-5);
    }
}

/// The MoE combine adding into the residual stream and writing it as the int8 records that the
/// products after the next RMSNorm read (x times the norm's weights, each part's Σx² beside):
/// gpt-oss's width (45 whole workgroups) and one whose last workgroup holds a single unit.
#[test]
fn moe_combine_writes_normed_int8_records() {
    let Some(ctx) = shared() else { return };
    let mut ops = Ops::new(ctx.clone());
    ops.set_int8_products(true);
    let mut rng = Rng::new(15);
    let k = 4usize;
    for n in [2880usize, 96] {
        let outs = rng.vec(k * n);
        let ws = rng.vec(k);
        let resid = rng.vec(n);
        let g: Vec<f32> = rng.vec(n + 3).iter().map(|v| 1.0 + 0.5 * v).collect();
        let (ob, wb, gb) = (
            ctx.storage_with("expert out", &outs),
            ctx.storage_with("w", &ws),
            ctx.storage_with("norm weights", &g),
        );
        let rb = ctx.storage_with("resid", &resid);
        let yb = ctx.storage("y", (n * 4) as u64);
        let records = ops.combine_records(n as u32, 1).expect("records");
        let norm = NormFold {
            buf: &gb,
            offset: 3,
            eps: 1e-5,
            records: Some(&records),
        };
        let d = ops
            .moe_combine(&ob, &wb, &yb, n as u32, k as u32, 1, Some(&rb), Some(norm))
            .unwrap();
        run(&ctx, &[&d]);
        let new: Vec<f32> = (0..n)
            .map(|i| resid[i] + (0..k).map(|s| ws[s] * outs[s * n + i]).sum::<f32>())
            .collect();
        let got = ctx.read_f32(&rb, 0, n).unwrap();
        assert_close(&format!("{n}: residual"), &got, &new, 1e-5);
        // The records of the stream as the GPU holds it, times the norm's weights.
        let scaled: Vec<f32> = (0..n).map(|i| got[i] * g[3 + i]).collect();
        let parts = n / 8;
        assert_eq!(records.scales() as usize, parts);
        let words = ctx.read_u32(records.buffer(), 0, 7 * parts).unwrap();
        check_records(&format!("{n}: records"), &scaled, &words);
        for i in 0..parts {
            let c = (i / 4) * 32 + 4 * (i % 4);
            let want: f32 = (0..4)
                .map(|e| got[c + e].powi(2) + got[c + 16 + e].powi(2))
                .sum();
            let sq = f32::from_bits(words[6 * parts + i]);
            assert!(
                (sq - want).abs() <= 1e-5 * want,
                "{n}: part {i} Σx² {sq} vs {want}"
            );
        }
    }
}

/// Routing against the CPU's `route` for each softmax variant (over the chosen, over all then
/// renormalized, over all): ties (a whole row of equal
/// logits, and ties across the top-k boundary) go to the lower expert id; k = E; one token and
/// many (several workgroups); gpt-oss's 32 experts and the largest count the kernel takes.
#[test]
fn moe_route_ties_all_experts_and_many_tokens() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(16);
    for (experts, k, tokens) in [
        (4usize, 4usize, 3usize),
        (32, 4, 1),
        (32, 4, 70),
        (256, 8, 5),
    ] {
        let mut logits = rng.vec(tokens * experts);
        // Token 0: every logit equal. Last token: the k-th and (k+1)-th largest tie.
        logits[..experts].fill(0.25);
        let last = &mut logits[(tokens - 1) * experts..];
        if tokens > 1 && k < experts {
            let mut order: Vec<usize> = (0..experts).collect();
            order.sort_by(|a, b| last[*b].total_cmp(&last[*a]));
            let (a, b) = (order[k - 1], order[k]);
            last[a.max(b)] = last[a.min(b)];
        }
        let lb = ctx.storage_with("logits", &logits);
        for (after, norm) in [(true, false), (false, true), (false, false)] {
            let routing = Routing {
                top_k: k,
                softmax_after_topk: after,
                norm_topk_prob: norm,
            };
            let renorm = after || norm;
            let (ib, wb) = (
                ctx.storage("ids", (tokens * k * 4) as u64),
                ctx.storage("w", (tokens * k * 4) as u64),
            );
            let d = ops
                .moe_route(
                    &lb,
                    0,
                    experts as u32,
                    k as u32,
                    tokens as u32,
                    renorm,
                    &ib,
                    &wb,
                )
                .unwrap();
            run(&ctx, &[&d]);
            let ids = ctx.read_u32(&ib, 0, tokens * k).unwrap();
            let ws = ctx.read_f32(&wb, 0, tokens * k).unwrap();
            for t in 0..tokens {
                let want = route(&logits[t * experts..(t + 1) * experts], &routing);
                for (s, (e, w)) in want.into_iter().enumerate() {
                    let what = format!("E {experts} k {k} {routing:?} token {t} slot {s}");
                    assert_eq!(ids[t * k + s] as usize, e, "{what}");
                    assert!(
                        (ws[t * k + s] - w).abs() < 1e-5,
                        "{what}: {} vs {w}",
                        ws[t * k + s]
                    );
                }
            }
        }
    }
}

/// One token's gate/up product that routes it itself (`matvec_glu_experts` with a `RouteIn`) against the
/// routing dispatch and the product reading its ids: the same outputs bit for bit, and the same
/// ids and weights left for the products and the combine after it; over 8 experts (top-2, the
/// softmax over all, logits with a tie) and 32 (top-4, over the chosen), Q8_0 weights and
/// gpt-oss's MXFP4 in packed f16 with x staged while the logits load, weights whole and split
/// across bindings (each part's dispatch routes, the first writes).
#[test]
fn one_tokens_gate_up_product_routes_it_itself() {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(31);
    let rows = 19usize;
    let cases = [
        (DType::Q8_0, 96usize, 8usize, 2usize, false, false),
        (DType::MXFP4, 2880, 32, 4, true, true),
    ];
    for (dtype, cols, experts, k, renorm, packed) in cases {
        let gate = make(dtype, experts * rows, cols, &mut rng);
        let up = make(dtype, experts * rows, cols, &mut rng);
        let x = rng.vec(cols);
        let mut logits = vec![0.5f32; 3];
        logits.extend(rng.vec(experts));
        // A tie: the lower id comes first.
        logits[3 + experts - 1] = logits[3 + 1];
        for split in [false, true] {
            let ctx = experts_context(&exact(), &gate, experts, rows, split);
            let mut ops = Ops::new(ctx.clone());
            ops.set_packed_f16(packed);
            ops.set_x_halves(packed);
            assert!(ops.routes_in_experts(experts as u32, k as u32));
            let upload = |s: &Stored| {
                GpuWeight::upload(&ctx, &s.view(vec![experts, rows, cols]), rows).unwrap()
            };
            let (gw, uw) = (upload(&gate), upload(&up));
            let parts = gw.parts.len();
            assert_eq!(parts > 1, split);
            let all = MatSel::plain(rows, cols);
            let (xb, lb) = (
                ctx.storage_with("x", &x),
                ctx.storage_with("logits", &logits),
            );
            let xr = Region::new(&xb, 0, cols as u32);
            let act = Eltwise::GluOss {
                alpha: 1.702,
                limit: 7.0,
            };
            // (outputs, ids, weights) of the routing dispatch and the product after it, or of
            // the product routing itself.
            let product = |routed: bool| {
                let ib = ctx.storage("ids", (k * 4) as u64);
                let wb = ctx.storage("weights", (k * 4) as u64);
                let yb = ctx.storage("y", (k * rows * 4) as u64);
                let yr = Region::new(&yb, 0, rows as u32);
                let sel = ExpertSel {
                    ids: &ib,
                    x_div: k as u32,
                };
                let route = routed.then_some(RouteIn {
                    logits: &lb,
                    offset: 3,
                    experts: experts as u32,
                    k: k as u32,
                    renorm,
                    weights: &wb,
                });
                let mut d = Vec::new();
                if !routed {
                    let (e, k) = (experts as u32, k as u32);
                    d.push(ops.moe_route(&lb, 3, e, k, 1, renorm, &ib, &wb).unwrap());
                }
                let (ws, sels) = ([&gw, &uw], [&all, &all]);
                d.extend(
                    ops.matvec_glu_experts(ws, sels, xr, yr, k as u32, act, None, sel, route)
                        .unwrap(),
                );
                let dispatches = if routed { parts } else { parts + 1 };
                assert_eq!(
                    d.len(),
                    dispatches,
                    "routed={routed}: one dispatch per part"
                );
                run(&ctx, &d.iter().collect::<Vec<_>>());
                (
                    ctx.read_f32(&yb, 0, k * rows).unwrap(),
                    ctx.read_u32(&ib, 0, k).unwrap(),
                    ctx.read_f32(&wb, 0, k).unwrap(),
                )
            };
            let (want, want_ids, want_weights) = product(false);
            let (got, ids, weights) = product(true);
            let what = format!("{} {experts} experts, top-{k}, split={split}", dtype.name());
            assert_eq!(ids, want_ids, "{what}: ids");
            assert_eq!(weights, want_weights, "{what}: weights");
            assert_eq!(got, want, "{what}: outputs");
        }
    }
}
