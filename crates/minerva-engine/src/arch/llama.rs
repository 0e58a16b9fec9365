//! Llama: grouped-query attention, RMSNorm, SwiGLU FFN. GGUF `llama` files hold Q/K rows
//! permuted for interleaved RoPE; the spec's RoPE style (Interleaved) undoes that, so the
//! weights are used as stored.

use super::{dense_layer, LayerWeights, Loader};
use crate::error::Result;

pub fn layer(ld: &mut Loader, l: usize) -> Result<LayerWeights> {
    dense_layer(ld, l)
}
