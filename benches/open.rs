//! Opening a model and reading its spec: the cost before any tensor data is touched.

use criterion::{criterion_group, criterion_main, Criterion};
use minerva_formats::synth::{self, shapes};
use minerva_formats::write::model::parse_target;
use minerva_formats::Checkpoint;
use std::hint::black_box;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures"))
}

/// A real-size model (tinyllama-1.1b shape, f16: 2.2 GB) written once by `synth` under
/// `target/bench-models`; opening it must cost about what the fixtures cost, because nothing
/// reads tensor data.
fn real_size_gguf() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target/bench-models"
    ));
    let path = dir.join("tinyllama-1.1b-F16.gguf");
    if !path.exists() {
        let shape = shapes::shape("tinyllama-1.1b").expect("known shape");
        let model = synth::model(&shape, 0);
        let target = parse_target(&model, "gguf", Some("f16"), None).expect("gguf f16 target");
        std::fs::create_dir_all(&dir).expect("bench model folder");
        eprintln!("writing {} once for the benchmark", path.display());
        model
            .write_sized(&target, &path, &|_| {}, &|_| {})
            .expect("synth writes");
    }
    path
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
    let big = ("gguf-f16-tinyllama-1.1b", real_size_gguf());
    let small = models.map(|(name, rel)| (name, fixtures().join(rel)));
    for (name, path) in small.into_iter().chain([big]) {
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
