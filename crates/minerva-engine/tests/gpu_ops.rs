//! GPU activation kernels against plain CPU versions on random data of awkward sizes: RMSNorm,
//! RoPE (both layouts), add / SwiGLU / gpt-oss GLU, attention over the KV cache (GQA, causal,
//! sliding window, sinks, f16 and f32 caches, several key chunks, a wrapping window cache), MoE
//! routing (ties, k = E, many tokens) and combining, argmax and top-k.

mod gpu_common;

use gpu_common::*;
use minerva_engine::backend::Routing;
use minerva_engine::cpu::route;
use minerva_engine::gpu::{AttnShape, Eltwise, GpuContext, KvCache, Ops, Region, Step};
use std::sync::Arc;

fn run(ctx: &GpuContext, d: &[&minerva_engine::gpu::pipelines::Dispatch]) {
    ctx.submit(d).unwrap();
}

#[test]
fn rms_norm_out_of_place_in_place_and_after_a_residual_add() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(10);
    let (n, rows, eps) = (300usize, 7usize, 1e-5f32);
    let x = rng.vec(n * rows);
    let w = rng.vec(n);
    let want: Vec<f32> = x
        .chunks(n)
        .flat_map(|r| {
            let inv = 1.0 / ((r.iter().map(|v| v * v).sum::<f32>() / n as f32 + eps).sqrt());
            r.iter()
                .zip(&w)
                .map(move |(v, g)| v * inv * g)
                .collect::<Vec<_>>()
        })
        .collect();
    let (xb, wb) = (ctx.storage_with("x", &x), ctx.storage_with("w", &w));
    let yb = ctx.storage("y", ((n * rows + 3) * 4) as u64);
    let d = ops
        .rms_norm(
            Some(Region::new(&xb, 0, 0)),
            Region::new(&yb, 3, 0),
            Region::new(&wb, 0, 0),
            n as u32,
            rows as u32,
            eps,
        )
        .unwrap();
    run(&ctx, &[&d]);
    assert_close(
        "rms_norm",
        &ctx.read_f32(&yb, 3, n * rows).unwrap(),
        &want,
        1e-5,
    );
    let d = ops
        .rms_norm(
            None,
            Region::new(&xb, 0, 0),
            Region::new(&wb, 0, 0),
            n as u32,
            rows as u32,
            eps,
        )
        .unwrap();
    run(&ctx, &[&d]);
    assert_close(
        "rms_norm in place",
        &ctx.read_f32(&xb, 0, n * rows).unwrap(),
        &want,
        1e-5,
    );
    // Fused residual: x += r, then r = norm(x) · w (r holds the residual in, the norm out).
    let half: Vec<f32> = x.iter().map(|v| v * 0.5).collect();
    let (xb, rb) = (ctx.storage_with("x", &half), ctx.storage_with("r", &half));
    let d = ops
        .add_rms_norm(
            Region::new(&xb, 0, 0),
            Region::new(&rb, 0, 0),
            Region::new(&wb, 0, 0),
            n as u32,
            rows as u32,
            eps,
        )
        .unwrap();
    run(&ctx, &[&d]);
    assert_close(
        "add + rms_norm: sum",
        &ctx.read_f32(&xb, 0, n * rows).unwrap(),
        &x,
        1e-6,
    );
    assert_close(
        "add + rms_norm: norm",
        &ctx.read_f32(&rb, 0, n * rows).unwrap(),
        &want,
        1e-5,
    );
}

