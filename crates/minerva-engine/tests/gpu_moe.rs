//! GPU mixture-of-experts kernels against the CPU: expert products reading their expert ids
//! from the GPU (decode matvec, gate, up and activation in one product, and the grouped
//! prefill product after `moe_group`). Routing and combining are in `gpu_moe_routing.rs`.

mod gpu_common;

use gpu_common::weights::*;
use gpu_common::*;
use minerva_engine::gpu::ops::MATMUL_TOKENS;
use minerva_engine::gpu::ops::MOE_COOP_TILES;
use minerva_engine::gpu::{
    moe_max_tiles, moe_tile_pairs, Bias, Eltwise, ExpertSel, ExpertTiles, Folds, GpuContext,
    GpuWeight, MatSel, Ops, Region,
};
use minerva_formats::DType;
use std::sync::Arc;

#[test]
fn expert_matvec_reads_expert_ids_from_the_gpu() {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(3);
    let (experts, rows, cols) = (5usize, 19usize, 64usize);
    let s = make(DType::Q8_0, experts * rows, cols, &mut rng);
    let w_ref = s.reference().unwrap();
    let bias = rng.vec(experts * rows);
    // Whole experts per part: a limit of 2 experts' rows splits 5 experts into 3 parts.
    for limit in [None, Some(2 * rows * 68 + 4)] {
        let mut ctx = GpuContext::new(&exact()).unwrap();
        if let Some(l) = limit {
            ctx.caps.max_binding = l as u64;
        }
        let ctx = Arc::new(ctx);
        let ops = Ops::new(ctx.clone());
        let w = GpuWeight::upload(&ctx, &s.view(vec![experts, rows, cols]), rows).unwrap();
        assert_eq!(w.parts.len(), if limit.is_some() { 3 } else { 1 });
        // Two tokens, two experts each; gate/up style: item z reads token z / 2.
        let ids: Vec<u32> = vec![4, 1, 0, 4];
        let x = rng.vec(2 * cols);
        let (xb, ib, bb) = (
            ctx.storage_with("x", &x),
            ctx.storage_with("ids", &ids),
            ctx.storage_with("bias", &bias),
        );
        let yb = ctx.storage("y", (4 * rows * 4) as u64);
        let sel = ExpertSel { ids: &ib, x_div: 2 };
        let bias_sel = Bias {
            buf: &bb,
            offset: 0,
            expert_stride: rows as u32,
        };
        let all = MatSel::plain(rows, cols);
        let d = ops
            .matvec(
                &w,
                &all,
                Region::new(&xb, 0, cols as u32),
                Region::new(&yb, 0, rows as u32),
                4,
                Some(bias_sel),
                Some(sel),
                Folds::default(),
            )
            .unwrap();
        ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
        let got = ctx.read_f32(&yb, 0, 4 * rows).unwrap();
        for (z, &e) in ids.iter().enumerate() {
            let e = e as usize;
            let wslice = &w_ref[e * rows * cols..(e + 1) * rows * cols];
            let (mut want, mag) = cpu_matmul(
                wslice,
                &x[(z / 2) * cols..(z / 2 + 1) * cols],
                rows,
                cols,
                1,
            );
            for (r, v) in want.iter_mut().enumerate() {
                *v += bias[e * rows + r];
            }
            assert_dots_close(
                &format!("expert item {z}"),
                &got[z * rows..(z + 1) * rows],
                &want,
                &mag,
                2e-5,
            );
        }
    }
}

/// Expert ids for `tokens` tokens, k = 2 distinct experts each: every token's first choice is
/// expert 1 when `all_one`, else random; expert 3 is never chosen.
fn expert_ids(tokens: usize, all_one: bool, rng: &mut Rng) -> Vec<u32> {
    let pool = [0u32, 1, 2, 4];
    let mut ids = Vec::new();
    for _ in 0..tokens {
        let a = if all_one {
            1
        } else {
            pool[rng.below(4) as usize]
        };
        let mut b = pool[rng.below(4) as usize];
        while b == a {
            b = pool[rng.below(4) as usize];
        }
        ids.extend([a, b]);
    }
    ids
}

