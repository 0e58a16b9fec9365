//! The error type of the text crate: every variant says which file or model part it is about.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Tokenizer or template data that is not valid (`origin` names the file or metadata).
    #[error("{origin}: {what}")]
    Malformed { origin: String, what: String },
    /// Valid data that uses something this crate does not support.
    #[error("{origin}: unsupported: {what}")]
    Unsupported { origin: String, what: String },
    /// A model folder or file without the data asked for.
    #[error("{origin}: {what}")]
    Missing { origin: String, what: String },
    /// Encoding or decoding failed inside the tokenizer.
    #[error("tokenizer: {0}")]
    Tokenize(String),
    /// A chat template failed to compile or render (raised, looped, used an unknown name).
    #[error("chat template ({origin}): {what}")]
    Template { origin: String, what: String },
}

impl TextError {
    pub fn malformed(origin: impl std::fmt::Display, what: impl Into<String>) -> Self {
        TextError::Malformed {
            origin: origin.to_string(),
            what: what.into(),
        }
    }
    pub fn unsupported(origin: impl std::fmt::Display, what: impl Into<String>) -> Self {
        TextError::Unsupported {
            origin: origin.to_string(),
            what: what.into(),
        }
    }
    pub fn missing(origin: impl std::fmt::Display, what: impl Into<String>) -> Self {
        TextError::Missing {
            origin: origin.to_string(),
            what: what.into(),
        }
    }
}

pub type Result<T, E = TextError> = std::result::Result<T, E>;
