//! ModelSpec from config.json: every fixture folder against the values in the fixtures README's
//! table (written out by hand here), and configs of the other architectures and older rope keys.

use minerva_formats::spec::{
    Activation, Architecture, ModelSpec, MoeSpec, RopeScaling, RopeSpec, RopeStyle,
};
use minerva_formats::{Checkpoint, FormatError};
use serde_json::json;

mod st_common;
use st_common::{fixtures, write_safetensors, Raw};

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
            theta: 10000.0,
            style: RopeStyle::Halves,
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

fn qwen3() -> ModelSpec {
    ModelSpec {
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
        eos_token_ids: vec![2],
        pad_token_id: Some(0),
        ..llama()
    }
}

fn mixtral() -> ModelSpec {
    ModelSpec {
        architecture: Architecture::Mixtral,
        n_layers: 1,
        head_dim: 32,
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
            style: RopeStyle::Halves,
            dim: 32,
            scaling: RopeScaling::None,
        },
        sliding_layers: vec![false],
        ..llama()
    }
}

fn gpt_oss() -> ModelSpec {
    ModelSpec {
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
            theta: 150000.0,
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
    }
}

#[test]
fn fixture_folders_match_the_readme_table() {
    for (folder, want) in [
        ("llama/f32", llama()),
        ("llama/bf16", llama()),
        ("llama/f16", llama()),
        ("llama/mlx-4bit", llama()),
        ("qwen3/f32", qwen3()),
        ("mixtral/f32", mixtral()),
        ("gpt_oss/f32", gpt_oss()),
    ] {
        let spec = Checkpoint::open(fixtures().join(folder))
            .unwrap()
            .spec()
            .unwrap();
        assert_eq!(spec, want, "{folder}");
    }
}

/// The spec of a folder holding `config` and a model.safetensors with the embedding and one
/// norm per layer that the config states (the spec is checked against the tensors present).
fn spec(config: serde_json::Value) -> Result<ModelSpec, FormatError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let count = |k: &str| config[k].as_u64().unwrap_or(1) as usize;
    let (vocab, hidden) = (count("vocab_size"), count("hidden_size"));
    let names: Vec<String> = (0..count("num_hidden_layers"))
        .map(|l| format!("model.layers.{l}.input_layernorm.weight"))
        .collect();
    let mut tensors: Vec<Raw> = names
        .iter()
        .map(|name| Raw {
            name,
            dtype: "F32",
            shape: vec![1],
            data: vec![0; 4],
        })
        .collect();
    tensors.push(Raw {
        name: "model.embed_tokens.weight",
        dtype: "F16",
        shape: vec![vocab, hidden],
        data: vec![0; vocab * hidden * 2],
    });
    write_safetensors(&dir.path().join("model.safetensors"), &tensors);
    Checkpoint::open(dir.path()).unwrap().spec()
}

fn base(model_type: &str) -> serde_json::Value {
    json!({
        "model_type": model_type, "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 4, "intermediate_size": 1024, "vocab_size": 1000, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 4096, "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2
    })
}

