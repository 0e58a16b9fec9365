//! Every integer kernel against the f32 reference path: random blocks of each stored type
//! (random bytes with sane scales, so every bit pattern of the values occurs), random
//! activations, row counts and token counts that are not multiples of the task or tile sizes,
//! and strided views. The bound is what 8-bit activations can cost, computed per output.

use super::super::matmul::{linear, Matrix, Scratch};
use super::{kernel_on, packed, packed_kernel_on, Lanes};
use crate::backend::{Linear, MatView, WeightId};
use half::{bf16, f16};
use minerva_formats::{dequantize, DType, TensorData, TensorView};

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Byte offsets of a ggml block's f16 scale fields, which random bytes must not make NaN.
fn f16_fields(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q6_K => &[208],
        _ => &[],
    }
}

/// `rows × len` random blocks of a ggml type.
fn ggml_blocks(rng: &mut Rng, dtype: DType, rows: usize, len: usize) -> Vec<u8> {
    let bytes = dtype.row_bytes(len).unwrap() * rows;
    let mut b = rng.bytes(bytes);
    for blk in b.chunks_exact_mut(dtype.block_bytes()) {
        for &at in f16_fields(dtype) {
            let v = f16::from_f32(0.01 + 0.05 * rng.unit().abs());
            blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
        }
        if dtype == DType::MXFP4 {
            blk[0] = 120 + (rng.next() % 10) as u8;
        }
    }
    b
}

/// How far `fast` is from `exact`, in two measures (each ≤ 1 passes). Each activation moves by
/// at most half its block's step, h = amax / 254: (a) the largest difference over its bound
/// Σ h·|w|; (b) the root mean square of the differences over their expected spread,
/// sqrt(Σ (h·w)² / 3) for errors spread evenly over ±h, divided by 1.5. Both allow f32
/// rounding (1e-5 of Σ|w·x|). (b) is the tight one: an error in one weight value per block
/// stays inside (a) but not (b).
fn worst(
    x: &[f32],
    n: usize,
    w: &[f32],
    out_dim: usize,
    fast: &[f32],
    exact: &[f32],
    unit: usize,
) -> (f32, f32) {
    let len = w.len() / out_dim;
    let (mut worst, mut z2) = (0f32, 0f32);
    for t in 0..n {
        let xt = &x[t * len..(t + 1) * len];
        for j in 0..out_dim {
            let wj = &w[j * len..(j + 1) * len];
            let (mut bound, mut var, mut mag) = (0f32, 0f32, 0f32);
            for (xb, wb) in xt.chunks(unit).zip(wj.chunks(unit)) {
                // Half a step of the scale the block's `unit` values share.
                let h = xb.iter().fold(0f32, |m, v| m.max(v.abs())) / 254.0;
                bound += h * wb.iter().map(|v| v.abs()).sum::<f32>();
                var += h * h * wb.iter().map(|v| v * v).sum::<f32>() / 3.0;
                mag += xb.iter().zip(wb).map(|(a, b)| (a * b).abs()).sum::<f32>();
            }
            let d = (fast[t * out_dim + j] - exact[t * out_dim + j]).abs();
            let slack = 1e-5 * mag + 1e-6;
            worst = worst.max(d / (bound + slack));
            z2 += (d / (var.sqrt() + slack)).powi(2);
        }
    }
    (worst, (z2 / (n * out_dim) as f32).sqrt() / 1.5)
}

fn lin(stored_rows: usize, in_dim: usize, offset: usize, stride: usize, matrix: usize) -> Linear {
    let out_dim = (stored_rows - offset).div_ceil(stride);
    Linear {
        w: MatView {
            weight: WeightId(0),
            matrix,
            input_major: false,
            offset,
            stride,
            out_dim,
            in_dim,
        },
        bias: None,
    }
}

