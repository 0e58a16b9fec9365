//! GPU decode products with int8 x (DOT_I8) for Q4_0, Q4_1, Q5_1, Q8_0, k-quant and MLX 4- and
//! 8-bit affine weights against the CPU, within the quantization of x: one weight, several in
//! one dispatch (reading the MoE combine's records too), expert products, gate/up products
//! quantizing x themselves and writing their results as records for the down product.

mod gpu_common;

use gpu_common::weights::*;
use gpu_common::*;
use minerva_engine::gpu::{
    Bias, Eltwise, ExpertSel, Folds, GpuWeight, MatSel, Multi, NormFold, Ops, Region,
};
use minerva_formats::DType;

/// What the int8 decode products (Q4_0, Q8_0 with x as two int8 terms) may differ from the
/// exact product: each x value moves by at most s / 508, s = max|x| / 127 over its part (parts
/// of 8 values: vec4s j and j + 4 of a unit, for every dtype), so row r by at most
/// Σ_c |w[r][c]| · max|x of c's part| / 64516; 5 % more for the float rounding of the step and
/// of x / s. One int8 term (up to s / 2 per value) is 127 times this and breaks it.
fn int8_bounds(w: &[f32], x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let part_of = |c: usize| c / 32 * 4 + c % 16 / 4;
    let mut amax = vec![0f32; cols / 8];
    for (c, v) in x.iter().enumerate() {
        amax[part_of(c)] = amax[part_of(c)].max(v.abs());
    }
    (0..rows)
        .map(|r| {
            let moved: f64 = (0..cols)
                .map(|c| (w[r * cols + c].abs() * amax[part_of(c)]) as f64 / 64516.0)
                .sum();
            (moved * 1.05) as f32
        })
        .collect()
}

/// Asserts the int8 products' results lie within their bounds of the exact ones (with f32
/// rounding), and are not bit for bit the f32 decode products' (`f32_got`): the int8 path ran.
fn assert_int8_close(
    what: &str,
    got: &[f32],
    f32_got: &[f32],
    want: &[f32],
    mag: &[f32],
    bound: &[f32],
) {
    let f32_tol = |i: usize| 2e-5 * (1.0 + mag[i]);
    for i in 0..got.len() {
        assert!(
            (got[i] - want[i]).abs() <= bound[i] + f32_tol(i) && got[i].is_finite(),
            "{what}: element {i} is {}, expected {} within {} (terms' magnitude {})",
            got[i],
            want[i],
            bound[i],
            mag[i]
        );
    }
    assert_ne!(got, f32_got, "{what}: int8 results as the f32 ones");
}

/// x of `cols` values with unit 1 all zero (parts whose step is 0).
fn x_with_zero_unit(cols: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x: Vec<f32> = rng.vec(cols).iter().map(|v| 2.0 * v + 0.3).collect();
    x[32..64].fill(0.0);
    x
}

/// The weight dtypes whose decode products take int8 x.
const INT8_DTYPES: [DType; 9] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::MlxAffine { bits: 4, group: 64 },
    DType::MlxAffine { bits: 8, group: 32 },
];

/// Row lengths the int8 products are checked at: for Q4_0 and Q8_0, 96, 2336 (73 units: rows'
/// lanes end on different parts of a unit) and 2880 (gpt-oss: 90 units, 360 parts, more than one
/// workgroup of the quantization); k-quants, whose blocks hold 256 values, and MLX's affine
/// weights (groups of up to 128), 256, 2304 and 2560.
fn int8_cols(dtype: DType) -> [usize; 3] {
    match dtype {
        DType::Q4_K | DType::Q5_K | DType::Q6_K | DType::MlxAffine { .. } => [256, 2304, 2560],
        _ => [96, 2336, 2880],
    }
}

