//! Every quantizer round-tripped through the crate's own decoders (`dequantize_rows`): random
//! rows with outliers are encoded, viewed as stored tensors and decoded, and the error must stay
//! within what the format's precision allows: bounds sit about 25% above the errors measured on
//! these rows (a layout mismatch gives errors near 100%).

use minerva_formats::quantize::{encode_rows, row_buffer_bytes, MLX_SCALE_DTYPE};
use minerva_formats::synth::rng::Rng;
use minerva_formats::{dequantize_rows, DType, TensorData, TensorView};

fn rows(n: usize, len: usize) -> Vec<f32> {
    let mut g = Rng::for_row(11, 22, 33);
    (0..n * len)
        .map(|i| {
            let v = g.normal() * 0.05;
            // An outlier now and then, as real weights have.
            if i % 97 == 0 {
                v * 8.0
            } else {
                v
            }
        })
        .collect()
}

fn round_trip(dtype: DType, x: &[f32], len: usize) -> Vec<f32> {
    let n = x.len() / len;
    let per_row = row_buffer_bytes(dtype, len).unwrap();
    let mut bufs: Vec<Vec<u8>> = per_row.iter().map(|b| vec![0u8; b * n]).collect();
    {
        let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        encode_rows(dtype, x, len, &mut views).unwrap();
    }
    let data = match dtype {
        DType::MlxAffine { .. } => TensorData::MlxAffine {
            weight: &bufs[0],
            scales: &bufs[1],
            biases: &bufs[2],
            scale_dtype: MLX_SCALE_DTYPE,
        },
        DType::MlxMxfp4 => TensorData::MlxMxfp4 {
            weight: &bufs[0],
            scales: &bufs[1],
        },
        _ => TensorData::Plain(&bufs[0]),
    };
    let view = TensorView {
        name: "t",
        shape: vec![n, len],
        dtype,
        data,
    };
    let mut out = vec![0f32; x.len()];
    // Decode in two pieces to exercise row offsets.
    let half = n / 2;
    dequantize_rows(&view, 0, half, &mut out[..half * len]).unwrap();
    dequantize_rows(&view, half, n - half, &mut out[half * len..]).unwrap();
    out
}

fn rel_rmse(q: &[f32], x: &[f32]) -> f64 {
    let e: f64 = q.iter().zip(x).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let r: f64 = x.iter().map(|b| (*b as f64).powi(2)).sum();
    (e / r).sqrt()
}

#[test]
fn every_quantizer_round_trips_through_the_decoders() {
    let len = 512;
    let x = rows(12, len);
    let cases: Vec<(DType, f64)> = vec![
        (DType::F32, 0.0),
        (DType::F16, 5e-4),
        (DType::BF16, 3e-3),
        (DType::Q8_0, 0.011),
        (DType::Q6_K, 0.032),
        (DType::Q5_0, 0.085),
        (DType::Q5_1, 0.058),
        (DType::Q5_K, 0.056),
        (DType::Q4_0, 0.17),
        (DType::Q4_1, 0.12),
        (DType::Q4_K, 0.11),
        (DType::MXFP4, 0.19),
        (DType::MlxMxfp4, 0.185),
        (DType::MlxAffine { bits: 8, group: 64 }, 0.0095),
        (DType::MlxAffine { bits: 6, group: 64 }, 0.037),
        (DType::MlxAffine { bits: 5, group: 32 }, 0.054),
        (
            DType::MlxAffine {
                bits: 4,
                group: 128,
            },
            0.2,
        ),
        (DType::MlxAffine { bits: 3, group: 64 }, 0.31),
        (DType::MlxAffine { bits: 2, group: 32 }, 0.45),
    ];
    for (dtype, bound) in cases {
        let e = rel_rmse(&round_trip(dtype, &x, len), &x);
        assert!(
            e <= bound,
            "{}: relative RMSE {e} above {bound}",
            dtype.name()
        );
        if dtype != DType::F32 {
            assert!(e > 0.0, "{}: lossless on random data?", dtype.name());
        }
    }
    assert_eq!(rel_rmse(&round_trip(DType::F32, &x, len), &x), 0.0);
}

#[test]
fn constant_and_zero_blocks_decode_exactly() {
    let len = 256;
    let mut x = vec![0f32; 2 * len];
    x[len..].fill(0.25);
    for dtype in [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::MXFP4,
        DType::MlxMxfp4,
        DType::MlxAffine { bits: 4, group: 64 },
    ] {
        let y = round_trip(dtype, &x, len);
        assert!(
            y[..len].iter().all(|v| *v == 0.0),
            "{}: zeros decode to {:?}",
            dtype.name(),
            &y[..4]
        );
        assert!(
            y[len..].iter().all(|v| (v - 0.25).abs() < 2e-3),
            "{}: 0.25 decodes to {:?}",
            dtype.name(),
            &y[len..len + 4]
        );
    }
}
