//! Qwen2: the llama layer with biases on q, k and v (`spec.qkv_bias`, read by the shared
//! attention map), RoPE by halves in every format.

use super::{dense_layer, LayerWeights, Loader};
use crate::error::Result;

pub fn layer(ld: &mut Loader, l: usize) -> Result<LayerWeights> {
    if !ld.spec.qkv_bias {
        return Err(ld.error("qwen2 expects biases on q, k and v (attention_bias)"));
    }
    dense_layer(ld, l)
}