/// Decode products with int8 x (DOT_I8) of every dtype that takes it against the CPU: plain with 1
/// to 3 rows per lane, a bias, a batch of two vectors, the folded norm and residual add.
#[test]
fn int8_products_match_the_cpu_within_the_quantization_of_x() {
    let Some(ctx) = shared() else { return };
    let mut exact = Ops::new(ctx.clone());
    let mut ops = Ops::new(ctx.clone());
    ops.set_int8_products(true);
    ops.set_int8_min_outputs(0);
    let mut rng = Rng::new(21);
    // 45 rows: not a multiple of the 4 · (1 to 3) rows of a workgroup.
    let rows = 45;
    for dtype in INT8_DTYPES {
        for cols in int8_cols(dtype) {
            let s = make(dtype, rows, cols, &mut rng);
            let w_ref = s.reference().unwrap();
            let w = GpuWeight::upload(&ctx, &s.view(vec![rows, cols]), 1).unwrap();
            let xs = [
                x_with_zero_unit(cols, &mut rng),
                x_with_zero_unit(cols, &mut rng),
            ];
            let mut xv = vec![0f32; 3];
            xv.extend(xs.iter().flatten());
            let xb = ctx.storage_with("x", &xv);
            let bias = rng.vec(rows + 5);
            let bb = ctx.storage_with("bias", &bias);
            let yb = ctx.storage("y", (2 * rows * 4) as u64);
            // The two vectors' products into y: (dispatch labels, results).
            let product = |ops: &Ops| {
                let bias = Bias {
                    buf: &bb,
                    offset: 5,
                    expert_stride: 0,
                };
                let xr = Region::new(&xb, 3, cols as u32);
                let yr = Region::new(&yb, 0, rows as u32);
                let d = ops
                    .matvec(
                        &w,
                        &MatSel::whole(&w),
                        xr,
                        yr,
                        2,
                        Some(bias),
                        None,
                        Folds::default(),
                    )
                    .unwrap();
                ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
                let labels: Vec<_> = d.iter().map(|d| d.label.clone()).collect();
                (labels, ctx.read_f32(&yb, 0, 2 * rows).unwrap())
            };
            for rpl in 1..=3 {
                exact.set_rows_per_lane(rpl);
                ops.set_rows_per_lane(rpl);
                let (_, f32_ys) = product(&exact);
                let (labels, ys) = product(&ops);
                assert!(labels.iter().all(|l| l.ends_with(" int8")), "{labels:?}");
                for (b, x) in xs.iter().enumerate() {
                    let (mut want, mag) = cpu_matmul(&w_ref, x, rows, cols, 1);
                    for (r, v) in want.iter_mut().enumerate() {
                        *v += bias[5 + r];
                    }
                    let got = &ys[b * rows..(b + 1) * rows];
                    let f32_got = &f32_ys[b * rows..(b + 1) * rows];
                    let bound = int8_bounds(&w_ref, x, rows, cols);
                    let what =
                        format!("{} × {cols}, {rpl} rows per lane, vector {b}", dtype.name());
                    assert_int8_close(&what, got, f32_got, &want, &mag, &bound);
                }
            }

            // The norm folded in, adding into a residual stream.
            let x = &xs[0];
            let g = rng.vec(cols);
            let eps = 1e-5;
            let rms =
                (x.iter().map(|v| (v * v) as f64).sum::<f64>() / cols as f64 + eps as f64).sqrt();
            let normed: Vec<f32> = (0..cols)
                .map(|c| (x[c] as f64 * g[c] as f64 / rms) as f32)
                .collect();
            let gb = ctx.storage_with("norm weights", &g);
            let resid0 = rng.vec(rows);
            let rb = ctx.storage_with("residual", &resid0);
            // The normed product into y and added into the residual stream resid0:
            // (dispatch labels, results, residual stream).
            let normed_product = |ops: &Ops| {
                ctx.queue
                    .write_buffer(&rb, 0, bytemuck::cast_slice(&resid0));
                let folds = Folds {
                    norm: Some(NormFold {
                        buf: &gb,
                        offset: 0,
                        eps,
                        records: None,
                    }),
                    residual: Some(&rb),
                    normed: None,
                    records: None,
                };
                let xr = Region::new(&xb, 3, cols as u32);
                let yr = Region::new(&yb, 0, rows as u32);
                let d = ops
                    .matvec(&w, &MatSel::whole(&w), xr, yr, 1, None, None, folds)
                    .unwrap();
                ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
                let y = ctx.read_f32(&yb, 0, rows).unwrap();
                let labels: Vec<_> = d.iter().map(|d| d.label.clone()).collect();
                (labels, y, ctx.read_f32(&rb, 0, rows).unwrap())
            };
            for rpl in [1, 3] {
                exact.set_rows_per_lane(rpl);
                ops.set_rows_per_lane(rpl);
                let (_, f32_got, f32_resid) = normed_product(&exact);
                let (labels, got, resid) = normed_product(&ops);
                assert!(labels.iter().all(|l| l.ends_with(" int8")), "{labels:?}");
                let (want, mag) = cpu_matmul(&w_ref, &normed, rows, cols, 1);
                let bound = int8_bounds(&w_ref, &normed, rows, cols);
                let what = format!("{} × {cols} normed, {rpl} rows per lane", dtype.name());
                assert_int8_close(&what, &got, &f32_got, &want, &mag, &bound);
                let with_resid: Vec<f32> = (0..rows).map(|r| resid0[r] + want[r]).collect();
                let mag_resid: Vec<f32> = (0..rows).map(|r| mag[r] + resid0[r].abs()).collect();
                assert_int8_close(
                    &format!("{what}: residual"),
                    &resid,
                    &f32_resid,
                    &with_resid,
                    &mag_resid,
                    &bound,
                );
            }
        }
    }
}

