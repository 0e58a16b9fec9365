//! GPU weight kernels (decode matvec, prefill matmul, embedding lookup, expert matvec, grouped
//! expert matmul) for every stored dtype against the CPU: weights dequantized by
//! `minerva_formats::dequantize_rows` (or a small local reference where the formats crate has
//! no decoder yet), products in f64.

mod gpu_common;

use gpu_common::*;
use minerva_engine::gpu::ops::MATMUL_TOKENS;
use minerva_engine::gpu::{
    moe_max_tiles, Bias, Eltwise, ExpertSel, ExpertTiles, Folds, GpuContext, GpuWeight, MatSel,
    MatmulTile, Multi, NormFold, Ops, Region,
};
use minerva_formats::{dequantize_rows, DType, TensorData, TensorView};
use std::sync::Arc;

/// Stored bytes of a random tensor of `dtype`, with scale fields kept finite and moderate.
struct Stored {
    dtype: DType,
    rows: usize,
    cols: usize,
    bufs: Vec<Vec<u8>>,
}

fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

fn make(dtype: DType, rows: usize, cols: usize, rng: &mut Rng) -> Stored {
    let mut bufs = Vec::new();
    match dtype {
        DType::F32 => bufs.push(
            rng.vec(rows * cols)
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
        DType::F16 => bufs.push(
            rng.vec(rows * cols)
                .iter()
                .flat_map(|v| f16_bytes(*v))
                .collect(),
        ),
        DType::BF16 => bufs.push(
            rng.vec(rows * cols)
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect(),
        ),
        DType::Q8_0 => bufs.push(
            rng.vec(rows * cols)
                .chunks(cols)
                .flat_map(quantize_q8_0)
                .collect(),
        ),
        DType::Q4_0 => bufs.push(
            rng.vec(rows * cols)
                .chunks(cols)
                .flat_map(quantize_q4_0)
                .collect(),
        ),
        DType::MlxAffine { bits, group } => {
            let groups = rows * cols / group as usize;
            bufs.push(rng.bytes(rows * cols * bits as usize / 8));
            bufs.push(
                (0..groups)
                    .flat_map(|_| f16_bytes(0.05 + 0.1 * rng.f32().abs()))
                    .collect(),
            );
            bufs.push(
                (0..groups)
                    .flat_map(|_| f16_bytes(0.3 * rng.f32()))
                    .collect(),
            );
        }
        DType::HfMxfp4 | DType::MlxMxfp4 => {
            bufs.push(rng.bytes(rows * cols / 2));
            bufs.push(
                (0..rows * cols / 32)
                    .map(|_| 120 + rng.below(12) as u8)
                    .collect(),
            );
        }
        _ => {
            // GGUF blocks: random bytes, then sane f16 scales (and E8M0 exponents) in place.
            let bb = dtype.block_bytes();
            let halves: &[usize] = match dtype {
                DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
                DType::Q5_0 => &[0],
                DType::Q2_K => &[80, 82],
                DType::Q3_K => &[108],
                DType::Q6_K => &[208],
                _ => &[],
            };
            let mut b = rng.bytes(rows * dtype.row_bytes(cols).unwrap());
            for blk in b.chunks_exact_mut(bb) {
                for &h in halves {
                    blk[h..h + 2].copy_from_slice(&f16_bytes(0.01 + 0.02 * rng.f32().abs()));
                }
                if dtype == DType::MXFP4 {
                    blk[0] = 120 + rng.below(12) as u8;
                }
            }
            bufs.push(b);
        }
    }
    Stored {
        dtype,
        rows,
        cols,
        bufs,
    }
}

impl Stored {
    fn view(&self, shape: Vec<usize>) -> TensorView<'_> {
        let data = match self.dtype {
            DType::MlxAffine { .. } => TensorData::MlxAffine {
                weight: &self.bufs[0],
                scales: &self.bufs[1],
                biases: &self.bufs[2],
                scale_dtype: DType::F16,
            },
            DType::MlxMxfp4 => TensorData::MlxMxfp4 {
                weight: &self.bufs[0],
                scales: &self.bufs[1],
            },
            DType::HfMxfp4 => TensorData::HfMxfp4 {
                blocks: &self.bufs[0],
                scales: &self.bufs[1],
            },
            _ => TensorData::Plain(&self.bufs[0]),
        };
        TensorView {
            name: "w",
            shape,
            dtype: self.dtype,
            data,
        }
    }

    /// The weights as f32 on the CPU, or None (said loudly) where no reference decoder exists.
    fn reference(&self) -> Option<Vec<f32>> {
        let mut out = vec![0f32; self.rows * self.cols];
        match self.dtype {
            DType::MlxAffine { bits, group } => {
                dequant_mlx_affine(
                    bits as u32,
                    group as usize,
                    &self.bufs[0],
                    &self.bufs[1],
                    &self.bufs[2],
                    self.cols,
                    &mut out,
                );
                return Some(out);
            }
            // MLX mxfp4 words hold the codes in the same order as the HF blocks.
            DType::MlxMxfp4 => {
                let hf = TensorView {
                    name: "w",
                    shape: vec![self.rows, self.cols],
                    dtype: DType::HfMxfp4,
                    data: TensorData::HfMxfp4 {
                        blocks: &self.bufs[0],
                        scales: &self.bufs[1],
                    },
                };
                dequantize_rows(&hf, 0, self.rows, &mut out).unwrap();
                return Some(out);
            }
            _ => {}
        }
        let Err(e) = dequantize_rows(
            &self.view(vec![self.rows, self.cols]),
            0,
            self.rows,
            &mut out,
        ) else {
            return Some(out);
        };
        if dequant_local(self.dtype, &self.bufs[0], &mut out) {
            return Some(out);
        }
        eprintln!(
            "NOT CHECKED: {} has no CPU reference decoder yet ({e})",
            self.dtype.name()
        );
        None
    }
}

