//! ModelSpec from GGUF metadata keys.

use super::ModelSpec;
use crate::error::{FormatError, Result};
use crate::metadata::Metadata;
use std::path::Path;

pub fn from_metadata(md: &Metadata, path: &Path) -> Result<ModelSpec> {
    let _ = md;
    Err(FormatError::unsupported(path, "GGUF metadata reading"))
}
