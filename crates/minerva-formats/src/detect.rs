//! Format detection: from a file or a folder to an opened Checkpoint.

use crate::checkpoint::Checkpoint;
use crate::error::{FormatError, Result};
use std::path::Path;

pub fn open(path: &Path) -> Result<Checkpoint> {
    if path.extension().is_some_and(|e| e == "gguf") {
        return crate::gguf::open(path);
    }
    Err(FormatError::not_a_model(path, "no GGUF, SafeTensors or MLX model found"))
}
