//! Tokenizing and detokenizing the bench text (about 1,100 words of prose, code and numbers)
//! with the tokenizers of the fixture models: GGUF's own vocabulary and a tokenizer.json.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use minerva_formats::Checkpoint;
use minerva_text::Tokenizer;
use std::hint::black_box;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures"))
}

fn tokenizer(c: &mut Criterion) {
    let text = minerva_bench::BENCH_TEXT;
    let mut group = c.benchmark_group("tokenizer");
    group.throughput(Throughput::Bytes(text.len() as u64));
    for (name, rel) in [
        ("gguf vocabulary", "llama/gguf-q4_0/llama-Q4_0.gguf"),
        ("tokenizer.json", "llama/f32"),
    ] {
        let ckpt = Checkpoint::open(fixtures().join(rel)).expect("fixture opens");
        let tok = Tokenizer::from_checkpoint(&ckpt).expect("fixture tokenizer");
        let ids = tok.encode(text, false).expect("encodes");
        group.bench_function(BenchmarkId::new("encode", name), |b| {
            b.iter(|| black_box(tok.encode(black_box(text), false).expect("encodes")))
        });
        group.bench_function(BenchmarkId::new("decode", name), |b| {
            b.iter(|| black_box(tok.decode(black_box(&ids), false).expect("decodes")))
        });
    }
    group.finish();
}

criterion_group!(benches, tokenizer);
criterion_main!(benches);
