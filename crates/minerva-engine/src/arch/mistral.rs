//! Mistral: the llama layer with sliding-window attention; the window comes from the spec and
//! is applied by the attention op, so the weights map exactly as llama's.

use super::{dense_layer, LayerWeights, Loader};
use crate::error::Result;

pub fn layer(ld: &mut Loader, l: usize) -> Result<LayerWeights> {
    dense_layer(ld, l)
}
