//! GGUF reader (versions 2 and 3).

use crate::checkpoint::Checkpoint;
use crate::error::{FormatError, Result};
use std::path::Path;

/// Opens one GGUF file, or the first of a split set (`*-00001-of-0000N.gguf`).
pub fn open(path: &Path) -> Result<Checkpoint> {
    Err(FormatError::unsupported(path, "GGUF reading"))
}
