//! Synthetic models: random weights at the exact shape of a real model, with a tokenizer of the
//! right vocabulary and a chat template, built as one canonical `Model` so that every format
//! written from one seed holds the same weights. Weights are scaled so activations stay finite
//! and non-degenerate through the whole network: matrices N(0, 1/fan_in), embeddings
//! N(0, 1/hidden), norm weights 1 + 0.05·N, small biases.

pub mod rng;
pub mod shapes;
pub mod tokenizer;

use crate::names::{Role, TensorId};
use crate::spec::Architecture;
use crate::write::model::{Companions, Model, ModelTensor, SharedRows};
use crate::write::safetensors::DEFAULT_SHARD_BYTES;
use rng::Rng;
use serde_json::{json, Value};
use shapes::Shape;
use std::sync::Arc;

/// How a tensor's values are drawn.
#[derive(Debug, Clone, Copy)]
enum Init {
    /// N(0, std²)
    Normal(f32),
    /// 1 + N(0, std²)
    AroundOne(f32),
}

fn tensor_key(id: TensorId) -> u64 {
    (id.role as u64) * 1_000_003 + id.layer.map_or(0, |l| l as u64 + 1) * 7 + id.bias as u64
}

fn rows(seed: u64, id: TensorId, row_len: usize, init: Init) -> SharedRows<'static> {
    let key = tensor_key(id);
    Arc::new(move |first, n, out: &mut [f32]| {
        for (r, o) in out.chunks_exact_mut(row_len).take(n).enumerate() {
            let mut g = Rng::for_row(seed, key, (first + r) as u64);
            match init {
                Init::Normal(s) => o.iter_mut().for_each(|v| *v = g.normal() * s),
                Init::AroundOne(s) => o.iter_mut().for_each(|v| *v = 1.0 + g.normal() * s),
            }
        }
        Ok(())
    })
}

fn get(c: &Value, k: &str) -> usize {
    c.get(k).and_then(Value::as_u64).unwrap_or(0) as usize
}

/// The tensor list of a shape: (id, canonical shape, init).
fn tensor_plan(shape: &Shape) -> Vec<(TensorId, Vec<usize>, Init)> {
    let c = &shape.config;
    let (hidden, layers, vocab) = (
        get(c, "hidden_size"),
        get(c, "num_hidden_layers"),
        get(c, "vocab_size"),
    );
    let (nh, nkv, ffn) = (
        get(c, "num_attention_heads"),
        get(c, "num_key_value_heads"),
        get(c, "intermediate_size"),
    );
    let hd = c
        .get("head_dim")
        .and_then(Value::as_u64)
        .map_or(hidden / nh, |v| v as usize);
    let experts = get(c, "num_local_experts");
    let bias = c
        .get("attention_bias")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let tied = c
        .get("tie_word_embeddings")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let m = |fan_in: usize| Init::Normal(1.0 / (fan_in as f32).sqrt());
    let (norm, small) = (Init::AroundOne(0.05), Init::Normal(0.02));
    let mut p = vec![(
        TensorId::global(Role::TokenEmbd),
        vec![vocab, hidden],
        m(hidden),
    )];
    for l in 0..layers {
        let id = |r| TensorId::layer(r, l);
        p.push((id(Role::AttnNorm), vec![hidden], norm));
        p.push((id(Role::AttnQ), vec![nh * hd, hidden], m(hidden)));
        p.push((id(Role::AttnK), vec![nkv * hd, hidden], m(hidden)));
        p.push((id(Role::AttnV), vec![nkv * hd, hidden], m(hidden)));
        p.push((id(Role::AttnO), vec![hidden, nh * hd], m(nh * hd)));
        if bias {
            for (r, n) in [
                (Role::AttnQ, nh * hd),
                (Role::AttnK, nkv * hd),
                (Role::AttnV, nkv * hd),
                (Role::AttnO, hidden),
            ] {
                p.push((TensorId::bias(r, l), vec![n], small));
            }
        }
        if shape.arch == Architecture::Qwen3 {
            p.push((id(Role::AttnQNorm), vec![hd], norm));
            p.push((id(Role::AttnKNorm), vec![hd], norm));
        }
        if shape.arch == Architecture::GptOss {
            p.push((id(Role::AttnSinks), vec![nh], Init::Normal(0.5)));
        }
        p.push((id(Role::FfnNorm), vec![hidden], norm));
        if experts == 0 {
            p.push((id(Role::FfnGate), vec![ffn, hidden], m(hidden)));
            p.push((id(Role::FfnUp), vec![ffn, hidden], m(hidden)));
            p.push((id(Role::FfnDown), vec![hidden, ffn], m(ffn)));
            continue;
        }
        p.push((id(Role::Router), vec![experts, hidden], m(hidden)));
        p.push((id(Role::ExpGate), vec![experts, ffn, hidden], m(hidden)));
        p.push((id(Role::ExpUp), vec![experts, ffn, hidden], m(hidden)));
        p.push((id(Role::ExpDown), vec![experts, hidden, ffn], m(ffn)));
        if shape.arch == Architecture::GptOss {
            p.push((TensorId::bias(Role::Router, l), vec![experts], small));
            p.push((TensorId::bias(Role::ExpGate, l), vec![experts, ffn], small));
            p.push((TensorId::bias(Role::ExpUp, l), vec![experts, ffn], small));
            p.push((
                TensorId::bias(Role::ExpDown, l),
                vec![experts, hidden],
                small,
            ));
        }
    }
    p.push((TensorId::global(Role::OutputNorm), vec![hidden], norm));
    if !tied {
        p.push((
            TensorId::global(Role::Output),
            vec![vocab, hidden],
            m(hidden),
        ));
    }
    p
}

