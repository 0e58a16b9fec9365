//! ModelSpec from a Hugging Face / MLX config.json.

use super::ModelSpec;
use crate::error::{FormatError, Result};
use std::path::Path;

pub fn from_config(config: &serde_json::Value, path: &Path) -> Result<ModelSpec> {
    let _ = config;
    Err(FormatError::unsupported(path, "config.json reading"))
}