#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn cpu_rope(
    v: &mut [f32],
    pos0: usize,
    heads: usize,
    d: usize,
    rot: usize,
    halves: bool,
    freq: &[f32],
    mscale: f32,
) {
    for (t, tok) in v.chunks_mut(heads * d).enumerate() {
        for h in tok.chunks_mut(d) {
            for i in 0..rot / 2 {
                let (a, b) = if halves {
                    (i, i + rot / 2)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let ang = (pos0 + t) as f32 * freq[i];
                let (s, c) = ang.sin_cos();
                let (x0, x1) = (h[a], h[b]);
                h[a] = (x0 * c - x1 * s) * mscale;
                h[b] = (x0 * s + x1 * c) * mscale;
            }
        }
    }
}

#[test]
fn rope_both_layouts_and_partial_rotation() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(11);
    let (tokens, heads, d) = (5usize, 3usize, 24usize);
    for (halves, rot, mscale) in [(false, 24usize, 1.0f32), (true, 24, 1.0), (true, 16, 1.3)] {
        let freq: Vec<f32> = (0..rot / 2)
            .map(|i| 10000f32.powf(-2.0 * i as f32 / rot as f32))
            .collect();
        let x = rng.vec(tokens * heads * d);
        let mut want = x.clone();
        cpu_rope(&mut want, 9, heads, d, rot, halves, &freq, mscale);
        let mut full = vec![0f32; 2];
        full.extend(&x);
        let fb = ctx.storage_with("freq", &freq);
        let sb = ctx.uniform(
            "step",
            &Step {
                pos0: 9,
                tokens: tokens as u32,
                _pad: [0; 2],
            },
        );
        // Alone, then together with a second buffer of 2 heads (k with q).
        let k = rng.vec(tokens * 2 * d);
        let mut want_k = k.clone();
        cpu_rope(&mut want_k, 9, 2, d, rot, halves, &freq, mscale);
        let kb = ctx.storage_with("k", &k);
        for second in [None, Some((&kb, 2u32))] {
            let vb = ctx.storage_with("v", &full);
            let dsp = ops
                .rope(
                    &vb,
                    2,
                    &fb,
                    &sb,
                    tokens as u32,
                    heads as u32,
                    d as u32,
                    rot as u32,
                    halves,
                    mscale,
                    second,
                )
                .unwrap();
            run(&ctx, &[&dsp]);
            let what = format!("rope halves={halves} rot={rot} with k={}", second.is_some());
            assert_close(&what, &ctx.read_f32(&vb, 2, x.len()).unwrap(), &want, 1e-4);
        }
        assert_close(
            "rope of k",
            &ctx.read_f32(&kb, 0, k.len()).unwrap(),
            &want_k,
            1e-4,
        );
    }
}

#[test]
fn add_swiglu_and_gpt_oss_glu() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(12);
    let (n, rows) = (77usize, 3usize);
    // Gate and up interleaved per row in one buffer: [rows][gate n | up n], scaled past the clamps.
    let gu: Vec<f32> = rng.vec(rows * 2 * n).iter().map(|v| v * 10.0).collect();
    let gb = ctx.storage_with("gate_up", &gu);
    for op in [
        Eltwise::SwiGlu,
        Eltwise::GluOss {
            alpha: 1.702,
            limit: 7.0,
        },
    ] {
        let yb = ctx.storage("y", (rows * n * 4) as u64);
        let d = ops
            .eltwise(
                op,
                Region::new(&gb, 0, 2 * n as u32),
                Some(Region::new(&gb, n as u32, 2 * n as u32)),
                Region::new(&yb, 0, n as u32),
                n as u32,
                rows as u32,
            )
            .unwrap();
        run(&ctx, &[&d]);
        let want: Vec<f32> = (0..rows * n)
            .map(|i| {
                let (g, u) = (gu[(i / n) * 2 * n + i % n], gu[(i / n) * 2 * n + n + i % n]);
                match op {
                    Eltwise::SwiGlu => g / (1.0 + (-g).exp()) * u,
                    _ => {
                        let g = g.min(7.0);
                        (u.clamp(-7.0, 7.0) + 1.0) * g / (1.0 + (-1.702 * g).exp())
                    }
                }
            })
            .collect();
        assert_close(
            &format!("{op:?}"),
            &ctx.read_f32(&yb, 0, rows * n).unwrap(),
            &want,
            1e-5,
        );
    }
    let a = rng.vec(rows * n);
    let y0 = rng.vec(rows * n);
    let (ab, yb) = (ctx.storage_with("a", &a), ctx.storage_with("y", &y0));
    let d = ops
        .eltwise(
            Eltwise::Add,
            Region::new(&ab, 0, n as u32),
            None,
            Region::new(&yb, 0, n as u32),
            n as u32,
            rows as u32,
        )
        .unwrap();
    run(&ctx, &[&d]);
    let want: Vec<f32> = a.iter().zip(&y0).map(|(a, b)| a + b).collect();
    assert_close("add", &ctx.read_f32(&yb, 0, rows * n).unwrap(), &want, 1e-6);
}