/// y[t][r] = Σ_c w[r][c] x[t][c] in f64, and Σ|w||x| for the tolerance.
fn cpu_matmul(
    w: &[f32],
    x: &[f32],
    rows: usize,
    cols: usize,
    tokens: usize,
) -> (Vec<f32>, Vec<f32>) {
    let mut y = Vec::new();
    let mut mag = Vec::new();
    for t in 0..tokens {
        for r in 0..rows {
            let (mut s, mut m) = (0f64, 0f64);
            for c in 0..cols {
                let p = w[r * cols + c] as f64 * x[t * cols + c] as f64;
                s += p;
                m += p.abs();
            }
            y.push(s as f32);
            mag.push(m as f32);
        }
    }
    (y, mag)
}

fn all_dtypes() -> Vec<(DType, usize)> {
    let mut v = vec![
        (DType::F32, 37),
        (DType::F16, 37),
        (DType::BF16, 45),
        (DType::Q8_0, 96),
        (DType::Q4_0, 96),
        (DType::Q4_1, 96),
        (DType::Q5_0, 96),
        (DType::Q5_1, 96),
        (DType::MXFP4, 96),
        (DType::Q2_K, 512),
        (DType::Q3_K, 512),
        (DType::Q4_K, 512),
        (DType::Q5_K, 512),
        (DType::Q6_K, 512),
        (DType::HfMxfp4, 96),
        (DType::MlxMxfp4, 96),
    ];
    for bits in [2u8, 3, 4, 5, 6, 8] {
        for group in [32u16, 64] {
            v.push((DType::MlxAffine { bits, group }, 128));
        }
    }
    v
}

/// Ops whose decode products of E2M1 weights multiply in f32, as exact contexts run them: the
/// checks that hold products to 2e-5 (packed f16 products have their own tests).
fn f32_ops(ctx: Arc<GpuContext>) -> Ops {
    let mut ops = Ops::new(ctx);
    ops.set_packed_f16(false);
    ops
}

/// Runs matvec (3 vectors), matmul (every tile, 1 to 100 tokens) and embedding (5 ids) for one
/// weight and checks them against the CPU.
fn check_stored(ops: &Ops, s: &Stored, want_parts: Option<usize>) {
    let Some(w_ref) = s.reference() else { return };
    check_weight(ops, &s.view(vec![s.rows, s.cols]), &w_ref, want_parts);
}

fn check_weight(ops: &Ops, view: &TensorView, w_ref: &[f32], want_parts: Option<usize>) {
    let ctx = &ops.ctx;
    let name = view.dtype.name();
    let w = GpuWeight::upload(ctx, view, 1).unwrap();
    if let Some(n) = want_parts {
        assert_eq!(w.parts.len(), n, "{name}: parts");
    }
    let mut rng = Rng::new(7);
    let (rows, cols) = (view.rows(), view.row_len());

    // Decode matvec over a batch of 3 vectors, with offsets and strides.
    let batch = 3;
    let x = rng.vec(batch * cols);
    let mut xb = vec![0f32; 5];
    xb.extend(x.iter().flat_map(|v| [*v]));
    let xbuf = ctx.storage_with("x", &xb);
    let ybuf = ctx.storage("y", ((batch * (rows + 2) + 1) * 4) as u64);
    let d = ops
        .matvec(
            &w,
            &MatSel::whole(&w),
            Region::new(&xbuf, 5, cols as u32),
            Region::new(&ybuf, 1, rows as u32 + 2),
            batch as u32,
            None,
            None,
            Folds::default(),
        )
        .unwrap();
    ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
    let (want, mag) = cpu_matmul(w_ref, &x, rows, cols, batch);
    for b in 0..batch {
        let got = ctx.read_f32(&ybuf, 1 + b * (rows + 2), rows).unwrap();
        assert_dots_close(
            &format!("{name} matvec vector {b}"),
            &got,
            &want[b * rows..(b + 1) * rows],
            &mag[b * rows..(b + 1) * rows],
            2e-5,
        );
    }

    // Prefill matmul with every tile, at token counts below, at and past the tiles' sizes.
    for tile in MatmulTile::ALL {
        for tokens in [1, 3, 33, 65, 100] {
            check_matmul(ops, &w, w_ref, tokens, Kernel::Tile(tile), None, &mut rng);
        }
    }

    // Embedding lookup of rows in every part.
    let ids: Vec<u32> = vec![0, rows as u32 - 1, 3, rows as u32 / 2, 3];
    let ibuf = ctx.storage_with("ids", &ids);
    let ebuf = ctx.storage("emb", (ids.len() * cols * 4) as u64);
    let d = ops.embed(&w, &ibuf, &ebuf, ids.len() as u32, 0.5).unwrap();
    ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
    let got = ctx.read_f32(&ebuf, 0, ids.len() * cols).unwrap();
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&i| {
            w_ref[i as usize * cols..(i as usize + 1) * cols]
                .iter()
                .map(|v| v * 0.5)
        })
        .collect();
    assert_close(&format!("{name} embedding"), &got, &want, 1e-6);
}

/// Which prefill kernel `run_matmul` runs.
#[derive(Debug, Clone, Copy)]
enum Kernel {
    /// The f32 tiles.
    Tile(MatmulTile),
    /// Matrix cores (`Ops::matmul_coop`).
    Coop,
    /// The kernel `Ops::matmul` chooses.
    Chosen,
}

/// Tolerance of products of f16-rounded weights and inputs (each term off by ≤ 2^-10 of itself).
const TOL_F16_INPUTS: f32 = 2e-3;

/// Where `run_matmul` puts y: from `offset`, rows of the outputs and `pad` values more.
#[derive(Debug, Clone, Copy)]
struct YLayout {
    offset: usize,
    pad: usize,
}

/// y from offset 1, 2 values of padding per row: unaligned, for the f32 tiles.
const Y_ODD: YLayout = YLayout { offset: 1, pad: 2 };

/// y from offset 4, 4 values of padding per row: 16-byte aligned rows where the outputs are a
/// multiple of 4, as matrix-core stores need.
const Y_ALIGNED: YLayout = YLayout { offset: 4, pad: 4 };