/// Runs the fast and reference products of `view` for several token counts and views, and
/// every kind of lanes this processor has against the portable ones.
fn check(view: &TensorView, what: &str) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (rows, len) = (view.shape[view.shape.len() - 2], view.row_len());
    let matrices = view.rows() / rows;
    let dense = dequantize(view).unwrap();
    for (n, offset, stride) in [(1, 0, 1), (3, 1, 2), (11, 0, 1), (17, 2, 3)] {
        let l = lin(rows, len, offset, stride, matrices - 1);
        let x: Vec<f32> = (0..n * len).map(|_| rng.unit() * 3.0).collect();
        let out_dim = l.w.out_dim;
        let mut exact = vec![0f32; n * out_dim];
        let mut got = vec![0f32; n * out_dim];
        let matrix = Matrix {
            view: view.clone(),
            turn: None,
        };
        linear(&x, n, &matrix, &l, None, &mut exact, None).unwrap();
        linear(
            &x,
            n,
            &matrix,
            &l,
            None,
            &mut got,
            Some(&mut Scratch::default()),
        )
        .unwrap();
        let base = (matrices - 1) * rows;
        let w: Vec<f32> = (0..out_dim)
            .flat_map(|j| {
                let r = base + offset + j * stride;
                dense[r * len..(r + 1) * len].to_vec()
            })
            .collect();
        let (max, rms) = worst(&x, n, &w, out_dim, &got, &exact, super::unit_of(view.dtype));
        let case = format!("{what}, {n} tokens, offset {offset} stride {stride}");
        assert!(max <= 1.0, "{case}: largest error {max}× its bound");
        assert!(rms <= 1.0, "{case}: errors spread {rms}× the expected");

        let rs = super::Rows::new(view, base + offset, stride, false).unwrap();
        let mut xq = super::QuantX::default();
        xq.quantize(&x, n, len, super::unit_of(view.dtype));
        let mut want = vec![0f32; n * out_dim];
        kernel_on(view.dtype, Lanes::Portable).unwrap()(&rs, 0..out_dim, &xq, &mut want);
        for lanes in Lanes::available() {
            let kernel = kernel_on(view.dtype, lanes).expect("a kernel");
            let mut got = vec![0f32; n * out_dim];
            kernel(&rs, 0..out_dim, &xq, &mut got);
            // A token's products are the same bits whichever tokens share its step: a cache
            // filled by a prompt and one filled a token at a time must agree.
            let mut one = super::QuantX::default();
            let mut alone = vec![0f32; out_dim];
            for t in 0..n {
                one.quantize(&x[t * len..(t + 1) * len], 1, len, xq.unit);
                kernel(&rs, 0..out_dim, &one, &mut alone);
                for (j, v) in alone.iter().enumerate() {
                    let same = v.to_bits() == got[j * n + t].to_bits();
                    assert!(
                        same,
                        "{what}: {} lanes, token {t} alone differs",
                        lanes.name()
                    );
                }
            }
            // The same integer sums, scaled and added in another order: f32 rounding of
            // terms (products and mins) that cancel, so of the outputs' size, not each one's.
            let size = want.iter().fold(1f32, |m, v| m.max(v.abs()));
            for (p, q) in got.iter().zip(&want) {
                let close = (p - q).abs() <= 1e-4 * size;
                assert!(close, "{what}: {} lanes {p} vs portable {q}", lanes.name());
            }
        }
    }
}

#[test]
fn ggml_block_types_match_the_reference() {
    let mut rng = Rng(7);
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::MXFP4,
    ] {
        // 29 rows per matrix, two matrices; rows of three blocks (K types), or of seven and
        // of six (kernels that take blocks in pairs).
        let lens: &[usize] = if dtype.block_elems() == 256 {
            &[768]
        } else {
            &[224, 192]
        };
        for &len in lens {
            let bytes = ggml_blocks(&mut rng, dtype, 58, len);
            let view = TensorView {
                name: "w",
                shape: vec![2, 29, len],
                dtype,
                data: TensorData::Plain(&bytes),
            };
            check(&view, &format!("{}, rows of {len}", dtype.name()));
        }
    }
}

