//! The subcommands of the `minerva` binary, one module each.

pub mod convert;
mod progress;
pub mod synth;
