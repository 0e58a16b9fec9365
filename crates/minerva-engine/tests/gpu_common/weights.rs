//! Stored weights of every dtype with their CPU references (dequantized by
//! `minerva_formats::dequantize_rows`, or a small local reference where the formats crate has no
//! decoder yet; products in f64), and the prefill product runner, shared by the weight kernel
//! tests.

use super::*;
use minerva_engine::gpu::{
    Bias, Eltwise, GpuContext, GpuOptions, GpuWeight, MatSel, MatmulTile, Ops, Region,
};
use minerva_formats::{dequantize_rows, DType, TensorData, TensorView};
use std::sync::Arc;

/// Stored bytes of a random tensor of `dtype`, with scale fields kept finite and moderate.
pub struct Stored {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    pub bufs: Vec<Vec<u8>>,
}

fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

pub fn make(dtype: DType, rows: usize, cols: usize, rng: &mut Rng) -> Stored {
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
    pub fn view(&self, shape: Vec<usize>) -> TensorView<'_> {
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
    pub fn reference(&self) -> Option<Vec<f32>> {
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
pub fn cpu_matmul(
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

pub fn all_dtypes() -> Vec<(DType, usize)> {
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

/// Which prefill kernel `run_matmul` runs.
#[derive(Debug, Clone, Copy)]
pub enum Kernel {
    /// The f32 tiles.
    Tile(MatmulTile),
    /// Matrix cores (`Ops::matmul_coop`).
    Coop,
    /// The kernel `Ops::matmul` chooses.
    Chosen,
}

/// Tolerance of products of f16-rounded weights and inputs (each term off by ≤ 2^-10 of itself).
pub const TOL_F16_INPUTS: f32 = 2e-3;

/// Where `run_matmul` puts y: from `offset`, rows of the outputs and `pad` values more.
#[derive(Debug, Clone, Copy)]
pub struct YLayout {
    offset: usize,
    pad: usize,
}

/// y from offset 1, 2 values of padding per row: unaligned, for the f32 tiles.
pub const Y_ODD: YLayout = YLayout { offset: 1, pad: 2 };

/// y from offset 4, 4 values of padding per row: 16-byte aligned rows where the outputs are a
/// multiple of 4, as matrix-core stores need.
pub const Y_ALIGNED: YLayout = YLayout { offset: 4, pad: 4 };

/// One prefill matmul's outputs and the CPU's, token-major, with what the check allows.
pub struct MatmulRun {
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
    pub fn mismatch(&self) -> Option<String> {
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
pub fn check_matmul(
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
pub fn run_matmul(
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

/// Each stored weight's reference values (dequantized on the CPU) and its upload, one part.
pub fn references_and_uploads(
    ctx: &GpuContext,
    stored: &[Stored],
) -> (Vec<Vec<f32>>, Vec<GpuWeight>) {
    let refs = stored.iter().map(|s| s.reference().unwrap()).collect();
    let ws = stored
        .iter()
        .map(|s| GpuWeight::upload(ctx, &s.view(vec![s.rows, s.cols]), 1).unwrap())
        .collect();
    (refs, ws)
}

/// SwiGLU, or gpt-oss's clamped GLU, of gate g and up u on the CPU.
pub fn glu_reference(op: Eltwise, g: f32, u: f32) -> f32 {
    match op {
        Eltwise::SwiGlu => g / (1.0 + (-g).exp()) * u,
        _ => {
            let gc = g.min(7.0);
            (u.clamp(-7.0, 7.0) + 1.0) * gc / (1.0 + (-1.702 * gc).exp())
        }
    }
}

/// Random norm weights in a buffer from element `offset` on, and RMSNorm(x)·g on the CPU (f64).
pub fn norm_weights(
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

/// A context for `opts` whose storage bindings, with `split`, hold two experts' matrices of `s`
/// stored as [experts, rows, cols], so that its expert weights split into parts across bindings.
pub fn experts_context(
    opts: &GpuOptions,
    s: &Stored,
    experts: usize,
    rows: usize,
    split: bool,
) -> Arc<GpuContext> {
    let mut ctx = GpuContext::new(opts).unwrap();
    if split {
        let widest = s.bufs.iter().map(|b| b.len() / (experts * rows)).max();
        ctx.caps.max_binding = (2 * rows * widest.unwrap() + 4) as u64;
    }
    Arc::new(ctx)
}
