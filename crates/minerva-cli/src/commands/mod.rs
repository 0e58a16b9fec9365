//! One module per subcommand; each has clap `Args` and a `run` returning a user-facing error.

pub mod chat;
pub mod info;
pub mod run;
pub mod score;
pub mod template;
pub mod tokenize;