/// The int8 products of two and three weights in one dispatch: q/k/v-style split outputs of
/// Q4_0 and Q8_0 weights (the norm folded in, biases added), and gate/up with SwiGLU or
/// gpt-oss's clamped GLU; and that other dtypes, or a gate and up of different dtypes, keep the
/// f32 products.
#[test]
fn fused_int8_products_match_the_cpu_within_the_quantization_of_x() {
    let Some(ctx) = shared() else { return };
    let exact = Ops::new(ctx.clone());
    let mut ops = Ops::new(ctx.clone());
    ops.set_int8_products(true);
    ops.set_int8_min_outputs(0);
    let mut rng = Rng::new(22);
    for cols in [96usize, 2336, 2880] {
        let stored = [
            make(DType::Q4_0, 45, cols, &mut rng),
            make(DType::Q8_0, 13, cols, &mut rng),
            make(DType::Q4_0, 7, cols, &mut rng),
            make(DType::Q8_0, 45, cols, &mut rng),
            make(DType::Q4_0, 45, cols, &mut rng),
            make(DType::Q8_0, 45, cols, &mut rng),
        ];
        let (refs, ws) = references_and_uploads(&ctx, &stored);
        let x = x_with_zero_unit(cols, &mut rng);
        let eps = 1e-5;
        let (gb, normed) = norm_weights(&ctx, &x, 1, eps, &mut rng);
        let xb = ctx.storage_with("x", &x);
        let norm = Some(NormFold {
            buf: &gb,
            offset: 1,
            eps,
            records: None,
        });
        let xr = Region::new(&xb, 0, 0);
        // Exact products and the bounds of the int8 ones, of weight i against the normed x.
        let products = |i: usize| {
            let s = &stored[i];
            let (want, mag) = cpu_matmul(&refs[i], &normed, s.rows, cols, 1);
            let bound = int8_bounds(&refs[i], &normed, s.rows, cols);
            (want, mag, bound)
        };

        let outs: Vec<wgpu::Buffer> = (0..3)
            .map(|i| ctx.storage("y", (stored[i].rows * 4) as u64))
            .collect();
        let bias = rng.vec(120);
        let bb = ctx.storage_with("biases", &bias);
        let biases = [3u32, 50, 70].map(|offset| Bias {
            buf: &bb,
            offset,
            expert_stride: 0,
        });
        // The split outputs folding `norm`: (dispatch labels, each output's results).
        let split = |ops: &Ops, norm: Option<NormFold>| {
            let d = ops
                .matvec_multi(
                    &[&ws[0], &ws[1], &ws[2]],
                    xr,
                    &[&outs[0], &outs[1], &outs[2]],
                    Multi::Split,
                    norm,
                    &biases,
                )
                .unwrap();
            ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
            let ys: Vec<Vec<f32>> = (0..3)
                .map(|i| ctx.read_f32(&outs[i], 0, stored[i].rows).unwrap())
                .collect();
            let labels: Vec<_> = d.iter().map(|d| d.label.clone()).collect();
            (labels, ys)
        };
        let (_, f32_ys) = split(&exact, norm);
        let check_split = |what: &str, ys: &[Vec<f32>]| {
            for i in 0..3 {
                let (mut want, mag, bound) = products(i);
                for (r, v) in want.iter_mut().enumerate() {
                    *v += bias[biases[i].offset as usize + r];
                }
                let what = format!("{cols} columns: split output {i}{what}");
                assert_int8_close(&what, &ys[i], &f32_ys[i], &want, &mag, &bound);
            }
        };
        let (labels, ys) = split(&ops, norm);
        assert!(labels.iter().all(|l| l.ends_with(" int8")), "{labels:?}");
        check_split("", &ys);

        // The same products reading records that the MoE combine wrote: x as the residual
        // stream, an expert output of zeros added into it, the norm's weights applied and each
        // part's Σx² beside the records (XQ_NORM); then one weight alone, with 1 and 3 rows per
        // lane (the vocabulary product after the last MoE block).
        let records = ops
            .combine_records(cols as u32, 1)
            .expect("combine records");
        let normed_records = norm.map(|n| NormFold {
            records: Some(&records),
            ..n
        });
        let zeros = ctx.storage_with("expert out", &vec![0f32; cols]);
        let one = ctx.storage_with("routing weight", &[1f32]);
        let combined = ctx.storage("combined", (cols * 4) as u64);
        let rb = ctx.storage_with("residual", &x);
        let c = ops
            .moe_combine(
                &zeros,
                &one,
                &combined,
                cols as u32,
                1,
                1,
                Some(&rb),
                normed_records,
            )
            .unwrap();
        ctx.submit(&[&c]).unwrap();
        let (labels, ys) = split(&ops, normed_records);
        assert_eq!(
            labels.len(),
            1,
            "{cols} columns: a quantizing dispatch beside the records"
        );
        check_split(" from the combine's records", &ys);
        for rpl in [1, 3] {
            let mut one_weight = Ops::new(ctx.clone());
            one_weight.set_int8_products(true);
            one_weight.set_rows_per_lane(rpl);
            let yb = ctx.storage("y", (45 * 4) as u64);
            let folds = Folds {
                norm: normed_records,
                ..Folds::default()
            };
            let sel = MatSel::whole(&ws[3]);
            let yr = Region::new(&yb, 0, 45);
            let d = one_weight
                .matvec(&ws[3], &sel, xr, yr, 1, None, None, folds)
                .unwrap();
            assert_eq!(
                d.len(),
                1,
                "{cols} columns: a quantizing dispatch beside the records"
            );
            ctx.submit(&[&d[0]]).unwrap();
            let got = ctx.read_f32(&yb, 0, 45).unwrap();
            let d = exact
                .matvec(
                    &ws[3],
                    &sel,
                    xr,
                    yr,
                    1,
                    None,
                    None,
                    Folds {
                        norm,
                        ..Folds::default()
                    },
                )
                .unwrap();
            ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
            let f32_got = ctx.read_f32(&yb, 0, 45).unwrap();
            let (want, mag, bound) = products(3);
            let what = format!("{cols} columns: {rpl} rows per lane from the combine's records");
            assert_int8_close(&what, &got, &f32_got, &want, &mag, &bound);
        }

        for (gate, up) in [(0, 4), (3, 5)] {
            let (gt, gmag, gbound) = products(gate);
            let (ut, umag, ubound) = products(up);
            for op in [
                Eltwise::SwiGlu,
                Eltwise::GluOss {
                    alpha: 1.702,
                    limit: 7.0,
                },
            ] {
                let yb = ctx.storage("act", (45 * 4) as u64);
                let d = ops
                    .matvec_multi(&[&ws[gate], &ws[up]], xr, &[&yb], Multi::Glu(op), norm, &[])
                    .unwrap();
                assert!(d.iter().all(|d| d.label.ends_with(" int8")));
                ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
                let got = ctx.read_f32(&yb, 0, 45).unwrap();
                let d = exact
                    .matvec_multi(&[&ws[gate], &ws[up]], xr, &[&yb], Multi::Glu(op), norm, &[])
                    .unwrap();
                ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
                let f32_got = ctx.read_f32(&yb, 0, 45).unwrap();
                assert_ne!(
                    got, f32_got,
                    "{cols} columns, {op:?}: int8 results as the f32 ones"
                );
                for r in 0..45 {
                    let want = glu_reference(op, gt[r], ut[r]);
                    // Both activations are f(g)·h(u) with |f'| ≤ 1.23, |f(g)| ≤ |g|, |h'| ≤ 1
                    // and |h(u)| ≤ |u| + 1.
                    let f32_tol = 1e-4 * (1.0 + gmag[r]) * (1.0 + umag[r]);
                    let tol = 1.23 * gbound[r] * (ut[r].abs() + 1.0 + ubound[r])
                        + (gt[r].abs() + gbound[r]) * ubound[r]
                        + f32_tol;
                    assert!(
                        (got[r] - want).abs() <= tol,
                        "{cols} columns, {} gate, {op:?} row {r}: {} vs {want} within {tol}",
                        stored[gate].dtype.name(),
                        got[r]
                    );
                }
            }
        }

        // A gate and up of different dtypes, and other dtypes, keep the f32 products.
        let yb = ctx.storage("act", (45 * 4) as u64);
        let d = ops
            .matvec_multi(
                &[&ws[0], &ws[3]],
                xr,
                &[&yb],
                Multi::Glu(Eltwise::SwiGlu),
                None,
                &[],
            )
            .unwrap();
        assert!(!d.iter().any(|d| d.label.ends_with(" int8")));
        let f16 = make(DType::F16, 5, cols, &mut rng);
        let wf = GpuWeight::upload(&ctx, &f16.view(vec![5, cols]), 1).unwrap();
        let d = ops
            .matvec_multi(
                &[&ws[0], &wf],
                xr,
                &[&outs[0], &outs[1]],
                Multi::Split,
                None,
                &[],
            )
            .unwrap();
        assert!(!d.iter().any(|d| d.label.ends_with(" int8")));
    }
}