/// One prefill matmul's outputs and the CPU's, token-major, with what the check allows.
struct MatmulRun {
    label: String,
    rows: usize,
    got: Vec<f32>,
    want: Vec<f32>,
    mag: Vec<f32>,
    tol: f32,
}

impl MatmulRun {
    /// Whether output `i` is off: |got − want| > tol · (1 + terms' magnitude), or not finite.
    fn off(&self, i: usize) -> bool {
        let close = (self.got[i] - self.want[i]).abs() <= self.tol * (1.0 + self.mag[i]);
        !close || !self.got[i].is_finite()
    }

    /// None where every output is close; else which outputs are off, so that one failing run
    /// tells a wrong block layout (whole 16-row or 16-token blocks), a lost K step (every
    /// output, errors near one step's share) and the token tail after the matrix-core blocks
    /// apart.
    fn mismatch(&self) -> Option<String> {
        let bad: Vec<usize> = (0..self.got.len()).filter(|&i| self.off(i)).collect();
        let first = *bad.first()?;
        let mut tokens: Vec<usize> = bad.iter().map(|i| i / self.rows).collect();
        tokens.dedup();
        let mut row_blocks = [0usize; 2];
        for i in &bad {
            row_blocks[(i % self.rows) % 32 / 16] += 1;
        }
        let worst = bad
            .iter()
            .map(|&i| (self.got[i] - self.want[i]).abs() / (1.0 + self.mag[i]))
            .fold(0f32, f32::max);
        Some(format!(
            "{}: {} of {} outputs off (worst error {worst:.3e} of the magnitude); first: row {}, \
             token {}: {} for {} (magnitude {}); tokens off: {:?}; off outputs per 16-row half \
             of a 32-row block: {row_blocks:?}",
            self.label,
            bad.len(),
            self.got.len(),
            first % self.rows,
            first / self.rows,
            self.got[first],
            self.want[first],
            self.mag[first],
            &tokens[..tokens.len().min(20)],
        ))
    }
}

/// Checks a prefill matmul (`run_matmul`, y unaligned) against the CPU.
fn check_matmul(
    ops: &Ops,
    w: &GpuWeight,
    w_ref: &[f32],
    tokens: usize,
    kernel: Kernel,
    bias: Option<&[f32]>,
    rng: &mut Rng,
) {
    let run = run_matmul(ops, w, w_ref, tokens, kernel, Y_ODD, bias, rng);
    assert_dots_close(&run.label, &run.got, &run.want, &run.mag, run.tol);
}

/// Runs a prefill matmul of `tokens` rows of x (from offset 5, 3 values of padding per row) into
/// y (`y_at`), with an optional bias, and the CPU's: to be within 2e-5 of the terms' magnitude,
/// or `TOL_F16_INPUTS` on matrix cores.
#[allow(clippy::too_many_arguments)]
fn run_matmul(
    ops: &Ops,
    w: &GpuWeight,
    w_ref: &[f32],
    tokens: usize,
    kernel: Kernel,
    y_at: YLayout,
    bias: Option<&[f32]>,
    rng: &mut Rng,
) -> MatmulRun {
    let ctx = &ops.ctx;
    let (rows, cols) = (w.rows, w.cols);
    let (xs, ys) = (cols + 3, rows + y_at.pad);
    let x = rng.vec(tokens * cols);
    let mut xb = vec![0f32; 5 + tokens * xs];
    for t in 0..tokens {
        xb[5 + t * xs..5 + t * xs + cols].copy_from_slice(&x[t * cols..(t + 1) * cols]);
    }
    let xbuf = ctx.storage_with("x", &xb);
    let ybuf = ctx.storage("y", ((y_at.offset + tokens * ys) * 4) as u64);
    let bbuf = bias.map(|b| {
        let mut padded = vec![0f32; 2];
        padded.extend_from_slice(b);
        ctx.storage_with("bias", &padded)
    });
    let (xr, yr) = (
        Region::new(&xbuf, 5, xs as u32),
        Region::new(&ybuf, y_at.offset as u32, ys as u32),
    );
    let b = bbuf.as_ref().map(|buf| Bias {
        buf,
        offset: 2,
        expert_stride: 0,
    });
    let (sel, n) = (MatSel::whole(w), tokens as u32);
    let d = match kernel {
        Kernel::Tile(tile) => ops.matmul_tiled(w, &sel, xr, yr, n, b, tile),
        Kernel::Coop => ops.matmul_coop(w, &sel, xr, yr, n, b),
        Kernel::Chosen => ops.matmul(w, &sel, xr, yr, n, b),
    }
    .unwrap();
    ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
    let (mut want, mag) = cpu_matmul(w_ref, &x, rows, cols, tokens);
    if let Some(b) = bias {
        for (i, v) in want.iter_mut().enumerate() {
            *v += b[i % rows];
        }
    }
    let got = ctx.read_f32(&ybuf, 0, y_at.offset + tokens * ys).unwrap();
    let got: Vec<f32> = (0..tokens)
        .flat_map(|t| got[y_at.offset + t * ys..y_at.offset + t * ys + rows].to_vec())
        .collect();
    let label = format!(
        "{} matmul {kernel:?}, {rows} × {cols}, {tokens} tokens, y {y_at:?}, bias {}",
        w.dtype.name(),
        bias.is_some()
    );
    // The chosen kernel may use matrix cores for the product's first whole 32-token blocks.
    let on_matrix_cores = match kernel {
        Kernel::Tile(_) => false,
        Kernel::Coop | Kernel::Chosen => ctx.caps.matrix_cores,
    };
    let tol = if on_matrix_cores {
        TOL_F16_INPUTS
    } else {
        2e-5
    };
    MatmulRun {
        label,
        rows,
        got,
        want,
        mag,
        tol,
    }
}

