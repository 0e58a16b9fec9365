//! Golden tests on the GPU backend: every fixture model against the reference logits and greedy
//! continuations, as on the CPU. With an f32 KV cache the GPU must meet the CPU's tolerance; with
//! the default f16 cache, whose rounding moves logits by a few 1e-3, a looser one. At most
//! two tests hold GPU devices at once (`TestSlot`).

mod golden_common;
mod gpu_common;

use golden_common::{check_on, prefill_agrees_with_decoding, TOL};
use gpu_common::TestSlot;
use minerva_engine::gpu::{GpuBackend, GpuError, GpuOptions};
use minerva_engine::model::DEFAULT_MAX_BATCH;
use minerva_formats::RopeScaling;

/// Logit tolerance with the f16 KV cache.
const TOL_F16_KV: f32 = 2e-2;

/// A GPU backend, or None after saying why (a failure when CI is set).
fn gpu(kv_f32: bool) -> Option<GpuBackend> {
    match GpuBackend::new(&GpuOptions {
        kv_f32,
        ..Default::default()
    }) {
        Ok(b) => Some(b),
        Err(e) => {
            let no_adapter = e
                .to_string()
                .contains(&GpuError::NoAdapter(String::new()).to_string());
            if std::env::var_os("CI").is_some() || !no_adapter {
                panic!("GPU backend unavailable: {e}");
            }
            eprintln!("SKIPPED: no GPU adapter ({e})");
            None
        }
    }
}

fn check_with(
    fixture: &str,
    max_batch: usize,
    kv_f32: bool,
    adjust: impl FnOnce(&mut minerva_formats::ModelSpec),
) {
    let _turn = TestSlot::take();
    let Some(b) = gpu(kv_f32) else { return };
    let tol = if kv_f32 { TOL } else { TOL_F16_KV };
    check_on(Box::new(b), fixture, max_batch, tol, adjust);
}

macro_rules! golden {
    ($($name:ident: $fixture:expr, $max_batch:expr, $kv_f32:expr;)*) => {
        $(
            #[test]
            fn $name() {
                check_with($fixture, $max_batch, $kv_f32, |_| {});
            }
        )*
    };
}

golden! {
    llama_f32: "llama/f32", DEFAULT_MAX_BATCH, true;
    llama_bf16: "llama/bf16", DEFAULT_MAX_BATCH, true;
    llama_f16: "llama/f16", DEFAULT_MAX_BATCH, true;
    llama_gguf_f32: "llama/gguf-f32", DEFAULT_MAX_BATCH, true;
    llama_gguf_q8_0: "llama/gguf-q8_0", DEFAULT_MAX_BATCH, true;
    llama_gguf_q4_0: "llama/gguf-q4_0", DEFAULT_MAX_BATCH, true;
    llama_mlx_4bit: "llama/mlx-4bit", DEFAULT_MAX_BATCH, true;
    qwen3_f32: "qwen3/f32", DEFAULT_MAX_BATCH, true;
    qwen3_gguf_q8_0: "qwen3/gguf-q8_0", DEFAULT_MAX_BATCH, true;
    mixtral_f32: "mixtral/f32", DEFAULT_MAX_BATCH, true;
    mixtral_gguf_q4_k_m: "mixtral/gguf-q4_k_m", DEFAULT_MAX_BATCH, true;
    gpt_oss_f32: "gpt_oss/f32", DEFAULT_MAX_BATCH, true;
    gpt_oss_gguf_mxfp4_moe: "gpt_oss/gguf-mxfp4_moe", DEFAULT_MAX_BATCH, true;
    gpt_oss_f32_chunked_prefill: "gpt_oss/f32", 3, true;
    f16_kv_llama_gguf_q4_0: "llama/gguf-q4_0", DEFAULT_MAX_BATCH, false;
    f16_kv_llama_mlx_4bit: "llama/mlx-4bit", DEFAULT_MAX_BATCH, false;
    f16_kv_qwen3_gguf_q8_0: "qwen3/gguf-q8_0", DEFAULT_MAX_BATCH, false;
    f16_kv_mixtral_gguf_q4_k_m: "mixtral/gguf-q4_k_m", DEFAULT_MAX_BATCH, false;
    f16_kv_gpt_oss_gguf_mxfp4_moe: "gpt_oss/gguf-mxfp4_moe", DEFAULT_MAX_BATCH, false;
    f16_kv_gpt_oss_f32_chunked_prefill: "gpt_oss/f32", 3, false;
}

#[test]
fn gpt_oss_f32_yarn_truncated() {
    check_with(
        "gpt_oss/f32",
        DEFAULT_MAX_BATCH,
        true,
        |spec| match &mut spec.rope.scaling {
            RopeScaling::Yarn { truncate, .. } => *truncate = true,
            other => panic!("gpt-oss spec without YaRN: {other:?}"),
        },
    );
}

/// Prefill (tiled matmul, attention over many queries) against decode (matvec, one query).
#[test]
fn long_prefill_agrees_with_token_by_token_decoding() {
    let _turn = TestSlot::take();
    if gpu(true).is_none() {
        return;
    }
    prefill_agrees_with_decoding(|| Box::new(gpu(true).unwrap()), 1e-4);
}