/// Int8 expert products (x quantized per vector, then the experts the ids pick): Q4_0 and Q8_0
/// experts of 2880 columns (90 units), Q4_K, Q5_K and Q6_K of 2560, 19 rows (not a whole number of workgroups), whole and
/// split into parts of whole experts; items reading one vector per token (gate/up style, k = 2)
/// and one vector each (down style, from an unaligned offset); and gate, up and SwiGLU in one
/// product.
#[test]
fn int8_expert_products_match_the_cpu_within_the_quantization_of_x() {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(23);
    let (experts, rows) = (5usize, 19usize);
    let ids: Vec<u32> = vec![4, 1, 0, 4];
    for dtype in INT8_DTYPES {
        let cols = int8_cols(dtype)[2];
        let gate = make(dtype, experts * rows, cols, &mut rng);
        let up = make(dtype, experts * rows, cols, &mut rng);
        let refs = [gate.reference().unwrap(), up.reference().unwrap()];
        let mut xv = vec![0f32; 3];
        xv.extend(rng.vec(ids.len() * cols));
        let x = &xv[3..];
        for split in [false, true] {
            let ctx = experts_context(&exact(), &gate, experts, rows, split);
            let exact_ops = Ops::new(ctx.clone());
            let mut ops = Ops::new(ctx.clone());
            ops.set_int8_products(true);
            ops.set_int8_min_outputs(0);
            let upload = |s: &Stored| {
                GpuWeight::upload(&ctx, &s.view(vec![experts, rows, cols]), rows).unwrap()
            };
            let (gw, uw) = (upload(&gate), upload(&up));
            assert_eq!(gw.parts.len(), if split { 3 } else { 1 });
            let all = MatSel::plain(rows, cols);
            let (xb, ib) = (ctx.storage_with("x", &xv), ctx.storage_with("ids", &ids));
            let yb = ctx.storage("y", (ids.len() * rows * 4) as u64);
            let xr = Region::new(&xb, 3, cols as u32);
            let yr = Region::new(&yb, 0, rows as u32);
            // Expert e's row j of weight `which` against the vector item z reads.
            let exact_row = |which: usize, e: usize, j: usize, xz: &[f32]| {
                let r = e * rows + j;
                let w = &refs[which][r * cols..(r + 1) * cols];
                let (want, mag) = cpu_matmul(w, xz, 1, cols, 1);
                (want[0], mag[0], int8_bounds(w, xz, 1, cols)[0])
            };
            for x_div in [2usize, 1] {
                let sel = ExpertSel {
                    ids: &ib,
                    x_div: x_div as u32,
                };
                let run = |ops: &Ops| {
                    let n = ids.len() as u32;
                    let d = ops
                        .matvec(&gw, &all, xr, yr, n, None, Some(sel), Folds::default())
                        .unwrap();
                    ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
                    let labels: Vec<_> = d.iter().map(|d| d.label.clone()).collect();
                    (labels, ctx.read_f32(&yb, 0, ids.len() * rows).unwrap())
                };
                let (_, f32_got) = run(&exact_ops);
                let (labels, got) = run(&ops);
                assert!(labels.iter().all(|l| l.ends_with(" int8")), "{labels:?}");
                for (z, &e) in ids.iter().enumerate() {
                    let xz = &x[(z / x_div) * cols..(z / x_div + 1) * cols];
                    let rowwise: Vec<_> =
                        (0..rows).map(|j| exact_row(0, e as usize, j, xz)).collect();
                    let at = z * rows..(z + 1) * rows;
                    assert_int8_close(
                        &format!("{} split={split} x_div {x_div} item {z}", dtype.name()),
                        &got[at.clone()],
                        &f32_got[at],
                        &rowwise.iter().map(|r| r.0).collect::<Vec<_>>(),
                        &rowwise.iter().map(|r| r.1).collect::<Vec<_>>(),
                        &rowwise.iter().map(|r| r.2).collect::<Vec<_>>(),
                    );
                }
            }

            let d = ops
                .matvec_glu_experts(
                    [&gw, &uw],
                    [&all, &all],
                    xr,
                    yr,
                    ids.len() as u32,
                    Eltwise::SwiGlu,
                    None,
                    ExpertSel { ids: &ib, x_div: 2 },
                    None,
                )
                .unwrap();
            assert!(d.iter().all(|d| d.label.ends_with(" int8")));
            ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
            let got = ctx.read_f32(&yb, 0, ids.len() * rows).unwrap();
            for (z, &e) in ids.iter().enumerate() {
                let xz = &x[(z / 2) * cols..(z / 2 + 1) * cols];
                for j in 0..rows {
                    let (g, gmag, gbound) = exact_row(0, e as usize, j, xz);
                    let (u, umag, ubound) = exact_row(1, e as usize, j, xz);
                    let want = g / (1.0 + (-g).exp()) * u;
                    // As in the fused int8 products' test.
                    let tol = 1.23 * gbound * (u.abs() + 1.0 + ubound)
                        + (g.abs() + gbound) * ubound
                        + 1e-4 * (1.0 + gmag) * (1.0 + umag);
                    let have = got[z * rows + j];
                    assert!(
                        (have - want).abs() <= tol,
                        "{} split={split} gate/up item {z} row {j}: {have} vs {want} within {tol}",
                        dtype.name()
                    );
                }
            }
        }
    }
}

