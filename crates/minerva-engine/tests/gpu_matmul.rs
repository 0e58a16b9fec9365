//! GPU prefill products against the CPU: the f32 tiles with a bias, and the matrix-core path
//! (the product itself, and its f16 copies of the weights and of x).

mod gpu_common;

use gpu_common::weights::*;
use gpu_common::*;
use minerva_engine::gpu::{Bias, GpuContext, GpuWeight, MatSel, MatmulTile, Ops, Region};
use minerva_formats::DType;
use std::sync::Arc;

/// Prefill matmul with a bias, for float rows of odd length, blocks, super-blocks and MLX groups,
/// with every tile.
#[test]
fn matmul_adds_the_bias_with_every_tile() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(8);
    let cases = [
        (DType::F16, 45),
        (DType::Q4_0, 96),
        (DType::Q4_K, 512),
        (DType::MlxAffine { bits: 4, group: 64 }, 128),
    ];
    for (dtype, cols) in cases {
        let s = make(dtype, 37, cols, &mut rng);
        let w_ref = s.reference().unwrap();
        let w = GpuWeight::upload(&ctx, &s.view(vec![37, cols]), 1).unwrap();
        let bias = rng.vec(37);
        for tile in MatmulTile::ALL {
            for tokens in [2, 17, 70] {
                let kernel = Kernel::Tile(tile);
                check_matmul(&ops, &w, &w_ref, tokens, kernel, Some(&bias), &mut rng);
            }
        }
    }
}

/// The prefill product on matrix cores for every dtype: 96 rows (three 32-row blocks) and 128
/// (two 64-row blocks), 32 tokens (one block), 45 and 100 (a last block of 13 or 4 tokens, run
/// split along the inputs: `coop_split.rs`), rows of one unit or part of one, of two and of
/// 2048 values (split eight ways where the product is few blocks), with and without a bias. Every
/// case runs; the failure lists each case that is off and how. Then the kernel `Ops::matmul`
/// chooses, into y at an unaligned offset (the f32 tiles on every adapter). Where the adapter has
/// no matrix cores (lavapipe), the chosen kernel runs in place of the matrix-core one, after a
/// loud SKIPPED line.
#[test]
fn matrix_core_matmul_matches_the_cpu() {
    let Some(ctx) = shared_matrix_cores() else {
        return;
    };
    let kernel = matrix_cores_or_chosen(&ctx);
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(9);
    let (mut cases, mut off) = (0, Vec::new());
    // 96 outputs: 32 per workgroup; 128: 64 per workgroup (`coop_defines`), and 64 tokens per
    // workgroup where a product of 64 or 128 tokens runs whole (`coop_tokens`: rows short
    // enough not to split).
    for (rows, (dtype, base_cols)) in all_dtypes()
        .into_iter()
        .map(|d| (96, d))
        .chain(all_dtypes().into_iter().map(|d| (128, d)))
    {
        for cols in [base_cols, 2 * base_cols, 2048] {
            let s = make(dtype, rows, cols, &mut rng);
            let Some(w_ref) = s.reference() else { continue };
            let w = GpuWeight::upload(&ctx, &s.view(vec![rows, cols]), 1).unwrap();
            let bias = rng.vec(rows);
            let runs = [
                (32, true, kernel, Y_ALIGNED),
                (45, false, kernel, Y_ALIGNED),
                (100, true, kernel, Y_ALIGNED),
                (64, false, kernel, Y_ALIGNED),
                (128, true, kernel, Y_ALIGNED),
                (45, true, Kernel::Chosen, Y_ODD),
            ];
            for (tokens, with_bias, k, y_at) in runs {
                let b = with_bias.then_some(&bias[..]);
                let run = run_matmul(&ops, &w, &w_ref, tokens, k, y_at, b, &mut rng);
                cases += 1;
                off.extend(run.mismatch());
            }
        }
    }
    assert!(
        off.is_empty(),
        "{} of {cases} products off:\n{}",
        off.len(),
        off.join("\n")
    );
}