#[test]
fn every_dtype_matches_the_cpu() {
    let Some(ctx) = shared() else { return };
    let mut ops = f32_ops(ctx);
    let mut rng = Rng::new(1);
    // Every number of rows per lane: 45 rows leave a last group of one row or two.
    for rows_per_lane in 1..=3 {
        ops.set_rows_per_lane(rows_per_lane);
        for (dtype, cols) in all_dtypes() {
            let s = make(dtype, 45, cols, &mut rng);
            check_stored(&ops, &s, Some(1));
            // Rows longer than one staged chunk of x (64 units of 32 values).
            let long = make(dtype, 5, cols * (2048 / cols + 1) + cols, &mut rng);
            check_stored(&ops, &long, Some(1));
        }
    }
}

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
/// (two 64-row blocks), 32
/// tokens (one block), 45 and 100 (whole blocks and a tail of 13 or 4 tokens for the f32 tiles),
/// rows of one unit or part of one, of two and of 2048 values, with and without a bias. Every
/// case runs; the failure lists each case that is off and how. Then the kernel `Ops::matmul`
/// chooses, into y at an unaligned offset (the f32 tiles on every adapter). Where the adapter has
/// no matrix cores (lavapipe), the chosen kernel runs in place of the matrix-core one, after a
/// loud SKIPPED line.
#[test]
fn matrix_core_matmul_matches_the_cpu() {
    let Some(ctx) = shared() else { return };
    let kernel = if ctx.caps.matrix_cores {
        Kernel::Coop
    } else {
        eprintln!(
            "SKIPPED: {} has no matrix cores (or MINERVA_GPU_MATRIX_CORES=0); checking the \
             f32 kernels instead",
            ctx.describe()
        );
        Kernel::Chosen
    };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(9);
    let (mut cases, mut off) = (0, Vec::new());
    // 96 outputs: 32 per workgroup; 128: 64 per workgroup (`coop_defines`).
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

/// Blocks of every GGUF quant type and their values as decoded by gguf-py
/// (tools/gpu_block_reference.py).
#[test]
fn gguf_blocks_match_gguf_py() {
    let Some(ctx) = shared() else { return };
    let ops = f32_ops(ctx);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/gpu/ggml_blocks.safetensors"
    );
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let types = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::MXFP4,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ];
    for dtype in types {
        let blocks = st.tensor(&format!("{}.blocks", dtype.name())).unwrap();
        let values = st.tensor(&format!("{}.values", dtype.name())).unwrap();
        let shape = values.shape().to_vec();
        let w_ref: Vec<f32> = bytemuck::pod_collect_to_vec(values.data());
        let view = TensorView {
            name: "w",
            shape,
            dtype,
            data: TensorData::Plain(blocks.data()),
        };
        check_weight(&ops, &view, &w_ref, Some(1));
    }
}

#[test]
fn weights_split_across_bindings_give_the_same_results() {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(2);
    // A binding limit of 10 rows (plus slack) splits 45 rows into 5 parts.
    let cases = [
        (DType::F16, 37),
        (DType::Q4_0, 96),
        (DType::MlxAffine { bits: 3, group: 32 }, 128),
        (DType::HfMxfp4, 64),
    ];
    // One context whose limit each case sets: on the H200, NVIDIA's driver offered no adapter
    // to the instances this test made one per case beside the shared one.
    let mut ctx = GpuContext::new(&exact()).unwrap();
    for (dtype, cols) in cases {
        let s = make(dtype, 45, cols, &mut rng);
        let widest = s.bufs.iter().map(|b| b.len() / 45).max().unwrap();
        ctx.caps.max_binding = (widest * 10 + 4) as u64;
        let shared = Arc::new(ctx);
        check_stored(&f32_ops(shared.clone()), &s, Some(5));
        ctx = Arc::try_unwrap(shared)
            .ok()
            .expect("nothing else holds the context");
    }
}

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
        let all = MatSel {
            matrix: 0,
            offset: 0,
            stride: 1,
            out_dim: rows,
            in_dim: cols,
            input_major: false,
        };
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

/// Decode products of MXFP4 weights (GGUF blocks, HF blocks, MLX packs) in packed f16 where the
/// adapter offers f16, against the CPU within `TOL_F16_INPUTS` of the terms' magnitude. Plain:
/// 45 rows (not whole workgroups) of 96 and of gpt-oss's 2880 values, 1 to 3 rows per lane,
/// three vectors, the last with values up to ±1000 (the f16 products must not overflow).
/// Experts: 5 experts of 19 rows, each item's expert read from the GPU, 1 and 2 rows per lane,
/// the weight whole and split into parts of whole experts.
#[test]
fn packed_f16_mxfp4_products_match_the_cpu() {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(14);
    for dtype in [DType::MXFP4, DType::HfMxfp4, DType::MlxMxfp4] {
        for cols in [96usize, 2880] {
            let name = format!("{} × {cols}", dtype.name());
            let s = make(dtype, 45, cols, &mut rng);
            let mut x = rng.vec(3 * cols);
            x[2 * cols..].iter_mut().for_each(|v| *v *= 1000.0);
            check_packed_plain(&name, &s, &x);
            let e = make(dtype, 5 * 19, cols, &mut rng);
            let xe = rng.vec(2 * cols);
            for split in [false, true] {
                check_packed_experts(&format!("{name} split={split}"), &e, &xe, split);
            }
        }
    }
}

/// Ops with packed f16 products where the adapter offers f16 (the default options allow them).
fn packed_ops(ctx: Arc<GpuContext>) -> Ops {
    let mut ops = Ops::new(ctx.clone());
    assert_eq!(ops.packed_f16(), ctx.caps.packed_f16);
    ops.set_packed_f16(true);
    assert_eq!(ops.packed_f16(), ctx.caps.f16);
    ops
}