/// Causal attention of queries at positions pos0.. over the keys and values of all positions.
#[allow(clippy::too_many_arguments)]
fn cpu_attention(
    q: &[f32],
    keys: &[f32],
    vals: &[f32],
    pos0: usize,
    s: &AttnShape,
    sinks: Option<&[f32]>,
) -> Vec<f32> {
    let (h_n, kv_n, d) = (s.heads as usize, s.kv_heads as usize, s.head_dim as usize);
    let mut out = Vec::new();
    for (t, qt) in q.chunks(h_n * d).enumerate() {
        let qp = pos0 + t;
        let lo = if s.window > 0 {
            (qp + 1).saturating_sub(s.window as usize)
        } else {
            0
        };
        for h in 0..h_n {
            let kvh = h / (h_n / kv_n);
            let qh = &qt[h * d..(h + 1) * d];
            let scores: Vec<f64> = (lo..=qp)
                .map(|j| {
                    let k = &keys[(j * kv_n + kvh) * d..(j * kv_n + kvh + 1) * d];
                    qh.iter()
                        .zip(k)
                        .map(|(a, b)| (*a as f64) * (*b as f64))
                        .sum::<f64>()
                        * s.scale as f64
                })
                .collect();
            let sink = sinks.map(|x| x[h] as f64);
            let m = scores
                .iter()
                .copied()
                .fold(sink.unwrap_or(f64::MIN), f64::max);
            let denom: f64 = scores.iter().map(|v| (v - m).exp()).sum::<f64>()
                + sink.map(|x| (x - m).exp()).unwrap_or(0.0);
            for i in 0..d {
                let acc: f64 = (lo..=qp)
                    .zip(&scores)
                    .map(|(j, sc)| (sc - m).exp() * vals[(j * kv_n + kvh) * d + i] as f64)
                    .sum();
                out.push((acc / denom) as f32);
            }
        }
    }
    out
}

fn round_f16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| half::f16::from_f32(*x).to_f32()).collect()
}

/// Prefills `first` tokens, then the rest `then` at a time, comparing every step.
fn attention_case(
    ctx: &Arc<GpuContext>,
    shape: AttnShape,
    f16: bool,
    sinks: Option<Vec<f32>>,
    total: usize,
    first: usize,
    then: usize,
) {
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(13 + total as u64);
    let (h_n, kv_n, d) = (
        shape.heads as usize,
        shape.kv_heads as usize,
        shape.head_dim as usize,
    );
    let q = rng.vec(total * h_n * d);
    let k = rng.vec(total * kv_n * d);
    let v = rng.vec(total * kv_n * d);
    let (kr, vr) = if f16 {
        (round_f16(&k), round_f16(&v))
    } else {
        (k.clone(), v.clone())
    };
    let cache = KvCache::new(ctx, shape.cache_len, shape.kv_heads, shape.head_dim, f16);
    let sink_buf = sinks.as_ref().map(|s| ctx.storage_with("sinks", s));
    let step_buf = ctx.uniform("step", &Step::default());
    let scratch_len = shape
        .scratch_len(first as u32)
        .max(shape.scratch_len(then as u32));
    let scratch = ctx.storage("scratch", scratch_len * 4);
    let what = format!(
        "attention f16={f16} window={} cache={} sinks={}",
        shape.window,
        shape.cache_len,
        sinks.is_some()
    );
    let mut pos = 0;
    while pos < total {
        let n = if pos == 0 {
            first
        } else {
            then.min(total - pos)
        };
        // src = [k | v] of the step's tokens; q separately; out offset by 1 to test offsets.
        let mut src = k[pos * kv_n * d..(pos + n) * kv_n * d].to_vec();
        src.extend(&v[pos * kv_n * d..(pos + n) * kv_n * d]);
        let sb = ctx.storage_with("kv", &src);
        let qb = ctx.storage_with("q", &q[pos * h_n * d..(pos + n) * h_n * d]);
        let ob = ctx.storage("out", ((n * h_n * d + 1) * 4) as u64);
        ctx.queue.write_buffer(
            &step_buf,
            0,
            bytemuck::bytes_of(&Step {
                pos0: pos as u32,
                tokens: n as u32,
                _pad: [0; 2],
            }),
        );
        let w = ops
            .write_kv(
                &shape,
                &cache,
                Region::new(&sb, 0, 0),
                Region::new(&sb, (n * kv_n * d) as u32, 0),
                &step_buf,
                n as u32,
            )
            .unwrap();
        let [a, c] = ops
            .attention(
                &shape,
                &cache,
                &qb,
                0,
                &ob,
                1,
                &scratch,
                sink_buf.as_ref().map(|b| Region::new(b, 0, 0)),
                &step_buf,
                n as u32,
            )
            .unwrap();
        run(ctx, &[&w, &a, &c]);
        let got = ctx.read_f32(&ob, 1, n * h_n * d).unwrap();
        let want = cpu_attention(
            &q[pos * h_n * d..(pos + n) * h_n * d],
            &kr,
            &vr,
            pos,
            &shape,
            sinks.as_deref(),
        );
        assert_close(&format!("{what} at position {pos}"), &got, &want, 2e-4);
        pos += n;
    }
}

