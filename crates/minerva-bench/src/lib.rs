//! The format comparison benchmark's measurements. [`quality`] compares one format's next-token
//! distributions with a reference format's over [`BENCH_TEXT`], a text of prose, code, tables
//! and numbers written for this project.

pub mod quality;

/// The fixed text quality is measured on.
pub const BENCH_TEXT: &str = include_str!("bench_text.txt");