/// Gate/up products too small for a quantizing dispatch of their own (below INT8_MIN_OUTPUTS)
/// that fold a norm quantize x in their own workgroups (XQ_LOCAL): one dispatch, within the
/// quantization of x, for inputs of one to several workgroups' parts and up to the 5,632 of
/// tinyllama's down product; with the local quantization off, a quantizing dispatch before it.
#[test]
fn gate_up_products_quantize_x_in_their_own_workgroups() {
    let Some(ctx) = shared() else { return };
    let exact = Ops::new(ctx.clone());
    let mut ops = Ops::new(ctx.clone());
    ops.set_int8_products(true);
    ops.set_local_xq(true);
    let mut rng = Rng::new(24);
    for (dtype, cols) in [
        (DType::Q4_0, 96usize),
        (DType::Q8_0, 2336),
        (DType::Q4_0, 2880),
        (DType::Q6_K, 2560),
        (DType::Q4_0, 5632),
    ] {
        let (gate, up) = (
            make(dtype, 45, cols, &mut rng),
            make(dtype, 45, cols, &mut rng),
        );
        let (refs, ws) = references_and_uploads(&ctx, &[gate, up]);
        let x = x_with_zero_unit(cols, &mut rng);
        let eps = 1e-5;
        let (gb, normed) = norm_weights(&ctx, &x, 2, eps, &mut rng);
        let xb = ctx.storage_with("x", &x);
        let yb = ctx.storage("act", (45 * 4) as u64);
        let norm = NormFold {
            buf: &gb,
            offset: 2,
            eps,
            records: None,
        };
        let what = format!("{} × {cols}", dtype.name());
        let run = |ops: &Ops| {
            let xr = Region::new(&xb, 0, 0);
            let glu = Multi::Glu(Eltwise::SwiGlu);
            let d = ops
                .matvec_multi(&[&ws[0], &ws[1]], xr, &[&yb], glu, Some(norm), &[])
                .unwrap();
            ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
            let labels: Vec<String> = d.iter().map(|d| d.label.to_string()).collect();
            (labels, ctx.read_f32(&yb, 0, 45).unwrap())
        };
        let (_, f32_got) = run(&exact);
        let (labels, got) = run(&ops);
        assert_eq!(labels.len(), 1, "{what}: {labels:?}");
        assert!(labels[0].ends_with(" int8"), "{what}: {labels:?}");
        assert_ne!(got, f32_got, "{what}: int8 results as the f32 ones");
        let (gt, gmag) = cpu_matmul(&refs[0], &normed, 45, cols, 1);
        let gbound = int8_bounds(&refs[0], &normed, 45, cols);
        let (ut, umag) = cpu_matmul(&refs[1], &normed, 45, cols, 1);
        let ubound = int8_bounds(&refs[1], &normed, 45, cols);
        for r in 0..45 {
            let want = glu_reference(Eltwise::SwiGlu, gt[r], ut[r]);
            // As in the fused int8 products' test.
            let tol = 1.23 * gbound[r] * (ut[r].abs() + 1.0 + ubound[r])
                + (gt[r].abs() + gbound[r]) * ubound[r]
                + 1e-4 * (1.0 + gmag[r]) * (1.0 + umag[r]);
            assert!(
                (got[r] - want).abs() <= tol,
                "{what}: row {r}: {} vs {want} within {tol}",
                got[r]
            );
        }

        // Off, x is quantized by a dispatch of its own first.
        let mut dispatched = Ops::new(ctx.clone());
        dispatched.set_int8_products(true);
        dispatched.set_local_xq(false);
        let (labels, _) = run(&dispatched);
        assert_eq!(labels.len(), 2, "{what}: {labels:?}");
        assert!(labels[0].starts_with("quantize_x"), "{what}: {labels:?}");
    }
}