/// Checks the grouping of `ids`: every item listed once, each tile within one expert's items
/// and at most a tile long; with `pairs`, tiles 2i and 2i + 1 of one expert, the second empty
/// where the first is.
fn check_groups(ids: &[u32], order: &[u32], tiles: &[u32], tile_tokens: u32, pairs: bool) {
    let mut seen = vec![0; ids.len()];
    if pairs {
        for pair in tiles.chunks(8) {
            let (a, b) = (&pair[..4], &pair[4..]);
            if b[2] > 0 {
                assert!(a[2] > 0 && a[0] == b[0], "pair {pair:?} spans experts");
            }
        }
    }
    for t in tiles.chunks(4) {
        let (e, first, count) = (t[0], t[1] as usize, t[2]);
        assert!(count <= tile_tokens, "tile {t:?} too long");
        for &item in &order[first..first + count as usize] {
            assert_eq!(ids[item as usize], e, "item {item} in a tile of expert {e}");
            seen[item as usize] += 1;
        }
    }
    assert!(seen.iter().all(|&c| c == 1), "items listed {seen:?} times");
}

/// The prefill expert product: the items grouped by expert on the GPU (`moe_group`), then the
/// tiled kernel over each expert's items, against the CPU item by item: 1, 3, 37 and 130 tokens,
/// every token picking one expert, an expert nobody picks, experts split across parts, expert
/// biases, an interleaved (gate_up-style) view over 71 outputs, and gate/up-style (item reads
/// token i / k) and down-style (item reads row i) inputs.
#[test]
fn grouped_expert_matmul_matches_the_cpu() {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(8);
    let (experts, k, stored, cols) = (5usize, 2usize, 142usize, 64usize);
    let sel = MatSel {
        matrix: 0,
        offset: 1,
        stride: 2,
        out_dim: stored / 2,
        in_dim: cols,
        input_major: false,
    };
    let rows = sel.out_dim;
    let bias = rng.vec(experts * rows);
    for dtype in [DType::Q8_0, DType::HfMxfp4] {
        let s = make(dtype, experts * stored, cols, &mut rng);
        let w_ref = s.reference().unwrap();
        let widest = s
            .bufs
            .iter()
            .map(|b| b.len() / (experts * stored))
            .max()
            .unwrap();
        // Whole experts per part: a limit of 2 experts' rows splits 5 experts into 3 parts.
        for limit in [None, Some(2 * stored * widest + 4)] {
            let mut ctx = GpuContext::new(&exact()).unwrap();
            if let Some(l) = limit {
                ctx.caps.max_binding = l as u64;
            }
            let ctx = Arc::new(ctx);
            let ops = Ops::new(ctx.clone());
            let w = GpuWeight::upload(&ctx, &s.view(vec![experts, stored, cols]), stored).unwrap();
            assert_eq!(w.parts.len(), if limit.is_some() { 3 } else { 1 });
            let bb = ctx.storage_with("bias", &bias);
            for (tokens, all_one) in [(1, false), (3, false), (37, true), (130, false)] {
                let items = tokens * k;
                let ids = expert_ids(tokens, all_one, &mut rng);
                let ib = ctx.storage_with("ids", &ids);
                let max_tiles = moe_max_tiles(items as u32, experts as u32);
                let ob = ctx.storage("order", (items * 4) as u64);
                let tb = ctx.storage("tiles", max_tiles as u64 * 16);
                let g = ops
                    .moe_group(&ib, experts as u32, k as u32, tokens as u32, &ob, &tb)
                    .unwrap();
                ctx.submit(&[&g]).unwrap();
                check_groups(
                    &ids,
                    &ctx.read_u32(&ob, 0, items).unwrap(),
                    &ctx.read_u32(&tb, 0, max_tiles as usize * 4).unwrap(),
                    MATMUL_TOKENS,
                    moe_tile_pairs(items as u32, experts as u32),
                );
                let pairs = moe_tile_pairs(items as u32, experts as u32);
                for x_div in [k, 1] {
                    let x = rng.vec(items / x_div * cols);
                    let xb = ctx.storage_with("x", &x);
                    let yb = ctx.storage("y", (items * rows * 4) as u64);
                    let d = ops
                        .matmul_experts(
                            &w,
                            &sel,
                            Region::new(&xb, 0, cols as u32),
                            Region::new(&yb, 0, rows as u32),
                            Some(Bias {
                                buf: &bb,
                                offset: 0,
                                expert_stride: rows as u32,
                            }),
                            ExpertTiles {
                                order: &ob,
                                tiles: &tb,
                                max_tiles,
                                pairs,
                                x_div: x_div as u32,
                            },
                        )
                        .unwrap();
                    ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
                    let got = ctx.read_f32(&yb, 0, items * rows).unwrap();
                    for (i, &e) in ids.iter().enumerate() {
                        let e = e as usize;
                        let wsel: Vec<f32> = (0..rows)
                            .flat_map(|j| {
                                let r = e * stored + 1 + 2 * j;
                                w_ref[r * cols..(r + 1) * cols].to_vec()
                            })
                            .collect();
                        let xi = &x[(i / x_div) * cols..(i / x_div + 1) * cols];
                        let (mut want, mag) = cpu_matmul(&wsel, xi, rows, cols, 1);
                        for (j, v) in want.iter_mut().enumerate() {
                            *v += bias[e * rows + j];
                        }
                        assert_dots_close(
                            &format!(
                                "{} {tokens} tokens, x_div {x_div}, parts {}, item {i}",
                                dtype.name(),
                                w.parts.len()
                            ),
                            &got[i * rows..(i + 1) * rows],
                            &want,
                            &mag,
                            2e-5,
                        );
                    }
                }
            }
        }
    }
}

