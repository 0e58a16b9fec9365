//! One module per subcommand; each has clap `Args` and a `run` returning a user-facing error.

mod backend;
pub mod bench;
pub mod chat;
pub mod convert;
pub mod info;
mod progress;
pub mod run;
pub mod score;
pub mod serve;
pub mod synth;
pub mod template;
pub mod tokenize;