/// A gate/up product that writes its results as int8 records (XQ_OUT) and the down product
/// reading them (`Folds::records`) with the residual add: each record against the exact
/// activation (parts of 8 values, vec4s j and j + 4 of a unit, whose rows each workgroup
/// holds), and the down product against the CPU, within the activation's error and its
/// quantization. 5,632 inputs give the down product's rows twice the lanes (LONG_ROW).
#[test]
fn gate_up_products_write_int8_records_for_the_down_product() {
    let Some(ctx) = shared() else { return };
    let mut ops = Ops::new(ctx.clone());
    ops.set_int8_products(true);
    ops.set_local_xq(true);
    let mut rng = Rng::new(31);
    for (dtype, hidden, ffn) in [
        (DType::Q4_0, 96usize, 160usize),
        (DType::Q8_0, 64, 352),
        (DType::Q6_K, 256, 512),
        (DType::Q4_0, 64, 5632),
    ] {
        let what = format!("{} {hidden} → {ffn} → {hidden}", dtype.name());
        let gate = make(dtype, ffn, hidden, &mut rng);
        let up = make(dtype, ffn, hidden, &mut rng);
        let down = make(dtype, hidden, ffn, &mut rng);
        let (refs, ws) = references_and_uploads(&ctx, &[gate, up, down]);
        let x = x_with_zero_unit(hidden, &mut rng);
        let eps = 1e-5;
        let (gb, normed) = norm_weights(&ctx, &x, 2, eps, &mut rng);
        let xb = ctx.storage_with("x", &x);
        let norm = NormFold {
            buf: &gb,
            offset: 2,
            eps,
            records: None,
        };
        let gate_up = [&ws[0], &ws[1]];
        assert!(ops.glu_writes_records(&gate_up, true), "{what}");
        let records = ops.glu_records(ffn as u32);
        let xr = Region::new(&xb, 0, 0);
        let mut d = ops
            .gate_up_records(&gate_up, xr, Eltwise::SwiGlu, Some(norm), &records)
            .unwrap();
        let resid0 = rng.vec(hidden);
        let rb = ctx.storage_with("residual", &resid0);
        let yb = ctx.storage("y", (hidden * 4) as u64);
        let folds = Folds {
            norm: None,
            residual: Some(&rb),
            normed: None,
            records: Some(&records),
        };
        let w = &ws[2];
        let (hr, yr) = (
            Region::new(&xb, 0, ffn as u32),
            Region::new(&yb, 0, hidden as u32),
        );
        d.extend(
            ops.matvec(w, &MatSel::whole(w), hr, yr, 1, None, None, folds)
                .unwrap(),
        );
        let labels: Vec<String> = d.iter().map(|d| d.label.to_string()).collect();
        assert_eq!(
            labels.len(),
            2,
            "{what}: no quantizing dispatch: {labels:?}"
        );
        assert!(
            labels.iter().all(|l| l.ends_with(" int8")),
            "{what}: {labels:?}"
        );
        ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();

        // The activation on the CPU, and what its int8 products may differ by (as in
        // gate_up_products_quantize_x_in_their_own_workgroups).
        let (gt, gmag) = cpu_matmul(&refs[0], &normed, ffn, hidden, 1);
        let gbound = int8_bounds(&refs[0], &normed, ffn, hidden);
        let (ut, umag) = cpu_matmul(&refs[1], &normed, ffn, hidden, 1);
        let ubound = int8_bounds(&refs[1], &normed, ffn, hidden);
        let h: Vec<f32> = (0..ffn)
            .map(|r| glu_reference(Eltwise::SwiGlu, gt[r], ut[r]))
            .collect();
        let h_tol: Vec<f32> = (0..ffn)
            .map(|r| {
                1.23 * gbound[r] * (ut[r].abs() + 1.0 + ubound[r])
                    + (gt[r].abs() + gbound[r]) * ubound[r]
                    + 1e-4 * (1.0 + gmag[r]) * (1.0 + umag[r])
            })
            .collect();

        // Each record: v = scale · (coarse + fine / 254) within its step's s / 508 of the
        // value, and its sum the sum of its terms.
        let parts = ffn / 8;
        let words = ctx
            .read_u32(records.buffer(), 0, 4 * (parts + parts / 2))
            .unwrap();
        for p in 0..parts {
            let (scale, sum, values) = activations::record(&words, parts, p);
            let mut terms = 0.0;
            for (k, &(c, t)) in values.iter().enumerate() {
                terms += t;
                let got = scale * t;
                let tol = h_tol[c] + 1.05 * scale / 508.0 + 1e-6;
                assert!(
                    (got - h[c]).abs() <= tol,
                    "{what}: part {p} value {k} (row {c}) is {got}, expected {} within {tol}",
                    h[c]
                );
            }
            assert!(
                (terms - sum).abs() <= 1e-3,
                "{what}: part {p}: sum {sum} vs {terms}"
            );
        }

        // The down product over the records, added into the residual stream.
        let got = ctx.read_f32(&rb, 0, hidden).unwrap();
        let (y, mag) = cpu_matmul(&refs[2], &h, hidden, ffn, 1);
        let h_bound: Vec<f32> = (0..ffn).map(|c| h[c].abs() + h_tol[c]).collect();
        let qbound = int8_bounds(&refs[2], &h_bound, hidden, ffn);
        for r in 0..hidden {
            let want = resid0[r] + y[r];
            let moved: f32 = (0..ffn)
                .map(|c| refs[2][r * ffn + c].abs() * h_tol[c])
                .sum();
            let tol = moved + qbound[r] + 2e-5 * (1.0 + mag[r] + resid0[r].abs());
            assert!(
                (got[r] - want).abs() <= tol,
                "{what}: output {r} is {}, expected {want} within {tol}",
                got[r]
            );
        }
    }
}
