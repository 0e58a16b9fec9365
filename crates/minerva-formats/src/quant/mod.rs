//! Block decoders, one module per family of stored quantization.

pub mod ggml;
pub mod mlx;
pub mod mxfp4;