fn with(mut v: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[test]
fn mistral_slides_on_every_layer() {
    let s = spec(with(
        base("mistral"),
        json!({"sliding_window": 4096, "head_dim": null}),
    ))
    .unwrap();
    assert_eq!(s.architecture, Architecture::Mistral);
    assert_eq!(s.head_dim, 64);
    assert_eq!(
        (s.sliding_window, s.sliding_layers),
        (Some(4096), vec![true; 4])
    );
    let s = spec(with(base("mistral"), json!({"sliding_window": null}))).unwrap();
    assert_eq!((s.sliding_window, s.sliding_layers), (None, vec![false; 4]));
}

#[test]
fn qwen2_biases_and_window_layers() {
    let s = spec(with(base("qwen2"), json!({"use_sliding_window": true, "sliding_window": 128, "max_window_layers": 2, "tie_word_embeddings": true, "eos_token_id": [2, 7]}))).unwrap();
    assert_eq!(s.architecture, Architecture::Qwen2);
    assert!(s.qkv_bias && !s.o_bias && !s.qk_norm && s.tie_embeddings);
    assert_eq!(
        (s.sliding_window, s.sliding_layers),
        (Some(128), vec![false, false, true, true])
    );
    assert_eq!(s.eos_token_ids, vec![2, 7]);
    let s = spec(with(
        base("qwen2"),
        json!({"use_sliding_window": false, "sliding_window": 128, "max_window_layers": 2}),
    ))
    .unwrap();
    assert_eq!((s.sliding_window, s.sliding_layers), (None, vec![false; 4]));
}

#[test]
fn qwen_moe_experts() {
    let s = spec(with(base("qwen3_moe"), json!({"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256, "norm_topk_prob": true, "head_dim": 128}))).unwrap();
    assert_eq!(s.architecture, Architecture::Qwen3Moe);
    assert!(s.qk_norm && !s.qkv_bias);
    assert_eq!(s.head_dim, 128);
    assert_eq!(s.ffn, 0);
    assert_eq!(
        s.moe,
        Some(MoeSpec {
            n_experts: 8,
            experts_per_token: 2,
            expert_ffn: 256,
            shared_expert_ffn: None,
            norm_topk_prob: true,
            softmax_after_topk: false
        })
    );
    let s = spec(with(base("qwen2_moe"), json!({"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "norm_topk_prob": false}))).unwrap();
    let moe = s.moe.unwrap();
    assert_eq!(
        (
            moe.n_experts,
            moe.experts_per_token,
            moe.expert_ffn,
            moe.shared_expert_ffn,
            moe.norm_topk_prob
        ),
        (60, 4, 1408, Some(5632), false)
    );
    assert!(s.qkv_bias);
}

#[test]
fn phi3_partial_rotary_and_window() {
    let s = spec(with(
        base("phi3"),
        json!({"sliding_window": 2047, "partial_rotary_factor": 0.5, "rope_scaling": null}),
    ))
    .unwrap();
    assert_eq!(s.architecture, Architecture::Phi3);
    assert_eq!(
        s.rope,
        RopeSpec {
            theta: 10000.0,
            style: RopeStyle::Halves,
            dim: 32,
            scaling: RopeScaling::None
        }
    );
    assert_eq!(
        (s.sliding_window, s.sliding_layers.clone()),
        (Some(2047), vec![true; 4])
    );
    assert!(!s.qkv_bias && s.activation == Activation::Silu);
    let err = spec(with(
        base("phi3"),
        json!({"rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}),
    ))
    .unwrap_err();
    assert!(
        matches!(err, FormatError::Unsupported { .. }) && err.to_string().contains("longrope"),
        "{err}"
    );
}

#[test]
fn older_rope_keys() {
    let s = spec(with(base("llama"), json!({"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}))).unwrap();
    assert_eq!(s.rope.theta, 500000.0);
    assert_eq!(
        s.rope.scaling,
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192
        }
    );
    let s = spec(with(
        base("llama"),
        json!({"rope_scaling": {"type": "linear", "factor": 2.0}}),
    ))
    .unwrap();
    assert_eq!(
        (s.rope.theta, s.rope.scaling),
        (10000.0, RopeScaling::Linear { factor: 2.0 })
    );
    // YaRN without `truncate`: rounded correction range, except for gpt-oss.
    let yarn = json!({"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024, "attention_factor": 1.2}});
    let s = spec(with(base("qwen2"), yarn.clone())).unwrap();
    assert_eq!(
        s.rope.scaling,
        RopeScaling::Yarn {
            factor: 4.0,
            original_max_position: 1024,
            beta_fast: 32.0,
            beta_slow: 1.0,
            truncate: true,
            attention_factor: Some(1.2)
        }
    );
    let oss = with(
        base("gpt_oss"),
        json!({"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 128}),
    );
    let s = spec(with(oss.clone(), yarn)).unwrap();
    assert!(matches!(
        s.rope.scaling,
        RopeScaling::Yarn {
            truncate: false,
            ..
        }
    ));
    // gpt-oss without layer_types: even layers slide.
    assert_eq!(s.sliding_layers, vec![true, false, true, false]);
    let s = spec(with(oss, json!({"rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "original_max_position_embeddings": 4096, "truncate": true}}))).unwrap();
    assert_eq!(s.rope.theta, 150000.0);
    assert!(matches!(
        s.rope.scaling,
        RopeScaling::Yarn {
            truncate: true,
            factor: 32.0,
            ..
        }
    ));
}

#[test]
fn unknown_and_broken_configs() {
    let err = spec(with(base("xyz"), json!({}))).unwrap_err();
    assert!(matches!(err, FormatError::Unsupported { .. }), "{err}");
    assert!(
        err.to_string().contains("config.json") && err.to_string().contains("architecture 'xyz'"),
        "{err}"
    );
    let err = spec(with(base("llama"), json!({"num_attention_heads": "eight"})))
        .unwrap_err()
        .to_string();
    assert!(err.contains("num_attention_heads"), "{err}");
    let mut missing = base("llama");
    missing.as_object_mut().unwrap().remove("hidden_size");
    assert!(spec(missing)
        .unwrap_err()
        .to_string()
        .contains("hidden_size"));
    let err = spec(with(
        base("llama"),
        json!({"layer_types": ["full_attention"]}),
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("layer_types"), "{err}");
}