/// Rows packed eight at a time give the same bits as the rows as stored: through the
/// kernels (whole matrices, views from a later group, views that end inside a group) and
/// through `linear`, whose strided views fall back to the reference path.
#[test]
fn packed_rows_give_the_bits_of_stored_rows() {
    let mut rng = Rng(23);
    let mut tested = 0;
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ] {
        let (rows, len) = (40, if dtype.block_elems() == 256 { 512 } else { 224 });
        let bytes = ggml_blocks(&mut rng, dtype, 2 * rows, len);
        let row_bytes = dtype.row_bytes(len).unwrap();
        let mut packed_bytes = vec![0u8; bytes.len()];
        let view = |b: &'static [u8]| TensorView {
            name: "w",
            shape: vec![2, rows, len],
            dtype,
            data: TensorData::Plain(b),
        };
        for lanes in Lanes::available() {
            let (Some(fast), Some(turn)) = (
                packed_kernel_on(dtype, lanes),
                packed::packs(dtype, rows, lanes),
            ) else {
                continue;
            };
            tested += 1;
            turn.pack(&bytes, &mut packed_bytes, row_bytes);
            // Leaked so the views can be 'static; a test's few KiB.
            let stored: &'static [u8] = Box::leak(bytes.clone().into_boxed_slice());
            let packed: &'static [u8] = Box::leak(packed_bytes.clone().into_boxed_slice());
            let (plain_view, packed_view) = (view(stored), view(packed));
            let slow = kernel_on(dtype, lanes).unwrap();
            for n in [1, 5, 11] {
                let x: Vec<f32> = (0..n * len).map(|_| rng.unit() * 3.0).collect();
                let mut xq = super::QuantX::default();
                xq.quantize(&x, n, len, super::unit_of(dtype));
                for (base, out_dim) in [(0, 40), (48, 32), (40, 13)] {
                    let case = format!(
                        "{} {}, {n} tokens, rows {base}+{out_dim}",
                        dtype.name(),
                        lanes.name()
                    );
                    let want_rows = super::Rows::new(&plain_view, base, 1, false).unwrap();
                    let got_rows = super::Rows::new(&packed_view, base, 1, true).unwrap();
                    let (mut want, mut got) = (vec![0f32; n * out_dim], vec![0f32; n * out_dim]);
                    slow(&want_rows, 0..out_dim, &xq, &mut want);
                    fast(&got_rows, 0..out_dim, &xq, &mut got);
                    // Rows past the last whole group are done a row at a time when stored
                    // as in the file: the same integers, scaled in another order.
                    let whole = out_dim / 8 * 8 * n;
                    let same = want[..whole]
                        .iter()
                        .zip(&got)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{case}: packed products differ");
                    let size = want.iter().fold(1f32, |m, v| m.max(v.abs()));
                    for (a, b) in want[whole..].iter().zip(&got[whole..]) {
                        assert!((a - b).abs() <= 1e-4 * size, "{case}: {a} vs {b}");
                    }
                }
                assert!(
                    super::Rows::new(&packed_view, 3, 1, true).is_none()
                        && super::Rows::new(&packed_view, 0, 2, true).is_none(),
                    "packed rows are read from a group's start, one after another"
                );
                // A strided view of packed rows: the reference path on the unpacked bytes.
                let l = lin(rows, len, 1, 2, 1);
                let packed_matrix = Matrix {
                    view: packed_view.clone(),
                    turn: Some(turn),
                };
                let plain_matrix = Matrix {
                    view: plain_view.clone(),
                    turn: None,
                };
                let out_dim = l.w.out_dim;
                let (mut want, mut got) = (vec![0f32; n * out_dim], vec![0f32; n * out_dim]);
                linear(&x, n, &plain_matrix, &l, None, &mut want, None).unwrap();
                let mut scratch = Scratch::default();
                linear(
                    &x,
                    n,
                    &packed_matrix,
                    &l,
                    None,
                    &mut got,
                    Some(&mut scratch),
                )
                .unwrap();
                assert_eq!(want, got, "{} strided view of packed rows", dtype.name());
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if super::x86::has_avx2() {
        assert!(tested >= 6, "packed kernels tested: {tested}");
    }
}

#[test]
fn mlx_affine_packs_match_the_reference() {
    let mut rng = Rng(11);
    let (rows, len) = (29, 256);
    for (bits, group, scale_dtype) in [
        (4, 64, DType::BF16),
        (8, 32, DType::F16),
        (3, 64, DType::BF16),
        (6, 128, DType::F32),
        (2, 32, DType::BF16),
    ] {
        let weight = rng.bytes(rows * len * bits / 8);
        let groups = rows * len / group;
        let scalar = |v: f32| -> Vec<u8> {
            match scale_dtype {
                DType::BF16 => bf16::from_f32(v).to_le_bytes().to_vec(),
                DType::F16 => f16::from_f32(v).to_le_bytes().to_vec(),
                _ => v.to_le_bytes().to_vec(),
            }
        };
        let scales: Vec<u8> = (0..groups)
            .flat_map(|_| scalar(0.02 * rng.unit()))
            .collect();
        let biases: Vec<u8> = (0..groups).flat_map(|_| scalar(0.1 * rng.unit())).collect();
        let view = TensorView {
            name: "w",
            shape: vec![rows, len],
            dtype: DType::MlxAffine {
                bits: bits as u8,
                group: group as u16,
            },
            data: TensorData::MlxAffine {
                weight: &weight,
                scales: &scales,
                biases: &biases,
                scale_dtype,
            },
        };
        check(&view, &format!("mlx affine {bits}-bit, groups of {group}"));
    }
}

#[test]
fn mxfp4_packs_match_the_reference() {
    let mut rng = Rng(13);
    let (rows, len) = (2 * 29, 224);
    let blocks = rng.bytes(rows * len / 2);
    let scales: Vec<u8> = (0..rows * len / 32)
        .map(|_| 118 + (rng.next() % 12) as u8)
        .collect();
    let hf = TensorView {
        name: "w",
        shape: vec![2, 29, len],
        dtype: DType::HfMxfp4,
        data: TensorData::HfMxfp4 {
            blocks: &blocks,
            scales: &scales,
        },
    };
    check(&hf, "gpt-oss mxfp4");
    let mlx = TensorView {
        dtype: DType::MlxMxfp4,
        data: TensorData::MlxMxfp4 {
            weight: &blocks,
            scales: &scales,
        },
        ..hf.clone()
    };
    check(&mlx, "mlx mxfp4");
}

/// The AVX2 quantization of activations gives the scalar one's bits: every kernel, the
/// portable one included, reads the same blocks.
#[cfg(target_arch = "x86_64")]
#[test]
fn activations_quantize_alike_in_lanes_and_scalar() {
    if !super::x86::has_avx2() {
        eprintln!("SKIPPED: this processor has no AVX2");
        return;
    }
    let mut rng = Rng(5);
    let len = 32 * 9;
    let mut x: Vec<f32> = (0..len).map(|_| rng.unit() * 7.0).collect();
    // A block of zeros, one of ties (halves of a step), one with a single large value.
    x[32..64].fill(0.0);
    for (i, v) in x[64..96].iter_mut().enumerate() {
        *v = (i as f32 - 16.0) * 0.5;
    }
    x[100] = 1.0e6;
    let mut scalar = (
        vec![0i8; len],
        vec![0f32; len / 32],
        vec![0f32; len / 16],
        vec![0i32; len / 16],
    );
    let mut lanes = scalar.clone();
    let (q, d, s, n) = (&mut scalar.0, &mut scalar.1, &mut scalar.2, &mut scalar.3);
    super::quantize_row(&x, 32, q, d, s, n);
    let (q, d, s, n) = (&mut lanes.0, &mut lanes.1, &mut lanes.2, &mut lanes.3);
    // SAFETY: checked above that the processor has AVX2.
    unsafe { super::x86::quantize_row(&x, 32, q, d, s, n) };
    assert_eq!(scalar.0, lanes.0, "quantized values");
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&scalar.1), bits(&lanes.1), "block scales");
    assert_eq!(bits(&scalar.2), bits(&lanes.2), "sums of halves");
    assert_eq!(scalar.3, lanes.3, "integer sums of halves");
    let halves: Vec<i32> = scalar
        .0
        .chunks(16)
        .map(|h| h.iter().map(|&q| q as i32).sum())
        .collect();
    assert_eq!(
        scalar.3, halves,
        "integer sums are the quantized values' sums"
    );
    // A block with an infinity (its scale becomes infinite, every step a NaN) and one with a
    // NaN: whatever values each path stores, its integer sums are theirs (the Q6_K products
    // multiply them, and must not overflow).
    x[130] = f32::INFINITY;
    x[170] = f32::NAN;
    for lanes_path in [false, true] {
        let (mut q, mut d, mut s, mut n) = (
            vec![0i8; len],
            vec![0f32; len / 32],
            vec![0f32; len / 16],
            vec![0i32; len / 16],
        );
        if lanes_path {
            // SAFETY: checked above that the processor has AVX2.
            unsafe { super::x86::quantize_row(&x, 32, &mut q, &mut d, &mut s, &mut n) };
        } else {
            super::quantize_row(&x, 32, &mut q, &mut d, &mut s, &mut n);
        }
        let halves: Vec<i32> = q
            .chunks(16)
            .map(|h| h.iter().map(|&q| q as i32).sum())
            .collect();
        assert_eq!(n, halves, "sums of stored values, lanes: {lanes_path}");
    }
}

