//! Weight views on the CPU backend: strided, interleaved and input-major views of stored
//! tensors give the products of the matrices they describe.

use minerva_engine::backend::{Backend, Linear, MatView, VecRef};
use minerva_engine::CpuBackend;
use minerva_formats::{dequantize, Checkpoint};
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

/// `x · Wᵀ` with W given as rows.
fn reference(x: &[f32], n: usize, rows: &[Vec<f32>]) -> Vec<f32> {
    let k = rows[0].len();
    let mut out = vec![0f32; n * rows.len()];
    for t in 0..n {
        for (j, r) in rows.iter().enumerate() {
            out[t * rows.len() + j] = (0..k)
                .map(|i| x[t * k + i] as f64 * r[i] as f64)
                .sum::<f64>() as f32;
        }
    }
    out
}

fn inputs(n: usize, k: usize) -> Vec<f32> {
    (0..n * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
        .collect()
}

fn run(b: &mut CpuBackend, lin: &Linear, x: &[f32], n: usize) -> Vec<f32> {
    let xb = b.alloc(n, lin.in_dim()).unwrap();
    let ob = b.alloc(n, lin.out_dim()).unwrap();
    let ids: Vec<u32> = (0..n as u32).collect();
    // Load the inputs through an uploaded table: the trait has no host-to-buffer write.
    let table = b.upload_f32("x", &[n, lin.in_dim()], x).unwrap();
    b.embed(table, &ids, xb).unwrap();
    b.matmul(xb, lin, ob, n).unwrap();
    b.read_rows(ob, 0, n).unwrap()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    let d = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(d < 1e-4, "{what}: max abs diff {d}");
}

/// gpt-oss Hugging Face MXFP4 experts: `gate_up_proj` `[E, 2·I, hidden]` with gate at even and
/// up at odd rows, read through stride-2 views of the packed blocks.
#[test]
fn interleaved_mxfp4_rows() {
    let ckpt = Checkpoint::open(Path::new(FIXTURES).join("dequant/hf-mxfp4")).unwrap();
    let view = ckpt
        .tensor("model.layers.0.mlp.experts.gate_up_proj")
        .unwrap();
    assert_eq!(view.shape, [2, 128, 256]);
    let dense = dequantize(&view).unwrap();
    let mut b = CpuBackend::reference();
    let w = b.upload(&view).unwrap();
    let n = 3;
    let x = inputs(n, 256);
    for e in 0..2 {
        for (offset, what) in [(0, "gate"), (1, "up")] {
            let mv = MatView {
                weight: w,
                matrix: e,
                input_major: false,
                offset,
                stride: 2,
                out_dim: 64,
                in_dim: 256,
            };
            let rows: Vec<Vec<f32>> = (0..64)
                .map(|j| dense[(e * 128 + offset + 2 * j) * 256..][..256].to_vec())
                .collect();
            let got = run(&mut b, &Linear { w: mv, bias: None }, &x, n);
            assert_close(
                &got,
                &reference(&x, n, &rows),
                &format!("expert {e} {what}"),
            );
        }
    }
}

/// An input-major `[in, out]` matrix with a column stride and a bias row.
#[test]
fn input_major_strided_columns_with_bias() {
    let (k, cols, n) = (40, 10, 2);
    let stored: Vec<f32> = (0..2 * k * cols)
        .map(|i| ((i * 13 % 29) as f32 - 14.0) / 10.0)
        .collect();
    let bias: Vec<f32> = (0..2 * 5).map(|i| i as f32 * 0.5).collect();
    let mut b = CpuBackend::reference();
    let w = b.upload_f32("w", &[2, k, cols], &stored).unwrap();
    let bw = b.upload_f32("b", &[2, 5], &bias).unwrap();
    let x = inputs(n, k);
    // Matrix 1, columns 1, 3, 5, 7, 9; bias row 1.
    let mv = MatView {
        weight: w,
        matrix: 1,
        input_major: true,
        offset: 1,
        stride: 2,
        out_dim: 5,
        in_dim: k,
    };
    let lin = Linear {
        w: mv,
        bias: Some(VecRef {
            weight: bw,
            row: 1,
            len: 5,
        }),
    };
    let rows: Vec<Vec<f32>> = (0..5)
        .map(|j| {
            (0..k)
                .map(|i| stored[k * cols + i * cols + 1 + 2 * j])
                .collect()
        })
        .collect();
    let mut want = reference(&x, n, &rows);
    for t in 0..n {
        for j in 0..5 {
            want[t * 5 + j] += bias[5 + j];
        }
    }
    assert_close(&run(&mut b, &lin, &x, n), &want, "input-major");
}

/// A view that reaches past its tensor is refused, not read out of bounds.
#[test]
fn views_outside_the_tensor_are_errors() {
    let mut b = CpuBackend::reference();
    let w = b.upload_f32("w", &[4, 8], &[0.5; 32]).unwrap();
    let x = b.alloc(1, 8).unwrap();
    let o = b.alloc(1, 3).unwrap();
    let mv = MatView {
        weight: w,
        matrix: 0,
        input_major: false,
        offset: 1,
        stride: 2,
        out_dim: 3,
        in_dim: 8,
    };
    assert!(b.matmul(x, &Linear { w: mv, bias: None }, o, 1).is_err());
    let mv = MatView {
        matrix: 1,
        offset: 0,
        stride: 1,
        ..mv
    };
    assert!(b.matmul(x, &Linear { w: mv, bias: None }, o, 1).is_err());
}
