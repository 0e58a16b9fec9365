//! The service's errors, in words a user can act on.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum ServiceError {
    /// The file or folder is not a model Minerva can open (the message names it and why).
    #[error("{0}")]
    Model(String),
    /// Loading or running failed in the engine.
    #[error("{0}")]
    Engine(String),
    #[error("the load was cancelled")]
    Cancelled,
    #[error("database: {0}")]
    Database(String),
    #[error("no conversation {0}")]
    NoSuchConversation(i64),
    #[error("no message {0}")]
    NoSuchMessage(i64),
    #[error("no loaded model {0}")]
    NoSuchModel(u64),
    #[error("no model is loaded: load one first")]
    NothingLoaded,
    /// The conversation does not fit the context it was loaded with.
    #[error(
        "the conversation needs {needed} tokens but the context holds {ctx}: start a new \
         conversation, or load the model with a larger context"
    )]
    ContextFull { ctx: usize, needed: usize },
    #[error("{0}")]
    Invalid(String),
    /// A remote engine failed or could not be reached (the message says which and why).
    #[error("{0}")]
    Remote(String),
}

pub type Result<T, E = ServiceError> = std::result::Result<T, E>;

impl From<minerva_engine::EngineError> for ServiceError {
    fn from(e: minerva_engine::EngineError) -> Self {
        use minerva_engine::EngineError as E;
        match e {
            E::Format(f) => ServiceError::Model(f.to_string()),
            E::Weights { .. } => ServiceError::Model(e.to_string()),
            E::Cancelled => ServiceError::Cancelled,
            E::ContextFull { ctx, needed } => ServiceError::ContextFull { ctx, needed },
            other => ServiceError::Engine(other.to_string()),
        }
    }
}

impl From<minerva_remote::RemoteError> for ServiceError {
    fn from(e: minerva_remote::RemoteError) -> Self {
        match e {
            // An address or key the user gave: theirs to fix, as any invalid input.
            minerva_remote::RemoteError::Invalid(m) => ServiceError::Invalid(m),
            other => ServiceError::Remote(other.to_string()),
        }
    }
}

impl From<minerva_formats::FormatError> for ServiceError {
    fn from(e: minerva_formats::FormatError) -> Self {
        ServiceError::Model(e.to_string())
    }
}

impl From<minerva_text::TextError> for ServiceError {
    fn from(e: minerva_text::TextError) -> Self {
        ServiceError::Model(e.to_string())
    }
}
