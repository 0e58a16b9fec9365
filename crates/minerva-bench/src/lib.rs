//! The format comparison benchmark's measurements. [`quality`] compares one format's next-token
//! distributions with a reference format's over [`BENCH_TEXT`], a text of prose, code, tables
//! and numbers written for this project; [`compare`] runs a comparison, each measurement in
//! a fresh process ([`child`] runs [`measure`]), and remote engines beside the formats from this
//! process ([`remote`], their quality by [`agreement`]); [`report`] holds its figures as JSON
//! (with a JSON Schema), [`tables`] writes them as Markdown and CSV, [`html`] as a page of
//! charts ([`svg`]), and [`view`] gives front ends the table, charts and verdicts.

pub mod agreement;
pub mod child;
pub mod compare;
pub mod driver_memory;
pub mod figures;
pub mod html;
pub mod measure;
pub mod quality;
pub mod remote;
pub mod report;
pub mod svg;
pub mod tables;
pub mod view;

/// The fixed text quality is measured on.
pub const BENCH_TEXT: &str = include_str!("bench_text.txt");
