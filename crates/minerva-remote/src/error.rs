//! What can go wrong with a remote engine, in words a user can act on.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum RemoteError {
    /// An address or a key that cannot be used as given.
    #[error("{0}")]
    Invalid(String),
    /// This machine could not start the HTTP client or its reading thread.
    #[error("{0}")]
    Client(String),
    /// The engine could not be connected to (refused, unknown host, connect timeout).
    #[error(
        "cannot reach the engine at {url} ({reason}): check that it is running and that the \
         address is right"
    )]
    Unreachable { url: String, reason: String },
    /// The engine answered 401 or 403; `sent` tells whether a key was sent at all.
    #[error("the engine at {url} {}", key_advice(*.sent))]
    Key { url: String, sent: bool },
    /// The engine does not serve the model asked for.
    #[error("the engine at {url} has no model `{model}`: pick one of the models it lists")]
    NoModel { url: String, model: String },
    /// Anything else the engine did wrong: another error status (with the server's own
    /// message), a malformed stream, an error sent mid-stream.
    #[error("the engine at {url} {message}")]
    Failed { url: String, message: String },
}

fn key_advice(sent: bool) -> &'static str {
    if sent {
        "refused the API key: check the key"
    } else {
        "wants an API key: add one"
    }
}

pub type Result<T, E = RemoteError> = std::result::Result<T, E>;
