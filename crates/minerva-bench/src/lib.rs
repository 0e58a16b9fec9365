//! The format comparison benchmark's measurements. [`quality`] compares one format's next-token
//! distributions with a reference format's over [`BENCH_TEXT`], a text of prose, code, tables
//! and numbers written for this project; [`report`] holds the figures of a comparison and
//! writes them as JSON (with a JSON Schema), Markdown and CSV.

pub mod compare;
pub mod quality;
pub mod report;

/// The fixed text quality is measured on.
pub const BENCH_TEXT: &str = include_str!("bench_text.txt");