/// `QuantX::s32` holds each 32-value block's two scaled half sums added, and
/// `QuantX::q6_offsets` each half's `−32·Σq`, for every token.
#[test]
fn block_sums_add_the_halves() {
    let mut rng = Rng(9);
    let (n, len) = (3, 32 * 5);
    let x: Vec<f32> = (0..n * len).map(|_| rng.unit() * 3.0).collect();
    let mut xq = super::QuantX::default();
    xq.quantize(&x, n, len, 32);
    assert_eq!(xq.s32.len(), n * len / 32);
    for (b, &s) in xq.s32.iter().enumerate() {
        assert_eq!(
            s.to_bits(),
            (xq.s[2 * b] + xq.s[2 * b + 1]).to_bits(),
            "block {b}"
        );
        let q: i32 = xq.q[32 * b..32 * b + 32].iter().map(|&q| q as i32).sum();
        assert!(
            (s - xq.d[b] * q as f32).abs() <= 1e-5 * (1.0 + s.abs()),
            "block {b}"
        );
    }
    assert_eq!(xq.q6_offsets.len(), n * len / 16);
    for (h, &o) in xq.q6_offsets.iter().enumerate() {
        let q: i32 = xq.q[16 * h..16 * h + 16].iter().map(|&q| q as i32).sum();
        assert_eq!(o, -32 * q, "half {h}");
    }
}
