//! Atomic output: a model is written under a temporary name beside its target and renamed into
//! place only when complete, so an error or a crash never leaves a half-written model under the
//! final name. Dropping an uncommitted output removes the temporary.

use crate::error::{FormatError, Result};
use std::path::{Path, PathBuf};

pub struct AtomicOutput {
    target: PathBuf,
    tmp: PathBuf,
    is_dir: bool,
    committed: bool,
}

impl AtomicOutput {
    fn new(target: &Path, is_dir: bool) -> Result<Self> {
        if target.exists() {
            return Err(FormatError::io(
                target,
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "already exists; choose another output path",
                ),
            ));
        }
        let name = target.file_name().ok_or_else(|| {
            FormatError::io(
                target,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "output path has no file name",
                ),
            )
        })?;
        let parent = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|e| FormatError::io(parent, e))?;
        let tmp = parent.join(format!(
            ".{}.partial-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        // A leftover from an earlier crash of a process with the same id.
        let _ = if tmp.is_dir() {
            std::fs::remove_dir_all(&tmp)
        } else {
            std::fs::remove_file(&tmp)
        };
        if is_dir {
            std::fs::create_dir(&tmp).map_err(|e| FormatError::io(&tmp, e))?;
        }
        Ok(AtomicOutput {
            target: target.to_path_buf(),
            tmp,
            is_dir,
            committed: false,
        })
    }

    /// A single output file (GGUF).
    pub fn file(target: &Path) -> Result<Self> {
        Self::new(target, false)
    }

    /// An output folder (SafeTensors and MLX models with their companions).
    pub fn dir(target: &Path) -> Result<Self> {
        Self::new(target, true)
    }

    /// Where to write now: the temporary file or folder.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Moves the finished output to its final name.
    pub fn commit(mut self) -> Result<PathBuf> {
        if self.target.exists() {
            return Err(FormatError::io(
                &self.target,
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "appeared while writing"),
            ));
        }
        std::fs::rename(&self.tmp, &self.target).map_err(|e| FormatError::io(&self.target, e))?;
        self.committed = true;
        Ok(self.target.clone())
    }
}

impl Drop for AtomicOutput {
    fn drop(&mut self) {
        if !self.committed {
            let _ = if self.is_dir {
                std::fs::remove_dir_all(&self.tmp)
            } else {
                std::fs::remove_file(&self.tmp)
            };
        }
    }
}