/// A shape's model with weights drawn from `seed`.
pub fn model(shape: &Shape, seed: u64) -> Model<'static> {
    let tensors = tensor_plan(shape)
        .into_iter()
        .map(|(id, dims, init)| {
            let row_len = *dims.last().unwrap_or(&1);
            ModelTensor {
                id,
                shape: dims,
                rows: rows(seed, id, row_len, init),
                stored: None,
                gguf_order: false,
                chunk_rows: 1,
            }
        })
        .collect();
    let c = &shape.config;
    let vocab = get(c, "vocab_size");
    let tok = |key: &str| {
        let id = match c.get(key) {
            Some(Value::Array(a)) => a.first().and_then(Value::as_u64),
            Some(v) => v.as_u64(),
            None => None,
        };
        id.and_then(|i| shape.specials.iter().find(|s| s.0 as u64 == i))
            .map_or(Value::Null, |s| Value::String(s.1.clone()))
    };
    let tokenizer_config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tok("bos_token_id"),
        "eos_token": tok("eos_token_id"),
        "pad_token": tok("pad_token_id"),
        "add_bos_token": shape.bos_prefix.is_some(),
        "clean_up_tokenization_spaces": false,
        "model_max_length": c.get("max_position_embeddings").cloned().unwrap_or(Value::Null),
        "chat_template": shape.chat_template,
    });
    let mut generation = json!({"do_sample": false});
    for k in ["bos_token_id", "eos_token_id", "pad_token_id"] {
        if let Some(v) = c.get(k) {
            generation[k] = v.clone();
        }
    }
    Model {
        name: shape.name.to_string(),
        arch: shape.arch,
        config: shape.config.clone(),
        tensors,
        companions: Companions {
            tokenizer_json: Some(tokenizer::tokenizer_json(
                vocab,
                &shape.specials,
                shape.bos_prefix,
                seed,
            )),
            tokenizer_config: Some(tokenizer_config),
            chat_template: Some(shape.chat_template.to_string()),
            generation_config: Some(generation),
        },
        shard_bytes: DEFAULT_SHARD_BYTES,
    }
}
