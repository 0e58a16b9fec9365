//! Criterion benchmarks live beside this crate: `cargo bench -p minerva-benches`.
