//! Qwen3: the llama layer with a per-head RMSNorm of q and k before RoPE (`self_attn.q_norm`,
//! `attn_q_norm`); tied embeddings are common and handled by the shared output mapping.

use super::{dense_layer, LayerWeights, Loader};
use crate::error::Result;

pub fn layer(ld: &mut Loader, l: usize) -> Result<LayerWeights> {
    if !ld.spec.qk_norm {
        return Err(ld.error("qwen3 expects per-head q/k norms"));
    }
    dense_layer(ld, l)
}