/// `s` (one matrix) times the vectors of `x`, with 1 to 3 rows per lane.
fn check_packed_plain(name: &str, s: &Stored, x: &[f32]) {
    let ctx = shared().unwrap();
    let mut ops = packed_ops(ctx.clone());
    let (rows, cols) = (s.rows, s.cols);
    let batch = x.len() / cols;
    let w = GpuWeight::upload(&ctx, &s.view(vec![rows, cols]), 1).unwrap();
    let (want, mag) = cpu_matmul(&s.reference().unwrap(), x, rows, cols, batch);
    let xb = ctx.storage_with("x", x);
    for rows_per_lane in 1..=3 {
        ops.set_rows_per_lane(rows_per_lane);
        let yb = ctx.storage("y", (batch * rows * 4) as u64);
        let d = ops
            .matvec(
                &w,
                &MatSel::whole(&w),
                Region::new(&xb, 0, cols as u32),
                Region::new(&yb, 0, rows as u32),
                batch as u32,
                None,
                None,
                Folds::default(),
            )
            .unwrap();
        ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
        let got = ctx.read_f32(&yb, 0, batch * rows).unwrap();
        let what = format!("{name} packed f16 matvec, {rows_per_lane} rows per lane");
        assert_dots_close(&what, &got, &want, &mag, TOL_F16_INPUTS);
    }
}

