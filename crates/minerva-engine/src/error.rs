//! The engine's error type.

use minerva_formats::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The checkpoint lacks a tensor the architecture needs, or holds one of the wrong shape.
    #[error("{model}: {what}")]
    Weights { model: String, what: String },
    /// The conversation does not fit the context length chosen at load.
    #[error(
        "context full: {needed} tokens needed, the context holds {ctx} (load with a larger --ctx)"
    )]
    ContextFull { ctx: usize, needed: usize },
    #[error("{0}")]
    Backend(String),
    #[error("{0}")]
    Invalid(String),
    /// The caller asked to stop (a load cancelled from its progress callback).
    #[error("cancelled")]
    Cancelled,
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
