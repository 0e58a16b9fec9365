//! The one error type of the formats crate: every variant names the file it is about.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file's bytes do not form a valid model file of its kind.
    #[error("{path}: {what}")]
    Malformed { path: PathBuf, what: String },
    /// The path holds no model, or an incomplete one.
    #[error("{path}: {what}")]
    NotAModel { path: PathBuf, what: String },
    /// A valid file that uses something this engine does not support.
    #[error("{path}: unsupported: {what}")]
    Unsupported { path: PathBuf, what: String },
}

impl FormatError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }
    pub fn malformed(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        FormatError::Malformed {
            path: path.into(),
            what: what.into(),
        }
    }
    pub fn not_a_model(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        FormatError::NotAModel {
            path: path.into(),
            what: what.into(),
        }
    }
    pub fn unsupported(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        FormatError::Unsupported {
            path: path.into(),
            what: what.into(),
        }
    }
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;
