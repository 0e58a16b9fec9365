//! Criterion benchmarks live beside this crate: `cargo bench -p minerva-benches`. This file
//! holds what they share: weights of any stored dtype made from random values by the
//! project's own quantizers, and the backends to run them on.

use minerva_engine::gpu::GpuOptions;
use minerva_engine::{Backend, CpuBackend, GpuBackend};
use minerva_formats::quantize::{encode_rows, row_buffer_bytes, MLX_SCALE_DTYPE};
use minerva_formats::{DType, TensorData, TensorView};

/// A `[rows, cols]` weight in `dtype`, as its buffers are stored.
pub struct Weight {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    bufs: Vec<Vec<u8>>,
}

impl Weight {
    /// Random values in [-0.5, 0.5), encoded by the quantizer of `dtype`.
    pub fn random(dtype: DType, rows: usize, cols: usize, seed: u64) -> Weight {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let values: Vec<f32> = (0..rows * cols)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        let per_row = row_buffer_bytes(dtype, cols).expect("a dtype with a row layout");
        let mut bufs: Vec<Vec<u8>> = per_row.iter().map(|b| vec![0u8; b * rows]).collect();
        let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
        encode_rows(dtype, &values, cols, &mut slices).expect("the quantizer encodes");
        Weight {
            dtype,
            rows,
            cols,
            bufs,
        }
    }

    /// The weight as the loaders hand it to a backend.
    pub fn view(&self) -> TensorView<'_> {
        self.view_as(vec![self.rows, self.cols])
    }

    /// The same bytes under another shape with the same rows: `[experts, out, in]` for a
    /// stack of `experts` matrices.
    pub fn view_as(&self, shape: Vec<usize>) -> TensorView<'_> {
        let data = match (self.dtype, self.bufs.as_slice()) {
            (DType::MlxAffine { .. }, [weight, scales, biases]) => TensorData::MlxAffine {
                weight,
                scales,
                biases,
                scale_dtype: MLX_SCALE_DTYPE,
            },
            (DType::MlxMxfp4, [weight, scales]) => TensorData::MlxMxfp4 { weight, scales },
            (_, [plain, ..]) => TensorData::Plain(plain),
            _ => TensorData::Plain(&[]),
        };
        TensorView {
            name: "w",
            shape,
            dtype: self.dtype,
            data,
        }
    }
}

/// The CPU backend, and the GPU backend when an adapter is found (a note says when not).
pub fn backends() -> Vec<(&'static str, Box<dyn Backend>)> {
    let mut all: Vec<(&'static str, Box<dyn Backend>)> = vec![("cpu", Box::new(CpuBackend::new()))];
    match GpuBackend::new(&GpuOptions::default()) {
        Ok(gpu) => {
            eprintln!("GPU: {}", gpu.name());
            all.push(("gpu", Box::new(gpu)));
        }
        Err(e) => eprintln!("no GPU adapter ({e}): the CPU only"),
    }
    all
}
