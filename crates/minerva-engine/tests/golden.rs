//! Golden tests: every fixture model run on the CPU backend against the reference logits and
//! greedy continuations computed by transformers over the same (dequantized) weights, with
//! the f32 reference products (within `TOL`) and the default 8-bit ones (within `FAST_TOL`).

mod golden_common;

use golden_common::{check_on, prefill_agrees_with_decoding, FAST_TOL, FAST_TOL_MOE, TOL};
use minerva_engine::model::DEFAULT_MAX_BATCH;
use minerva_engine::CpuBackend;
use minerva_formats::RopeScaling;

fn check(fixture: &str, max_batch: usize) {
    check_with(fixture, max_batch, |_| {});
}

fn check_with(fixture: &str, max_batch: usize, adjust: impl Fn(&mut minerva_formats::ModelSpec)) {
    check_on(
        Box::new(CpuBackend::reference()),
        fixture,
        max_batch,
        TOL,
        &adjust,
    );
    let moe = fixture.starts_with("mixtral") || fixture.starts_with("gpt_oss");
    let fast_tol = if moe { FAST_TOL_MOE } else { FAST_TOL };
    check_on(
        Box::new(CpuBackend::new()),
        fixture,
        max_batch,
        fast_tol,
        &adjust,
    );
}

#[test]
fn llama_f32() {
    check("llama/f32", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_bf16() {
    check("llama/bf16", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_f16() {
    check("llama/f16", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_gguf_f32() {
    check("llama/gguf-f32", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_gguf_q8_0() {
    check("llama/gguf-q8_0", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_gguf_q4_0() {
    check("llama/gguf-q4_0", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_mlx_4bit() {
    check("llama/mlx-4bit", DEFAULT_MAX_BATCH);
}

#[test]
fn qwen3_f32() {
    check("qwen3/f32", DEFAULT_MAX_BATCH);
}

#[test]
fn qwen3_gguf_q8_0() {
    check("qwen3/gguf-q8_0", DEFAULT_MAX_BATCH);
}

#[test]
fn mixtral_f32() {
    check("mixtral/f32", DEFAULT_MAX_BATCH);
}

#[test]
fn mixtral_gguf_q4_k_m() {
    check("mixtral/gguf-q4_k_m", DEFAULT_MAX_BATCH);
}

#[test]
fn gpt_oss_f32() {
    check("gpt_oss/f32", DEFAULT_MAX_BATCH);
}

#[test]
fn gpt_oss_gguf_mxfp4_moe() {
    check("gpt_oss/gguf-mxfp4_moe", DEFAULT_MAX_BATCH);
}

/// Prefill in chunks of 3 tokens: chunk boundaries, and gpt-oss's sliding-window layer kept
/// as a ring shorter than the context, must not change any result.
#[test]
fn gpt_oss_f32_chunked_prefill() {
    check("gpt_oss/f32", 3);
}

/// YaRN with the correction range rounded (llama.cpp's and mlx-lm's variant) against the
/// reference computed by transformers with `truncate: true`.
#[test]
fn gpt_oss_f32_yarn_truncated() {
    check_with("gpt_oss/f32", DEFAULT_MAX_BATCH, |spec| {
        match &mut spec.rope.scaling {
            RopeScaling::Yarn { truncate, .. } => *truncate = true,
            other => panic!("gpt-oss spec without YaRN: {other:?}"),
        }
    });
}

/// A long prompt runs its products and attention on the thread pool, single decode steps on
/// the calling thread: both must give the same logits.
#[test]
fn long_prefill_agrees_with_token_by_token_decoding() {
    prefill_agrees_with_decoding(|| Box::new(CpuBackend::reference()), 1e-4);
    prefill_agrees_with_decoding(|| Box::new(CpuBackend::new()), 1e-4);
}
