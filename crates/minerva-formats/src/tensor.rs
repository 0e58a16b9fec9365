//! Zero-copy views of stored tensors: a name, a logical shape, a dtype and byte slices of the
//! memory map. Multi-buffer packs (MLX weight/scales/biases, gpt-oss blocks/scales) are one view.

use crate::dtype::DType;

/// Which buffers make up a stored tensor, borrowed from the memory map.
#[derive(Debug, Clone, Copy)]
pub enum TensorData<'a> {
    /// Elements or blocks, row-major, in the dtype's own layout.
    Plain(&'a [u8]),
    /// MLX affine: packed u32 words, and per-group scales and biases of `scale_dtype`.
    MlxAffine {
        weight: &'a [u8],
        scales: &'a [u8],
        biases: &'a [u8],
        scale_dtype: DType,
    },
    /// MLX mxfp4: packed u32 words and one u8 E8M0 scale per group of 32.
    MlxMxfp4 { weight: &'a [u8], scales: &'a [u8] },
    /// gpt-oss Hugging Face MXFP4: 16 bytes per 32 values, and one u8 E8M0 scale per 32 values.
    HfMxfp4 { blocks: &'a [u8], scales: &'a [u8] },
}

/// One logical tensor as stored.
///
/// `shape` is outermost first (PyTorch order, also for GGUF whose `ne` is reversed on reading);
/// the last dimension is the contiguous one, called the row. Quantized blocks and groups run
/// along the row.
#[derive(Debug, Clone)]
pub struct TensorView<'a> {
    pub name: &'a str,
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub data: TensorData<'a>,
}

impl<'a> TensorView<'a> {
    /// Number of logical elements.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Length of a row (the last dimension; 1 for a scalar).
    pub fn row_len(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Number of rows: the product of all dimensions but the last.
    pub fn rows(&self) -> usize {
        let n = self.shape.len();
        if n == 0 {
            1
        } else {
            self.shape[..n - 1].iter().product()
        }
    }

    /// Total stored bytes over every buffer of the tensor.
    pub fn stored_bytes(&self) -> usize {
        match self.data {
            TensorData::Plain(b) => b.len(),
            TensorData::MlxAffine {
                weight,
                scales,
                biases,
                ..
            } => weight.len() + scales.len() + biases.len(),
            TensorData::MlxMxfp4 { weight, scales } => weight.len() + scales.len(),
            TensorData::HfMxfp4 { blocks, scales } => blocks.len() + scales.len(),
        }
    }
}