#[test]
fn attention_full_window_and_sinks() {
    let Some(ctx) = shared() else { return };
    let base = AttnShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        cache_len: 300,
        window: 0,
        scale: 0.25,
    };
    // 270 prefill tokens span two key chunks; then two decode steps.
    attention_case(&ctx, base, true, None, 272, 270, 1);
    attention_case(&ctx, base, false, None, 40, 37, 1);
    attention_case(
        &ctx,
        AttnShape { window: 7, ..base },
        true,
        Some(vec![0.5, -1.0, 2.0, 0.0]),
        30,
        20,
        1,
    );
}

#[test]
fn attention_over_more_chunks_than_workgroups() {
    let Some(ctx) = shared() else { return };
    // 11 key chunks: the prompt runs one workgroup per query over all of them, the 3-token
    // steps 8 workgroups per query, some taking two chunks, merged by the combine pass.
    let shape = AttnShape {
        heads: 4,
        kv_heads: 1,
        head_dim: 16,
        cache_len: 2600,
        window: 0,
        scale: 0.25,
    };
    attention_case(
        &ctx,
        shape,
        true,
        Some(vec![0.3, -0.2, 0.0, 1.0]),
        2599,
        2590,
        3,
    );
}

#[test]
fn attention_sliding_window_cache_wraps() {
    let Some(ctx) = shared() else { return };
    // The cache holds the window plus one token: positions wrap around it while decoding.
    let shape = AttnShape {
        heads: 6,
        kv_heads: 3,
        head_dim: 8,
        cache_len: 6,
        window: 5,
        scale: 0.3,
    };
    attention_case(&ctx, shape, true, Some(vec![0.1; 6]), 14, 1, 1);
}

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
            .moe_combine(&ob, &wb, &yb, n as u32, k as u32, tokens as u32)
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

#[test]
fn argmax_and_top_k() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(15);
    let (n, rows, k) = (1000usize, 3usize, 7usize);
    let mut logits = rng.vec(n * rows);
    // A tie in row 1: the lower index wins.
    logits[n + 10] = 5.0;
    logits[n + 900] = 5.0;
    let lb = ctx.storage_with("logits", &logits);
    let ib = ctx.storage("ids", (rows * k * 4) as u64);
    let d = ops.argmax(&lb, 0, n as u32, rows as u32, &ib).unwrap();
    run(&ctx, &[&d]);
    let ids = ctx.read_u32(&ib, 0, rows).unwrap();
    for r in 0..rows {
        let row = &logits[r * n..(r + 1) * n];
        let best = (0..n).fold(0, |b, i| if row[i] > row[b] { i } else { b });
        assert_eq!(ids[r] as usize, best, "argmax row {r}");
    }
    assert_eq!(ids[1], 10);
    let vb = ctx.storage("values", (rows * k * 4) as u64);
    let d = ops
        .top_k(&lb, 0, n as u32, rows as u32, k as u32, &ib, &vb)
        .unwrap();
    run(&ctx, &[&d]);
    let (ids, vals) = (
        ctx.read_u32(&ib, 0, rows * k).unwrap(),
        ctx.read_f32(&vb, 0, rows * k).unwrap(),
    );
    for r in 0..rows {
        let row = &logits[r * n..(r + 1) * n];
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|a, b| row[*b].total_cmp(&row[*a]).then(a.cmp(b)));
        for s in 0..k {
            assert_eq!(ids[r * k + s] as usize, order[s], "top-k row {r} rank {s}");
            assert_eq!(vals[r * k + s], row[order[s]]);
        }
    }
}
