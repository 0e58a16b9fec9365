//! One module per subcommand; each has clap `Args` and a `run` returning a user-facing error.

pub mod info;
