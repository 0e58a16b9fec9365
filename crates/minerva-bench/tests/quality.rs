//! Quality on the tiny llama fixture in three formats, against its f32 SafeTensors copy: the
//! reference against itself drifts by nothing, the quantized copies by something, in the
//! order of their precision; perplexity checks against a direct computation.

use minerva_bench::quality::{compare, log_softmax, logits_over};
use minerva_bench::BENCH_TEXT;
use minerva_engine::{CpuBackend, Model};
use minerva_formats::Checkpoint;
use minerva_text::Tokenizer;
use std::path::Path;

fn fixture(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn logits(rel: &str, n: usize) -> (Vec<u32>, Vec<f32>, usize) {
    let ckpt = Checkpoint::open(fixture(rel)).unwrap();
    let tokenizer = Tokenizer::from_checkpoint(&ckpt).unwrap();
    let mut ids = tokenizer.encode(BENCH_TEXT, false).unwrap();
    ids.truncate(n);
    let mut model = Model::load(&ckpt, Box::new(CpuBackend::new())).unwrap();
    let vocab = model.spec.vocab_size;
    (
        ids.clone(),
        logits_over(&mut model, &ids, 64).unwrap(),
        vocab,
    )
}

#[test]
fn formats_drift_from_the_reference_in_the_order_of_their_precision() {
    // The fixture's context is 256 tokens.
    let n = 200;
    let (ids, reference, vocab) = logits("llama/f32", n);
    assert!(ids.len() == n, "the bench text gives {} tokens", ids.len());
    let same = compare(&reference, &reference, &ids, vocab);
    assert_eq!(
        (same.kl_mean, same.kl_max, same.top1_agreement),
        (Some(0.0), Some(0.0), 1.0)
    );
    let same_ppl = same.perplexity.unwrap();

    // Perplexity is exp of the mean negative log-likelihood of each next token.
    let nll: f64 = (0..n - 1)
        .map(|i| -log_softmax(&reference[i * vocab..(i + 1) * vocab])[ids[i + 1] as usize])
        .sum();
    assert!((same_ppl - (nll / (n - 1) as f64).exp()).abs() < 1e-9 * same_ppl);

    let mut kls = Vec::new();
    for rel in [
        "llama/f16",
        "llama/gguf-q8_0/llama-Q8_0.gguf",
        "llama/gguf-q4_0/llama-Q4_0.gguf",
    ] {
        let (ids2, l, _) = logits(rel, n);
        assert_eq!(ids2, ids, "{rel} tokenizes the text like the reference");
        let q = compare(&reference, &l, &ids, vocab);
        let (kl_mean, kl_max) = (q.kl_mean.unwrap(), q.kl_max.unwrap());
        assert!(
            kl_mean > 0.0 && kl_max >= kl_mean && q.perplexity.unwrap().is_finite(),
            "{rel}: {q:?}"
        );
        kls.push((rel, kl_mean));
    }
    assert!(kls[0].1 < kls[1].1 && kls[1].1 < kls[2].1, "{kls:?}");
}
