//! ModelSpec from each fixture GGUF's metadata equals the model's Hugging Face config
//! (values from tests/fixtures/README.md), with the GGUF-specific RoPE layout.

use minerva_formats::{
    gguf, Activation, Architecture, ModelSpec, MoeSpec, RopeScaling, RopeSpec, RopeStyle,
};
use std::path::PathBuf;

fn spec_of(rel: &str) -> ModelSpec {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures")).join(rel);
    gguf::open(&p).unwrap().spec().unwrap()
}

fn llama() -> ModelSpec {
    ModelSpec {
        architecture: Architecture::Llama,
        hidden_size: 256,
        n_layers: 2,
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: 32,
        vocab_size: 512,
        ffn: 512,
        moe: None,
        rope: RopeSpec {
            theta: 10_000.0,
            style: RopeStyle::Interleaved,
            dim: 32,
            scaling: RopeScaling::None,
        },
        norm_eps: 1e-5,
        sliding_window: None,
        sliding_layers: vec![false, false],
        attention_sinks: false,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        qk_norm: false,
        tie_embeddings: false,
        activation: Activation::Silu,
        context_length: 256,
        bos_token_id: Some(1),
        eos_token_ids: vec![2],
        pad_token_id: None,
    }
}

#[test]
fn llama_files() {
    for rel in [
        "llama/gguf-f32/llama-F32.gguf",
        "llama/gguf-q8_0/llama-Q8_0.gguf",
        "llama/gguf-q4_0/llama-Q4_0.gguf",
    ] {
        assert_eq!(spec_of(rel), llama(), "{rel}");
    }
}

#[test]
fn qwen3() {
    let want = ModelSpec {
        architecture: Architecture::Qwen3,
        head_dim: 64,
        ffn: 256,
        rope: RopeSpec {
            theta: 1_000_000.0,
            style: RopeStyle::Halves,
            dim: 64,
            scaling: RopeScaling::None,
        },
        norm_eps: 1e-6,
        qk_norm: true,
        tie_embeddings: true,
        bos_token_id: Some(0),
        pad_token_id: Some(0),
        ..llama()
    };
    assert_eq!(spec_of("qwen3/gguf-q8_0/qwen3-Q8_0.gguf"), want);
}

#[test]
fn mixtral() {
    let want = ModelSpec {
        architecture: Architecture::Mixtral,
        n_layers: 1,
        ffn: 0,
        moe: Some(MoeSpec {
            n_experts: 4,
            experts_per_token: 2,
            expert_ffn: 256,
            shared_expert_ffn: None,
            norm_topk_prob: true,
            softmax_after_topk: false,
        }),
        rope: RopeSpec {
            theta: 1_000_000.0,
            style: RopeStyle::Interleaved,
            dim: 32,
            scaling: RopeScaling::None,
        },
        sliding_layers: vec![false],
        ..llama()
    };
    assert_eq!(spec_of("mixtral/gguf-q4_k_m/mixtral-Q4_K_M.gguf"), want);
}

#[test]
fn gpt_oss() {
    let want = ModelSpec {
        architecture: Architecture::GptOss,
        n_heads: 4,
        head_dim: 64,
        ffn: 0,
        moe: Some(MoeSpec {
            n_experts: 4,
            experts_per_token: 2,
            expert_ffn: 64,
            shared_expert_ffn: None,
            norm_topk_prob: true,
            softmax_after_topk: true,
        }),
        rope: RopeSpec {
            theta: 150_000.0,
            style: RopeStyle::Halves,
            dim: 64,
            scaling: RopeScaling::Yarn {
                factor: 8.0,
                original_max_position: 32,
                beta_fast: 32.0,
                beta_slow: 1.0,
                truncate: false,
                attention_factor: None,
            },
        },
        sliding_window: Some(8),
        sliding_layers: vec![true, false],
        attention_sinks: true,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        activation: Activation::GptOssClamped {
            alpha: 1.702,
            limit: 7.0,
        },
        bos_token_id: Some(0),
        eos_token_ids: vec![6],
        pad_token_id: Some(1),
        ..llama()
    };
    assert_eq!(
        spec_of("gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf"),
        want
    );
}

/// The GGUF spec and the spec of the same model's Hugging Face folder (read by the other
/// reader) agree on everything but the RoPE pairing the GGUF converter chose.
#[test]
fn gguf_and_hf_folders_agree() {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"));
    for (gguf_rel, hf_rel) in [
        ("llama/gguf-q4_0/llama-Q4_0.gguf", "llama/f32"),
        ("qwen3/gguf-q8_0/qwen3-Q8_0.gguf", "qwen3/f32"),
        ("mixtral/gguf-q4_k_m/mixtral-Q4_K_M.gguf", "mixtral/f32"),
        (
            "gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf",
            "gpt_oss/f32",
        ),
    ] {
        let mut from_gguf = spec_of(gguf_rel);
        let from_hf = minerva_formats::Checkpoint::open(root.join(hf_rel))
            .unwrap()
            .spec()
            .unwrap();
        from_gguf.rope.style = from_hf.rope.style;
        assert_eq!(from_gguf, from_hf, "{gguf_rel} vs {hf_rel}");
    }
}