/// The prefill expert product on matrix cores (`matmul_experts_coop`: items gathered as f16 per
/// tile, experts decoded two at a time, each item's row scattered back with its expert's bias)
/// against the CPU item by item: gpt-oss MXFP4 experts of 64 outputs over 96 inputs and F16
/// ones over 1,000 (padded to 1,024, the product split into shares of its inputs: four, two on
/// the staged kernel), split
/// into parts of whole experts, an expert nobody picks, 40, 130 and 300 tokens (in pairs of
/// tiles), gate/up-style and down-style inputs; the tiles in pairs on the staged kernel where
/// the adapter has it (`matmul_staged.wgsl`). Where the adapter has no matrix cores (lavapipe),
/// `matmul_experts` runs in its place after a loud SKIPPED line.
#[test]
fn grouped_expert_matmul_on_matrix_cores_matches_the_cpu() {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(11);
    let (experts, k, rows) = (6usize, 2usize, 64usize);
    let bias = rng.vec(experts * rows);
    let mut off = Vec::new();
    // Few contexts: NVIDIA's driver stops offering adapters after a dozen (gpu_common).
    for (dtype, cols) in [(DType::HfMxfp4, 96), (DType::F16, 1000)] {
        let s = make(dtype, experts * rows, cols, &mut rng);
        let w_ref = s.reference().unwrap();
        let widest = s
            .bufs
            .iter()
            .map(|b| b.len() / (experts * rows))
            .max()
            .unwrap();
        for limit in [None, Some(3 * rows * widest + 4)] {
            let mut ctx = GpuContext::new(&Default::default()).unwrap();
            // The weight is split under the lowered limit; the product runs under the real one.
            let full = ctx.caps.max_binding;
            if let Some(l) = limit {
                ctx.caps.max_binding = l as u64;
            }
            let w = GpuWeight::upload(&ctx, &s.view(vec![experts, rows, cols]), rows).unwrap();
            ctx.caps.max_binding = full;
            let coop = ctx.caps.matrix_cores;
            if !coop && limit.is_none() {
                eprintln!(
                    "SKIPPED: {} has no matrix cores; checking the f32 expert tiles instead",
                    ctx.describe()
                );
            }
            let ctx = Arc::new(ctx);
            let mut ops = Ops::new(ctx.clone());
            // Two experts' f16 matrices per step.
            ops.set_expert_chunk_bytes(2 * rows as u64 * cols.div_ceil(32) as u64 * 32 * 2);
            assert_eq!(w.parts.len(), if limit.is_some() { 2 } else { 1 });
            let sel = MatSel::whole(&w);
            let sel = MatSel {
                out_dim: rows,
                ..sel
            };
            let bb = ctx.storage_with("bias", &bias);
            // 300 tokens: the tiles in pairs, 64 tokens per matrix-core workgroup.
            for tokens in [40, 130, 300] {
                let items = tokens * k;
                // Expert 5 is never picked.
                let ids: Vec<u32> = (0..items).map(|_| rng.below(5) as u32).collect();
                let ib = ctx.storage_with("ids", &ids);
                let max_tiles = moe_max_tiles(items as u32, experts as u32);
                let ob = ctx.storage("order", (items * 4) as u64);
                let tb = ctx.storage_uniform("tiles", MOE_COOP_TILES as u64 * 16);
                let g = ops
                    .moe_group(&ib, experts as u32, k as u32, tokens as u32, &ob, &tb)
                    .unwrap();
                ctx.submit(&[&g]).unwrap();
                assert_eq!(
                    ops.experts_on_matrix_cores(&w, &sel, items as u32, max_tiles),
                    coop,
                    "{} experts on matrix cores",
                    dtype.name()
                );
                let pairs = moe_tile_pairs(items as u32, experts as u32);
                for x_div in [k, 1] {
                    let x = rng.vec(items / x_div * cols);
                    let xb = ctx.storage_with("x", &x);
                    let yb = ctx.storage("y", (items * rows * 4) as u64);
                    let xr = Region::new(&xb, 0, cols as u32);
                    let yr = Region::new(&yb, 0, rows as u32);
                    let b = Some(Bias {
                        buf: &bb,
                        offset: 0,
                        expert_stride: rows as u32,
                    });
                    let e = ExpertTiles {
                        order: &ob,
                        tiles: &tb,
                        max_tiles,
                        pairs,
                        x_div: x_div as u32,
                    };
                    let d = if coop {
                        ops.matmul_experts_coop(&w, &sel, xr, yr, b, e).unwrap()
                    } else {
                        ops.matmul_experts(&w, &sel, xr, yr, b, e).unwrap()
                    };
                    // Tiles in pairs stage their matrices in workgroup memory where the
                    // adapter lets them.
                    let staged = d.iter().any(|d| d.label.starts_with("matmul_staged.wgsl"));
                    assert_eq!(
                        staged,
                        coop && pairs && ctx.caps.staged_matrices,
                        "{tokens} tokens"
                    );
                    ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
                    let got = ctx.read_f32(&yb, 0, items * rows).unwrap();
                    for (i, &e) in ids.iter().enumerate() {
                        let e = e as usize;
                        let we = &w_ref[e * rows * cols..(e + 1) * rows * cols];
                        let xi = &x[(i / x_div) * cols..(i / x_div + 1) * cols];
                        let (mut want, mag) = cpu_matmul(we, xi, rows, cols, 1);
                        for (j, v) in want.iter_mut().enumerate() {
                            *v += bias[e * rows + j];
                        }
                        let tol = if coop { TOL_F16_INPUTS } else { 2e-5 };
                        let bad = (0..rows)
                            .find(|&j| (got[i * rows + j] - want[j]).abs() > tol * (1.0 + mag[j]));
                        if let Some(j) = bad {
                            off.push(format!(
                                "{} {tokens} tokens, x_div {x_div}, parts {}, item {i} \
                                 output {j}: {} against {}",
                                dtype.name(),
                                w.parts.len(),
                                got[i * rows + j],
                                want[j]
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        off.is_empty(),
        "{} items off, first: {:?}",
        off.len(),
        &off[..off.len().min(5)]
    );
}

/// A gate/up layout of expert weights: its name, the two weights and views, and where output j
/// of expert e is stored for each (the reference's index and row).
type Layout<'a> = (
    &'static str,
    [&'a GpuWeight; 2],
    [MatSel; 2],
    &'a dyn Fn(usize, usize) -> [(usize, usize); 2],
);

/// act(G_e·x + bg_e, U_e·x + bu_e) of the expert each item picks on the GPU, in one product:
/// GGUF MXFP4, MLX/HF MXFP4 and Q8_0 experts; separate gate and up weights and one interleaved
/// gate_up weight (gpt-oss Hugging Face); whole and split into parts of whole experts (items
/// whose experts lie in different parts); with and without biases; both activations; 19 rows
/// (not a whole number of workgroups) and rows of 73 units.
#[test]
fn expert_gate_up_and_activation_in_one_product() {
    let cases = [
        (DType::MXFP4, 96usize),
        (DType::HfMxfp4, 2336),
        (DType::Q8_0, 64),
    ];
    check_glu_experts(&cases, false, 1e-4);
}

/// The same with the products in packed f16 where the adapter offers f16: GGUF, HF and MLX
/// MXFP4 experts, rows of gpt-oss's 2880 values (90 units). Each product within f16's bound
/// (`TOL_F16_INPUTS` of its terms' magnitude); the activation's error is about |u| times the
/// gate's plus |act/u| times the up's, hence twice that bound of the product of magnitudes.
#[test]
fn packed_f16_expert_gate_up_and_activation() {
    let cases = [
        (DType::MXFP4, 2880usize),
        (DType::HfMxfp4, 2880),
        (DType::MlxMxfp4, 96),
    ];
    check_glu_experts(&cases, true, 2.0 * TOL_F16_INPUTS);
}

/// `Ops::matvec_glu_experts` for the weight dtypes and row lengths of `cases` against the CPU,
/// in packed f16 (where offered) or in f32, within tol · (1 + Σ|g·x|) · (1 + Σ|u·x|).
fn check_glu_experts(cases: &[(DType, usize)], packed: bool, tol: f32) {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(12);
    let (experts, rows, k) = (5usize, 19usize, 2usize);
    // Two tokens, two experts each: item z reads token z / k.
    let ids: Vec<u32> = vec![4, 1, 0, 4];
    for &(dtype, cols) in cases {
        // Separate weights [E, rows, cols], and one [E, 2·rows, cols] with gate at even rows.
        let gate = make(dtype, experts * rows, cols, &mut rng);
        let up = make(dtype, experts * rows, cols, &mut rng);
        let fused = make(dtype, experts * 2 * rows, cols, &mut rng);
        let x = rng.vec(2 * cols);
        let bg = rng.vec(experts * rows + 3);
        let bu = rng.vec(experts * rows + 3);
        // Weights whole and split across bindings; packed f16 x converted once per workgroup
        // and per row.
        for (split, halves) in [(false, true), (true, true), (false, false)] {
            let ctx = experts_context(&exact(), &gate, experts, rows, split);
            let mut ops = Ops::new(ctx.clone());
            ops.set_packed_f16(packed);
            ops.set_x_halves(halves);
            assert_eq!(ops.packed_f16(), packed && ctx.caps.f16);
            let upload = |s: &Stored, stored: usize| {
                let w = GpuWeight::upload(&ctx, &s.view(vec![experts, stored, cols]), stored);
                w.unwrap()
            };
            let (gw, uw, fw) = (
                upload(&gate, rows),
                upload(&up, rows),
                upload(&fused, 2 * rows),
            );
            let parts = if split { 3 } else { 1 };
            assert_eq!((gw.parts.len(), uw.parts.len()), (parts, parts));
            let view = |offset: usize, stride: usize| MatSel {
                matrix: 0,
                offset,
                stride,
                out_dim: rows,
                in_dim: cols,
                input_major: false,
            };
            let refs = [gate.reference(), up.reference(), fused.reference()].map(Option::unwrap);
            // Stored rows of gate and up output j of expert e: (reference, row) each.
            let separate = |e: usize, j: usize| [(0, e * rows + j), (1, e * rows + j)];
            let interleaved =
                |e: usize, j: usize| [(2, e * 2 * rows + 2 * j), (2, e * 2 * rows + 2 * j + 1)];
            let layouts: [Layout; 2] = [
                ("separate", [&gw, &uw], [view(0, 1), view(0, 1)], &separate),
                (
                    "interleaved",
                    [&fw, &fw],
                    [view(0, 2), view(1, 2)],
                    &interleaved,
                ),
            ];
            let (xb, ib) = (ctx.storage_with("x", &x), ctx.storage_with("ids", &ids));
            let (bgb, bub) = (ctx.storage_with("bg", &bg), ctx.storage_with("bu", &bu));
            for (name, weights, sels, rows_of) in layouts {
                for biased in [true, false] {
                    for act in [
                        Eltwise::SwiGlu,
                        Eltwise::GluOss {
                            alpha: 1.702,
                            limit: 7.0,
                        },
                    ] {
                        // Output rows padded by 2 per item.
                        let yb = ctx.storage("y", (ids.len() * (rows + 2) * 4) as u64);
                        let biases = biased.then(|| {
                            [(&bgb, 3), (&bub, 1)].map(|(buf, offset)| Bias {
                                buf,
                                offset,
                                expert_stride: rows as u32,
                            })
                        });
                        let d = ops
                            .matvec_glu_experts(
                                weights,
                                [&sels[0], &sels[1]],
                                Region::new(&xb, 0, cols as u32),
                                Region::new(&yb, 0, rows as u32 + 2),
                                ids.len() as u32,
                                act,
                                biases,
                                ExpertSel {
                                    ids: &ib,
                                    x_div: k as u32,
                                },
                                None,
                            )
                            .unwrap();
                        assert_eq!(
                            d.len(),
                            if name == "separate" {
                                parts
                            } else {
                                fw.parts.len()
                            }
                        );
                        ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
                        let got = ctx.read_f32(&yb, 0, ids.len() * (rows + 2)).unwrap();
                        for (z, &e) in ids.iter().enumerate() {
                            let e = e as usize;
                            let xz = &x[(z / k) * cols..(z / k + 1) * cols];
                            for j in 0..rows {
                                let [(wg, rg), (wu, ru)] = rows_of(e, j);
                                let dot = |w: usize, r: usize| {
                                    cpu_matmul(&refs[w][r * cols..(r + 1) * cols], xz, 1, cols, 1)
                                };
                                let (g, u) = (dot(wg, rg), dot(wu, ru));
                                let (mut gv, mut uv) = (g.0[0], u.0[0]);
                                if biased {
                                    gv += bg[3 + e * rows + j];
                                    uv += bu[1 + e * rows + j];
                                }
                                let want = match act {
                                    Eltwise::SwiGlu => gv / (1.0 + (-gv).exp()) * uv,
                                    _ => {
                                        let gc = gv.min(7.0);
                                        (uv.clamp(-7.0, 7.0) + 1.0) * gc
                                            / (1.0 + (-1.702 * gc).exp())
                                    }
                                };
                                let have = got[z * (rows + 2) + j];
                                let tol = tol * (1.0 + g.1[0]) * (1.0 + u.1[0]);
                                assert!(
                                    (have - want).abs() <= tol,
                                    "{} {name} split={split} halves={halves} bias={biased} {act:?} packed={packed} item {z} row {j}: {have} vs {want}",
                                    dtype.name()
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