/// Products with enough blocks of 64 outputs and 64 tokens for the staged kernel
/// (`matmul_staged.wgsl`, where the adapter lets it run: its matrices pass through workgroup
/// memory) against the CPU: 1,024 rows over 512 tokens, inputs of one and of five 32-value
/// steps, with and without a bias. The dispatches show that the staged kernel ran. The chosen
/// kernel where the adapter has no matrix cores, after a loud SKIPPED line.
#[test]
fn staged_matrix_core_products_match_the_cpu() {
    let Some(ctx) = shared_matrix_cores() else {
        return;
    };
    let kernel = matrix_cores_or_chosen(&ctx);
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(12);
    let (rows, tokens) = (1024, 512);
    let mut off = Vec::new();
    for (dtype, cols) in [(DType::Q4_0, 32), (DType::F16, 160), (DType::Q8_0, 160)] {
        let s = make(dtype, rows, cols, &mut rng);
        let w_ref = s.reference().expect("a reference");
        let w = GpuWeight::upload(&ctx, &s.view(vec![rows, cols]), 1).unwrap();
        if ctx.caps.staged_matrices {
            let x = ctx.storage("x", (tokens * cols * 4) as u64);
            let y = ctx.storage("y", (tokens * rows * 4) as u64);
            let d = ops
                .matmul_coop(
                    &w,
                    &MatSel::whole(&w),
                    Region::new(&x, 0, cols as u32),
                    Region::new(&y, 0, rows as u32),
                    tokens as u32,
                    None,
                )
                .unwrap();
            let labels: Vec<&str> = d.iter().map(|d| &*d.label).collect();
            assert!(
                labels.iter().any(|l| l.starts_with("matmul_staged.wgsl")),
                "{dtype:?}: {labels:?}"
            );
        } else {
            eprintln!("SKIPPED: staged matrices off here ({})", ctx.describe());
        }
        let bias = rng.vec(rows);
        for with_bias in [false, true] {
            let b = with_bias.then_some(&bias[..]);
            let run = run_matmul(&ops, &w, &w_ref, tokens, kernel, Y_ALIGNED, b, &mut rng);
            off.extend(run.mismatch());
        }
    }
    assert!(off.is_empty(), "{}", off.join("\n"));
}

/// A product whose f16 copy is larger than the matrix-core product decodes at once (made a few
/// rows' here; a vocabulary projection over a prompt in use): its outputs in chunks of 64 rows
/// and a last one of 32, with a bias, 45 tokens (a last block that is not whole), each chunk's
/// outputs where they belong. The chosen kernel where the adapter has no matrix cores, after a
/// loud SKIPPED line.
#[test]
fn matrix_core_matmul_in_chunks_of_outputs() {
    let Some(ctx) = shared_matrix_cores() else {
        return;
    };
    let kernel = matrix_cores_or_chosen(&ctx);
    let mut ops = Ops::new(ctx.clone());
    let (rows, cols) = (352, 192);
    // 192 halves per decoded row: 64 rows per chunk.
    ops.set_coop_weight_bytes(64 * 192 * 2 + 100);
    let mut rng = Rng::new(21);
    for dtype in [DType::Q4_0, DType::F16] {
        let s = make(dtype, rows, cols, &mut rng);
        let w_ref = s.reference().expect("a reference");
        let w = GpuWeight::upload(&ctx, &s.view(vec![rows, cols]), 1).unwrap();
        let bias = rng.vec(rows);
        let run = run_matmul(
            &ops,
            &w,
            &w_ref,
            45,
            kernel,
            Y_ALIGNED,
            Some(&bias),
            &mut rng,
        );
        if let Some(off) = run.mismatch() {
            panic!("{dtype:?}: {off}");
        }
    }
}

/// The matrix-core kernel, or where the adapter has none (lavapipe) the kernel `Ops::matmul`
/// chooses, after a loud SKIPPED line.
fn matrix_cores_or_chosen(ctx: &GpuContext) -> Kernel {
    if ctx.caps.matrix_cores {
        return Kernel::Coop;
    }
    eprintln!(
        "SKIPPED: {} has no matrix cores (or MINERVA_GPU_MATRIX_CORES=0); checking the f32 \
         kernels instead",
        ctx.describe()
    );
    Kernel::Chosen
}

/// Halves read back from a buffer of f16 pairs, as f32.
fn read_halves(ctx: &GpuContext, buf: &wgpu::Buffer, n: usize) -> Vec<f32> {
    let bytes = ctx.read_bytes(buf, 0, (n * 2) as u64).unwrap();
    bytes
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect()
}

/// Asserts that `got` is `want` rounded to f16: within 2^-10 of each value (f16's spacing, for
/// any rounding mode), or 2^-24 absolute (its subnormals).
fn assert_halves(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    // All the wrong values, not just the first: which positions are off tells a decoder's
    // fault from a rounding one.
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| (*g - *w).abs() > w.abs() / 1024.0 + 6e-8)
        .map(|(i, (g, w))| format!("{i}: {g} not {w}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} of {} values wrong; first: {}",
        bad.len(),
        got.len(),
        bad[..bad.len().min(24)].join(", ")
    );
}

