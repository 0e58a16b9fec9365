//! Opening a model and reading its spec: the cost before any tensor data is touched.

use criterion::{criterion_group, criterion_main, Criterion};
use minerva_formats::Checkpoint;
use std::hint::black_box;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures"))
}

fn open_and_spec(c: &mut Criterion) {
    let models = [
        ("gguf-q4_0", "llama/gguf-q4_0/llama-Q4_0.gguf"),
        ("safetensors-f32", "llama/f32"),
        ("mlx-4bit", "llama/mlx-4bit"),
        (
            "gguf-mxfp4-moe",
            "gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf",
        ),
    ];
    let mut group = c.benchmark_group("open+spec");
    for (name, rel) in models {
        let path = fixtures().join(rel);
        group.bench_function(name, |b| {
            b.iter(|| {
                let ckpt = Checkpoint::open(black_box(&path)).expect("fixture opens");
                black_box(ckpt.spec().expect("fixture spec"))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, open_and_spec);
criterion_main!(benches);