/// Expert products over `s` stored as [5, 19, cols]: two tokens of `x`, two experts each (item z
/// reads token z / 2), the weight split into parts of two experts' rows with `split`.
fn check_packed_experts(name: &str, s: &Stored, x: &[f32], split: bool) {
    let (experts, rows, cols) = (5usize, 19usize, s.cols);
    let mut ctx = GpuContext::new(&Default::default()).unwrap();
    if split {
        let widest = s.bufs.iter().map(|b| b.len() / (experts * rows)).max();
        ctx.caps.max_binding = (2 * rows * widest.unwrap() + 4) as u64;
    }
    let ctx = Arc::new(ctx);
    let mut ops = packed_ops(ctx.clone());
    let w = GpuWeight::upload(&ctx, &s.view(vec![experts, rows, cols]), rows).unwrap();
    assert_eq!(w.parts.len(), if split { 3 } else { 1 });
    let w_ref = s.reference().unwrap();
    let ids: Vec<u32> = vec![4, 1, 0, 4];
    let (xb, ib) = (ctx.storage_with("x", x), ctx.storage_with("ids", &ids));
    let all = MatSel {
        matrix: 0,
        offset: 0,
        stride: 1,
        out_dim: rows,
        in_dim: cols,
        input_major: false,
    };
    for rows_per_lane in 1..=2 {
        ops.set_rows_per_lane(rows_per_lane);
        let yb = ctx.storage("y", (ids.len() * rows * 4) as u64);
        let d = ops
            .matvec(
                &w,
                &all,
                Region::new(&xb, 0, cols as u32),
                Region::new(&yb, 0, rows as u32),
                ids.len() as u32,
                None,
                Some(ExpertSel { ids: &ib, x_div: 2 }),
                Folds::default(),
            )
            .unwrap();
        ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
        let got = ctx.read_f32(&yb, 0, ids.len() * rows).unwrap();
        for (z, &e) in ids.iter().enumerate() {
            let e = e as usize;
            let we = &w_ref[e * rows * cols..(e + 1) * rows * cols];
            let (want, mag) = cpu_matmul(we, &x[(z / 2) * cols..(z / 2 + 1) * cols], rows, cols, 1);
            assert_dots_close(
                &format!("{name} packed f16 expert item {z}, {rows_per_lane} rows per lane"),
                &got[z * rows..(z + 1) * rows],
                &want,
                &mag,
                TOL_F16_INPUTS,
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
/// and at most a tile long.
fn check_groups(ids: &[u32], order: &[u32], tiles: &[u32], tile_tokens: u32) {
    let mut seen = vec![0; ids.len()];
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
                );
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

/// Interleaved outputs (every other stored row, as in gpt-oss's fused gate_up) of one matrix of
/// a stacked weight, split across parts and stored output-major; and the same outputs of an
/// input-major ([in][out]) float weight, with and without experts.
#[test]
fn strided_views_and_input_major_weights() {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(5);
    let (mats, out_all, cols) = (3usize, 22usize, 64usize);
    let s = make(DType::Q8_0, mats * out_all, cols, &mut rng);
    let w_ref = s.reference().unwrap();
    let x = rng.vec(2 * cols);
    for split in [false, true] {
        let mut ctx = GpuContext::new(&exact()).unwrap();
        if split {
            // 7 rows per part: parts cut matrices and the strided rows.
            ctx.caps.max_binding = (7 * 68 + 4) as u64;
        }
        let ctx = Arc::new(ctx);
        let ops = Ops::new(ctx.clone());
        let w = GpuWeight::upload(&ctx, &s.view(vec![mats, out_all, cols]), 1).unwrap();
        for (matrix, offset) in [(1usize, 1usize), (2, 0)] {
            let sel = MatSel {
                matrix,
                offset,
                stride: 2,
                out_dim: out_all / 2,
                in_dim: cols,
                input_major: false,
            };
            let rows: Vec<usize> = (0..sel.out_dim)
                .map(|j| matrix * out_all + offset + 2 * j)
                .collect();
            let wsel: Vec<f32> = rows
                .iter()
                .flat_map(|&r| w_ref[r * cols..(r + 1) * cols].to_vec())
                .collect();
            let (want, mag) = cpu_matmul(&wsel, &x, sel.out_dim, cols, 2);
            let xb = ctx.storage_with("x", &x);
            let yb = ctx.storage("y", (2 * sel.out_dim * 4) as u64);
            let y = Region::new(&yb, 0, sel.out_dim as u32);
            let mv = ops
                .matvec(
                    &w,
                    &sel,
                    Region::new(&xb, 0, cols as u32),
                    y,
                    2,
                    None,
                    None,
                    Folds::default(),
                )
                .unwrap();
            ctx.submit(&mv.iter().collect::<Vec<_>>()).unwrap();
            assert_dots_close(
                &format!("strided matvec split={split}"),
                &ctx.read_f32(&yb, 0, 2 * sel.out_dim).unwrap(),
                &want,
                &mag,
                2e-5,
            );
            for tile in MatmulTile::ALL {
                let xr = Region::new(&xb, 0, cols as u32);
                let mm = ops.matmul_tiled(&w, &sel, xr, y, 2, None, tile).unwrap();
                ctx.submit(&mm.iter().collect::<Vec<_>>()).unwrap();
                assert_dots_close(
                    &format!("strided matmul split={split} {tile:?}"),
                    &ctx.read_f32(&yb, 0, 2 * sel.out_dim).unwrap(),
                    &want,
                    &mag,
                    2e-5,
                );
            }
        }
    }

    // Input-major f32: matrices [in = 40][out = 22]; view odd outputs of matrix 2, then by experts.
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let (inp, outn) = (40usize, 22usize);
    let vals = rng.vec(mats * inp * outn);
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = TensorView {
        name: "experts.gate_up_proj",
        shape: vec![mats, inp, outn],
        dtype: DType::F32,
        data: TensorData::Plain(&bytes),
    };
    let w = GpuWeight::upload(&ctx, &view, inp).unwrap();
    let x = rng.vec(2 * inp);
    let xb = ctx.storage_with("x", &x);
    let column = |m: usize, j: usize| -> Vec<f32> {
        (0..inp)
            .map(|c| vals[m * inp * outn + c * outn + j])
            .collect()
    };
    let sel = MatSel {
        matrix: 2,
        offset: 1,
        stride: 2,
        out_dim: outn / 2,
        in_dim: inp,
        input_major: true,
    };
    let wsel: Vec<f32> = (0..sel.out_dim)
        .flat_map(|j| column(2, 1 + 2 * j))
        .collect();
    let (want, mag) = cpu_matmul(&wsel, &x, sel.out_dim, inp, 2);
    let yb = ctx.storage("y", (2 * sel.out_dim * 4) as u64);
    let y = Region::new(&yb, 0, sel.out_dim as u32);
    let mv = ops
        .matvec(
            &w,
            &sel,
            Region::new(&xb, 0, inp as u32),
            y,
            2,
            None,
            None,
            Folds::default(),
        )
        .unwrap();
    ctx.submit(&mv.iter().collect::<Vec<_>>()).unwrap();
    assert_dots_close(
        "input-major matvec",
        &ctx.read_f32(&yb, 0, 2 * sel.out_dim).unwrap(),
        &want,
        &mag,
        2e-5,
    );
    for tile in MatmulTile::ALL {
        let xr = Region::new(&xb, 0, inp as u32);
        let mm = ops.matmul_tiled(&w, &sel, xr, y, 2, None, tile).unwrap();
        ctx.submit(&mm.iter().collect::<Vec<_>>()).unwrap();
        assert_dots_close(
            &format!("input-major matmul {tile:?}"),
            &ctx.read_f32(&yb, 0, 2 * sel.out_dim).unwrap(),
            &want,
            &mag,
            2e-5,
        );
    }
    // Experts 0 and 2 for the two vectors.
    let ids = ctx.storage_with("ids", &[0u32, 2]);
    let sel = MatSel { matrix: 0, ..sel };
    let mv = ops
        .matvec(
            &w,
            &sel,
            Region::new(&xb, 0, inp as u32),
            y,
            2,
            None,
            Some(ExpertSel {
                ids: &ids,
                x_div: 1,
            }),
            Folds::default(),
        )
        .unwrap();
    ctx.submit(&mv.iter().collect::<Vec<_>>()).unwrap();
    let got = ctx.read_f32(&yb, 0, 2 * sel.out_dim).unwrap();
    for (z, m) in [0usize, 2].into_iter().enumerate() {
        let wsel: Vec<f32> = (0..sel.out_dim)
            .flat_map(|j| column(m, 1 + 2 * j))
            .collect();
        let (want, mag) = cpu_matmul(&wsel, &x[z * inp..(z + 1) * inp], sel.out_dim, inp, 1);
        assert_dots_close(
            &format!("input-major expert {m}"),
            &got[z * sel.out_dim..(z + 1) * sel.out_dim],
            &want,
            &mag,
            2e-5,
        );
    }
}

/// Two or three weights of different dtypes read in one dispatch: q/k/v-style split outputs, and
/// gate/up with the activation applied.
#[test]
fn fused_products_over_several_weights() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(6);
    // 2336 values are 73 units: rows' lanes end on different parts of a unit.
    for cols in [96usize, 2336] {
        let stored = [
            make(DType::Q4_0, 45, cols, &mut rng),
            make(DType::Q8_0, 13, cols, &mut rng),
            make(DType::F16, 7, cols, &mut rng),
            make(DType::MlxAffine { bits: 4, group: 32 }, 45, cols, &mut rng),
        ];
        let (refs, ws) = references_and_uploads(&ctx, &stored);
        let x = rng.vec(cols + 3);
        let xb = ctx.storage_with("x", &x);
        let xr = Region::new(&xb, 3, 0);
        let products = |i: usize| cpu_matmul(&refs[i], &x[3..], stored[i].rows, cols, 1);

        let outs: Vec<wgpu::Buffer> = (0..3)
            .map(|i| ctx.storage("y", (stored[i].rows * 4) as u64))
            .collect();
        let d = ops
            .matvec_multi(
                &[&ws[0], &ws[1], &ws[2]],
                xr,
                &[&outs[0], &outs[1], &outs[2]],
                Multi::Split,
                None,
                &[],
            )
            .unwrap();
        ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
        for i in 0..3 {
            let (want, mag) = products(i);
            let got = ctx.read_f32(&outs[i], 0, stored[i].rows).unwrap();
            assert_dots_close(&format!("split output {i}"), &got, &want, &mag, 2e-5);
        }

        let (g, gmag) = products(0);
        let (u, umag) = products(3);
        for op in [
            Eltwise::SwiGlu,
            Eltwise::GluOss {
                alpha: 1.702,
                limit: 7.0,
            },
        ] {
            let yb = ctx.storage("act", (45 * 4) as u64);
            let d = ops
                .matvec_multi(&[&ws[0], &ws[3]], xr, &[&yb], Multi::Glu(op), None, &[])
                .unwrap();
            ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
            let got = ctx.read_f32(&yb, 0, 45).unwrap();
            for r in 0..45 {
                let want = glu_reference(op, g[r], u[r]);
                let tol = 1e-4 * (1.0 + gmag[r]) * (1.0 + umag[r]);
                assert!(
                    (got[r] - want).abs() <= tol,
                    "{op:?} row {r}: {} vs {want}",
                    got[r]
                );
            }
        }
    }
}

/// SwiGLU, or gpt-oss's clamped GLU, of gate g and up u on the CPU.
fn glu_reference(op: Eltwise, g: f32, u: f32) -> f32 {
    match op {
        Eltwise::SwiGlu => g / (1.0 + (-g).exp()) * u,
        _ => {
            let gc = g.min(7.0);
            (u.clamp(-7.0, 7.0) + 1.0) * gc / (1.0 + (-1.702 * gc).exp())
        }
    }
}

/// Random norm weights in a buffer from element `offset` on, and RMSNorm(x)·g on the CPU (f64).
fn norm_weights(
    ctx: &GpuContext,
    x: &[f32],
    offset: usize,
    eps: f32,
    rng: &mut Rng,
) -> (wgpu::Buffer, Vec<f32>) {
    let cols = x.len();
    let g = rng.vec(cols + offset);
    let rms = (x.iter().map(|v| (v * v) as f64).sum::<f64>() / cols as f64 + eps as f64).sqrt();
    let normed = (0..cols)
        .map(|c| (x[c] as f64 * g[offset + c] as f64 / rms) as f32)
        .collect();
    (ctx.storage_with("norm weights", &g), normed)
}

/// RMSNorm(x)·g folded into decode products, and results added into a residual stream, against
/// the CPU: a norm then a product (with biases), and a product then an add.
#[test]
fn products_fold_the_norm_and_the_residual_add() {
    let Some(ctx) = shared() else { return };
    let ops = Ops::new(ctx.clone());
    let mut rng = Rng::new(11);
    for cols in [96usize, 2336] {
        let stored = [
            make(DType::Q4_0, 45, cols, &mut rng),
            make(DType::F16, 13, cols, &mut rng),
            make(DType::Q8_0, 45, cols, &mut rng),
        ];
        let (refs, ws) = references_and_uploads(&ctx, &stored);
        let x: Vec<f32> = rng.vec(cols).iter().map(|v| 3.0 * v + 0.5).collect();
        let eps = 1e-5;
        let (gb, normed) = norm_weights(&ctx, &x, 2, eps, &mut rng);
        let xb = ctx.storage_with("x", &x);
        let norm = Some(NormFold {
            buf: &gb,
            offset: 2,
            eps,
            records: None,
        });

        // One product with the norm folded in, adding into a residual stream.
        let rows = stored[0].rows;
        let resid0 = rng.vec(rows);
        let rb = ctx.storage_with("residual", &resid0);
        let yb = ctx.storage("y", (rows * 4) as u64);
        let d = ops
            .matvec(
                &ws[0],
                &MatSel::whole(&ws[0]),
                Region::new(&xb, 0, cols as u32),
                Region::new(&yb, 0, rows as u32),
                1,
                None,
                None,
                Folds {
                    norm,
                    residual: Some(&rb),
                    normed: None,
                    records: None,
                },
            )
            .unwrap();
        ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
        let (want, mag) = cpu_matmul(&refs[0], &normed, rows, cols, 1);
        let got = ctx.read_f32(&yb, 0, rows).unwrap();
        assert_dots_close("normed product", &got, &want, &mag, 2e-5);
        let resid: Vec<f32> = ctx.read_f32(&rb, 0, rows).unwrap();
        let with_resid: Vec<f32> = (0..rows).map(|r| resid0[r] + want[r]).collect();
        let mag_resid: Vec<f32> = (0..rows).map(|r| mag[r] + resid0[r].abs()).collect();
        assert_dots_close("residual stream", &resid, &with_resid, &mag_resid, 2e-5);

        // The same product also writing the norm's output (the MoE router's fold): 45 rows over
        // 12 workgroups (the 11 whole ones write it), and the first 3 rows, fewer than one
        // workgroup holds (their lanes write it).
        for out_dim in [rows, 3] {
            let hb = ctx.storage("normed", (cols * 4) as u64);
            let sel = MatSel {
                out_dim,
                ..MatSel::whole(&ws[0])
            };
            let d = ops
                .matvec(
                    &ws[0],
                    &sel,
                    Region::new(&xb, 0, cols as u32),
                    Region::new(&yb, 0, out_dim as u32),
                    1,
                    None,
                    None,
                    Folds {
                        norm,
                        residual: None,
                        normed: Some(&hb),
                        records: None,
                    },
                )
                .unwrap();
            ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
            assert_dots_close(
                &format!("product of {out_dim} rows writing the norm"),
                &ctx.read_f32(&yb, 0, out_dim).unwrap(),
                &want[..out_dim],
                &mag[..out_dim],
                2e-5,
            );
            assert_close(
                &format!("norm's output beside {out_dim} rows"),
                &ctx.read_f32(&hb, 0, cols).unwrap(),
                &normed,
                1e-5,
            );
        }

        // Two weights split, with the norm folded in and biases added, and gate/up/act.
        let outs: Vec<wgpu::Buffer> = (0..2)
            .map(|i| ctx.storage("y", (stored[i].rows * 4) as u64))
            .collect();
        let bias = rng.vec(100);
        let bb = ctx.storage_with("biases", &bias);
        let biases = [3u32, 50].map(|offset| Bias {
            buf: &bb,
            offset,
            expert_stride: 0,
        });
        let xr = Region::new(&xb, 0, 0);
        let d = ops
            .matvec_multi(
                &[&ws[0], &ws[1]],
                xr,
                &[&outs[0], &outs[1]],
                Multi::Split,
                norm,
                &biases,
            )
            .unwrap();
        ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
        for i in 0..2 {
            let (mut want, mag) = cpu_matmul(&refs[i], &normed, stored[i].rows, cols, 1);
            let first = biases[i].offset as usize;
            for (r, v) in want.iter_mut().enumerate() {
                *v += bias[first + r];
            }
            let got = ctx.read_f32(&outs[i], 0, stored[i].rows).unwrap();
            assert_dots_close(&format!("normed split output {i}"), &got, &want, &mag, 2e-5);
        }
        let act = ctx.storage("act", (rows * 4) as u64);
        let d = ops
            .matvec_multi(
                &[&ws[0], &ws[2]],
                xr,
                &[&act],
                Multi::Glu(Eltwise::SwiGlu),
                norm,
                &[],
            )
            .unwrap();
        ctx.submit(&d.iter().collect::<Vec<_>>()).unwrap();
        let (gt, gmag) = cpu_matmul(&refs[0], &normed, rows, cols, 1);
        let (ut, umag) = cpu_matmul(&refs[2], &normed, rows, cols, 1);
        let got = ctx.read_f32(&act, 0, rows).unwrap();
        for r in 0..rows {
            let want = gt[r] / (1.0 + (-gt[r]).exp()) * ut[r];
            let tol = 1e-4 * (1.0 + gmag[r]) * (1.0 + umag[r]);
            assert!(
                (got[r] - want).abs() <= tol,
                "normed glu row {r}: {} vs {want}",
                got[r]
            );
        }
    }
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
        for split in [false, true] {
            let mut ctx = GpuContext::new(&exact()).unwrap();
            if split {
                // Two experts' rows of the separate weights per part: 3 parts each.
                let widest = gate.bufs.iter().map(|b| b.len() / (experts * rows)).max();
                ctx.caps.max_binding = (2 * rows * widest.unwrap() + 4) as u64;
            }
            let ctx = Arc::new(ctx);
            let mut ops = Ops::new(ctx.clone());
            ops.set_packed_f16(packed);
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
                                    "{} {name} split={split} bias={biased} {act:?} packed={packed} item {z} row {j}: {have} vs {want}",
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

/// Each stored weight's reference values (dequantized on the CPU) and its upload, one part.
fn references_and_uploads(ctx: &GpuContext, stored: &[Stored]) -> (Vec<Vec<f32>>, Vec<GpuWeight>) {
    let refs = stored.iter().map(|s| s.reference().unwrap()).collect();
    let ws = stored
        .iter()
        .map(|s| GpuWeight::upload(ctx, &s.view(vec![s.rows, s.cols]), 1).unwrap())
        .collect();
    (refs, ws)
}

/// x of `cols` values with unit 1 all zero (parts whose step is 0).
fn x_with_zero_unit(cols: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x: Vec<f32> = rng.vec(cols).iter().map(|v| 2.0 * v + 0.3).collect();
    x[32..64].fill(0.0);
    x
}

/// Q4_0 and Q8_0 decode products with int8 x (DOT_I8) against the CPU: plain with 1 to 3 rows
/// per lane, a bias, a batch of two vectors, the folded norm and residual add.
#[test]
fn int8_products_match_the_cpu_within_the_quantization_of_x() {
    let Some(ctx) = shared() else { return };
    let mut exact = Ops::new(ctx.clone());
    let mut ops = Ops::new(ctx.clone());
    ops.set_int8_products(true);
    ops.set_int8_min_outputs(0);
    let mut rng = Rng::new(21);
    // 45 rows: not a multiple of the 4 · (1 to 3) rows of a workgroup. 2336 values are 73
    // units: rows' lanes end on different parts of a unit; 2880 (gpt-oss) are 90, 360 parts,
    // more than one workgroup of the quantization.
    let rows = 45;
    for dtype in [DType::Q4_0, DType::Q8_0] {
        for cols in [96usize, 2336, 2880] {
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
/// experts of 2880 columns (90 units), 19 rows (not a whole number of workgroups), whole and
/// split into parts of whole experts; items reading one vector per token (gate/up style, k = 2)
/// and one vector each (down style, from an unaligned offset); and gate, up and SwiGLU in one
/// product.
#[test]
fn int8_expert_products_match_the_cpu_within_the_quantization_of_x() {
    if shared().is_none() {
        return;
    }
    let mut rng = Rng::new(23);
    let (experts, rows, cols) = (5usize, 19usize, 2880usize);
    let ids: Vec<u32> = vec![4, 1, 0, 4];
    for dtype in [DType::Q4_0, DType::Q8_0] {
        let gate = make(dtype, experts * rows, cols, &mut rng);
        let up = make(dtype, experts * rows, cols, &mut rng);
        let refs = [gate.reference().unwrap(), up.reference().unwrap()];
        let mut xv = vec![0f32; 3];
        xv.extend(rng.vec(ids.len() * cols));
        let x = &xv[3..];
        for split in [false, true] {
            let mut ctx = GpuContext::new(&exact()).unwrap();
            if split {
                let widest = gate.bufs.iter().map(|b| b.len() / (experts * rows)).max();
                ctx.caps.max_binding = (2 * rows * widest.unwrap() + 4) as u64;
            }
            let ctx = Arc::new(ctx);
            let exact_ops = Ops::new(ctx.clone());
            let mut ops = Ops::new(ctx.clone());
            ops.set_int8_products(true);
            ops.set_int8_min_outputs(0);
            let upload = |s: &Stored| {
                GpuWeight::upload(&ctx, &s.view(vec![experts, rows, cols]), rows).unwrap()
            };
            let (gw, uw) = (upload(&gate), upload(&up));
            assert_eq!(gw.parts.len(), if split { 3 } else { 1 });
            let all = MatSel {
                matrix: 0,
                offset: 0,
                stride: 1,
                out_dim: rows,
                in_dim: cols,
                input_major: false,
            };
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