/// The matrix-core product's f16 copies of the weight (`Ops::coop_weights`) against the CPU, on
/// any adapter (they need no matrix cores): every dtype (rows of 37 or 45 values padded to whole
/// units with zeros), a strided view, a weight in 5 parts, and the bias block.
#[test]
fn matrix_core_weights_decode_to_f16() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(10);
    let rows = 45;
    for (dtype, cols) in all_dtypes() {
        let s = make(dtype, rows, cols, &mut rng);
        let Some(w_ref) = s.reference() else { continue };
        let w = GpuWeight::upload(&ctx, &s.view(vec![rows, cols]), 1).unwrap();
        // Outputs 0, 2, .. 42 (stored rows 1, 3, .. 43), and all rows.
        let strided = MatSel {
            offset: 1,
            stride: 2,
            out_dim: 22,
            ..MatSel::whole(&w)
        };
        for sel in [MatSel::whole(&w), strided] {
            let k = cols.div_ceil(32) * 32;
            let out = ctx.storage("w16", (sel.out_dim * k * 2) as u64);
            let d = ops.coop_weights(&w, &sel, &out, k as u32, None).unwrap();
            ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
            let got = read_halves(&ctx, &out, sel.out_dim * k);
            let want: Vec<f32> = (0..sel.out_dim)
                .flat_map(|j| {
                    let r = sel.offset + j * sel.stride;
                    let mut row = w_ref[r * cols..(r + 1) * cols].to_vec();
                    row.resize(k, 0.0);
                    row
                })
                .collect();
            let what = format!("{} f16 rows, {sel:?}", dtype.name());
            assert_halves(&what, &got, &want);
        }
    }

    // Five parts, and the bias block: 16 rows of the 45 biases (from offset 2 of their buffer).
    let (dtype, cols) = (DType::Q4_0, 96);
    let s = make(dtype, rows, cols, &mut rng);
    let w_ref = s.reference().unwrap();
    let widest = s.bufs.iter().map(|b| b.len() / rows).max().unwrap();
    let mut small = GpuContext::new(&Default::default()).unwrap();
    small.caps.max_binding = (widest * 10 + 4) as u64;
    let small = Arc::new(small);
    let ops = Ops::new(small.clone());
    let w = GpuWeight::upload(&small, &s.view(vec![rows, cols]), 1).unwrap();
    assert_eq!(w.parts.len(), 5);
    let bias = rng.vec(rows);
    let mut padded = vec![0f32; 2];
    padded.extend_from_slice(&bias);
    let bbuf = small.storage_with("bias", &padded);
    let block = small.storage("bias block", (16 * rows * 4) as u64);
    let out = small.storage("w16", (rows * cols * 2) as u64);
    let b = Bias {
        buf: &bbuf,
        offset: 2,
        expert_stride: 0,
    };
    let sel = MatSel::whole(&w);
    let d = ops
        .coop_weights(&w, &sel, &out, cols as u32, Some((b, &block)))
        .unwrap();
    assert_eq!(d.len(), 5);
    small.submit(&d.iter().collect::<Vec<_>>()).unwrap();
    let got = read_halves(&small, &out, rows * cols);
    assert_halves("Q4_0 f16 rows in 5 parts", &got, &w_ref);
    let got = small.read_f32(&block, 0, 16 * rows).unwrap();
    let want: Vec<f32> = (0..16).flat_map(|_| bias.iter().copied()).collect();
    assert_close("bias block", &got, &want, 0.0);
}

/// The matrix-core product's f16 copy of x (`Ops::coop_inputs`) against the CPU: 7 tokens of 37
/// values from offset 5, 3 values apart, into rows of 64 halves (zeros past 37); values past
/// f16's range saturate.
#[test]
fn matrix_core_inputs_convert_to_f16() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(11);
    let (tokens, cols, k) = (7, 37, 64);
    let mut x: Vec<f32> = rng.vec(tokens * cols).iter().map(|v| v * 3.0).collect();
    x[3] = 1e6;
    x[40] = -7e4;
    x[41] = 1e-6;
    let xs = cols + 3;
    let mut xb = vec![0f32; 5 + tokens * xs];
    for t in 0..tokens {
        xb[5 + t * xs..5 + t * xs + cols].copy_from_slice(&x[t * cols..(t + 1) * cols]);
    }
    let xbuf = ctx.storage_with("x", &xb);
    let out = ctx.storage("x16", (tokens * k * 2) as u64);
    let region = Region::new(&xbuf, 5, xs as u32);
    let d = ops
        .coop_inputs(region, &out, cols as u32, k as u32, tokens as u32)
        .unwrap();
    ctx.submit(&[&d]).unwrap();
    let got = read_halves(&ctx, &out, tokens * k);
    let want: Vec<f32> = (0..tokens)
        .flat_map(|t| {
            let mut row: Vec<f32> = x[t * cols..(t + 1) * cols]
                .iter()
                .map(|v| v.clamp(-65504.0, 65504.0))
                .collect();
            row.resize(k, 0.0);
            row
        })
        .collect();
    assert_halves("x as f16", &got, &want);
}
