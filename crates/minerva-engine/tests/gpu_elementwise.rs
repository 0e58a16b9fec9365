//! GPU activation kernels against plain CPU versions on random data of awkward sizes: RMSNorm,
//! RoPE (both layouts), add / SwiGLU / gpt-oss GLU, and argmax and top-k over one or many
//! workgroups.

mod gpu_common;

use gpu_common::activations::*;
use gpu_common::*;
use minerva_engine::gpu::ops::select_scratch_len;
use minerva_engine::gpu::{Eltwise, Ops, Region, Step};

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

/// Indices of a row best first, ties to the lower index (the CPU backend's order).
fn cpu_order(row: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|a, b| row[*b].total_cmp(&row[*a]).then(a.cmp(b)));
    order
}

#[test]
fn argmax_and_top_k() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(15);
    // One value; a whole row (with -inf) as top-k; rows of one workgroup; many workgroups with
    // ties across them; more workgroups than the merge takes at 2048 values each; the sampler's
    // 256 candidates over a vocabulary (lists of the sorted top-k merged over several windows);
    // more candidates than the sorted top-k takes; a row of one value repeated (more ties at
    // the k-th than are kept); two blocks far above the third (more entries within the merge's
    // bound than one sort holds).
    for (n, rows, k, shape) in [
        (1usize, 2usize, 1usize, ""),
        (33, 3, 33, ""),
        (1000, 3, 7, ""),
        (100_003, 2, 40, ""),
        (2_100_001, 1, 5, ""),
        (32_000, 2, 256, ""),
        (5_000, 1, 1_500, ""),
        (9_000, 2, 300, "flat"),
        (6_144, 1, 1_000, "tiers"),
    ] {
        let flat = shape == "flat";
        let mut logits = rng.vec(n * rows);
        if shape == "tiers" {
            logits[..4_096].iter_mut().for_each(|v| *v += 10.0);
        }
        if flat {
            // Every value the same but a few better ones.
            logits.iter_mut().for_each(|v| *v = 0.25);
            for r in 0..rows {
                logits[r * n + 4_000 + r] = 1.0;
                logits[r * n + 7] = 0.5;
            }
        }
        for r in 0..rows {
            let row = &mut logits[r * n..(r + 1) * n];
            // Ties: the top and the next value in several places each; the lowest index wins.
            if n > 30 && !flat {
                for at in [n - 1, n / 2 + r, 17 + r, 29] {
                    row[at] = 5.0;
                }
                for at in [n - 2, n / 3, 3] {
                    row[at] = 4.0;
                }
                row[5] = f32::NEG_INFINITY;
                row[20] = f32::NEG_INFINITY;
            }
        }
        let lb = ctx.storage_with("logits", &logits);
        let ib = ctx.storage("ids", (rows * k * 4) as u64);
        let vb = ctx.storage("values", (rows * k * 4) as u64);
        let lists = ctx.storage(
            "lists",
            select_scratch_len(n as u32, rows as u32, k as u32) * 4,
        );
        let counters = ctx.storage("counters", rows as u64 * 4);
        let what = format!("{rows} rows of {n}");
        let d = ops
            .argmax(&lb, 0, n as u32, rows as u32, &ib, &lists, &counters, None)
            .unwrap();
        run(&ctx, &[&d]);
        let ids = ctx.read_u32(&ib, 0, rows).unwrap();
        let orders: Vec<Vec<usize>> = logits.chunks(n).map(cpu_order).collect();
        for r in 0..rows {
            assert_eq!(ids[r] as usize, orders[r][0], "argmax {what}: row {r}");
        }
        // A token chosen for the next step moves the step on to that token's: after a step of
        // 7 tokens from position 40, one token at 47.
        let step = ctx.storage_with("step", &[Step::new(40, 7)]);
        let moving = ops.argmax(
            &lb,
            0,
            n as u32,
            rows as u32,
            &ib,
            &lists,
            &counters,
            Some(&step),
        );
        if rows == 1 {
            run(&ctx, &[&moving.unwrap()]);
            let id = ctx.read_u32(&ib, 0, 1).unwrap()[0] as usize;
            assert_eq!(id, orders[0][0], "argmax {what}, moving the step on");
            let moved = ctx.read_u32(&step, 0, 2).unwrap();
            assert_eq!(moved, [47, 1], "{what}: the step after the choice");
        } else {
            assert!(moving.is_err(), "{what}: one step moved on by {rows} rows");
        }
        let d = ops
            .top_k(
                &lb,
                0,
                n as u32,
                rows as u32,
                k as u32,
                &ib,
                &vb,
                &lists,
                &counters,
            )
            .unwrap();
        run(&ctx, &[&d]);
        let (ids, vals) = (
            ctx.read_u32(&ib, 0, rows * k).unwrap(),
            ctx.read_f32(&vb, 0, rows * k).unwrap(),
        );
        for r in 0..rows {
            for s in 0..k {
                let want = orders[r][s];
                assert_eq!(
                    ids[r * k + s] as usize,
                    want,
                    "top-{k} {what}: row {r} rank {s}"
                );
                assert_eq!(vals[r * k + s], logits[r * n + want]);
            }
        }
        let left = ctx.read_u32(&counters, 0, rows).unwrap();
        assert!(left.iter().all(|&c| c == 0), "{what}: counters {left:?}");
    }
}
