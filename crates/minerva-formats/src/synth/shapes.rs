//! The shapes `minerva synth` can generate: real models' exact dimensions (and a few tiny ones
//! for tests), as Hugging Face config.json plus special tokens and a chat template.

use crate::spec::Architecture;
use serde_json::{json, Value};

pub struct Shape {
    pub name: &'static str,
    pub arch: Architecture,
    pub config: Value,
    /// (id, text) of special tokens.
    pub specials: Vec<(u32, String)>,
    /// Special token the tokenizer prepends, if any.
    pub bos_prefix: Option<&'static str>,
    pub chat_template: &'static str,
}

const LLAMA2_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";
const LLAMA3_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const HARMONY_TEMPLATE: &str = "{% for message in messages %}{{ '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start|>assistant' }}{% endif %}";

fn named(list: &[(u32, &str)]) -> Vec<(u32, String)> {
    list.iter().map(|(i, s)| (*i, s.to_string())).collect()
}

/// Special tokens in `first..last` (inclusive): the named ones, the rest reserved.
fn reserved_block(
    first: u32,
    last: u32,
    named_ids: &[(u32, &str)],
    reserved: impl Fn(u32) -> String,
) -> Vec<(u32, String)> {
    (first..=last)
        .map(|i| {
            (
                i,
                named_ids
                    .iter()
                    .find(|n| n.0 == i)
                    .map_or_else(|| reserved(i), |n| n.1.to_string()),
            )
        })
        .collect()
}

fn llama(
    name: &str,
    layers: usize,
    hidden: usize,
    heads: usize,
    kv: usize,
    ffn: usize,
    vocab: usize,
) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hidden / heads,
        "vocab_size": vocab, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false,
        "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16", "_name_or_path": name,
    })
}

fn gpt_oss(
    layers: usize,
    hidden: usize,
    heads: usize,
    kv: usize,
    experts: usize,
    top_k: usize,
    ffn: usize,
    vocab: usize,
    window: usize,
    factor: f64,
    original: usize,
) -> Value {
    let types: Vec<&str> = (0..layers)
        .map(|l| {
            if l % 2 == 0 {
                "sliding_attention"
            } else {
                "full_attention"
            }
        })
        .collect();
    let scaling = json!({"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false});
    let mut params = scaling.clone();
    params["rope_theta"] = json!(150000.0);
    json!({
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
        "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 64,
        "num_local_experts": experts, "num_experts_per_tok": top_k, "vocab_size": vocab,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "sliding_window": window, "layer_types": types,
        "rope_theta": 150000.0, "rope_scaling": scaling, "rope_parameters": params,
        "attention_bias": true, "swiglu_alpha": 1.702, "swiglu_limit": 7.0, "tie_word_embeddings": false,
        "hidden_act": "silu", "torch_dtype": "bfloat16",
    })
}

const GPT_OSS_NAMED: [(u32, &str); 9] = [
    (199998, "<|startoftext|>"),
    (199999, "<|endoftext|>"),
    (200002, "<|return|>"),
    (200003, "<|constrain|>"),
    (200005, "<|channel|>"),
    (200006, "<|start|>"),
    (200007, "<|end|>"),
    (200008, "<|message|>"),
    (200012, "<|call|>"),
];

/// Names `synth` accepts.
pub const NAMES: [&str; 8] = [
    "tinyllama-1.1b",
    "llama-3.2-1b",
    "qwen3-0.6b",
    "mixtral-small",
    "gpt-oss-20b",
    "tiny-llama",
    "tiny-qwen3",
    "tiny-gpt-oss",
];

pub fn shape(name: &str) -> Option<Shape> {
    let llama2_specials = named(&[(0, "<unk>"), (1, "<s>"), (2, "</s>")]);
    Some(match name {
        "tinyllama-1.1b" => Shape {
            name: "tinyllama-1.1b",
            arch: Architecture::Llama,
            config: llama(name, 22, 2048, 32, 4, 5632, 32000),
            specials: llama2_specials,
            bos_prefix: Some("<s>"),
            chat_template: LLAMA2_TEMPLATE,
        },
        "tiny-llama" => Shape {
            name: "tiny-llama",
            arch: Architecture::Llama,
            config: llama(name, 2, 256, 4, 2, 512, 384),
            specials: llama2_specials,
            bos_prefix: Some("<s>"),
            chat_template: LLAMA2_TEMPLATE,
        },
        "llama-3.2-1b" => {
            let mut c = llama(name, 16, 2048, 32, 8, 8192, 128256);
            c["architectures"] = json!(["LlamaForCausalLM"]);
            c["head_dim"] = json!(64);
            c["tie_word_embeddings"] = json!(true);
            c["rope_theta"] = json!(500000.0);
            c["rope_scaling"] = json!({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
            c["max_position_embeddings"] = json!(131072);
            c["bos_token_id"] = json!(128000);
            c["eos_token_id"] = json!([128001, 128008, 128009]);
            let named_ids = [
                (128000, "<|begin_of_text|>"),
                (128001, "<|end_of_text|>"),
                (128006, "<|start_header_id|>"),
                (128007, "<|end_header_id|>"),
                (128008, "<|eom_id|>"),
                (128009, "<|eot_id|>"),
            ];
            Shape {
                name: "llama-3.2-1b",
                arch: Architecture::Llama,
                config: c,
                specials: reserved_block(128000, 128255, &named_ids, |i| {
                    format!("<|reserved_special_token_{}|>", i - 128000)
                }),
                bos_prefix: Some("<|begin_of_text|>"),
                chat_template: LLAMA3_TEMPLATE,
            }
        }
        "qwen3-0.6b" | "tiny-qwen3" => {
            let tiny = name == "tiny-qwen3";
            let (layers, hidden, heads, kv, hd, ffn, vocab) = if tiny {
                (2, 256, 4, 2, 64, 512, 512)
            } else {
                (28, 1024, 16, 8, 128, 3072, 151936)
            };
            let base = if tiny { 300 } else { 151643 };
            let c = json!({
                "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
                "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
                "vocab_size": vocab, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0, "tie_word_embeddings": true, "attention_bias": false,
                "hidden_act": "silu", "bos_token_id": base, "eos_token_id": base + 2, "torch_dtype": "bfloat16",
            });
            Shape {
                name: if tiny { "tiny-qwen3" } else { "qwen3-0.6b" },
                arch: Architecture::Qwen3,
                config: c,
                specials: named(&[
                    (base, "<|endoftext|>"),
                    (base + 1, "<|im_start|>"),
                    (base + 2, "<|im_end|>"),
                ]),
                bos_prefix: None,
                chat_template: CHATML_TEMPLATE,
            }
        }
        "mixtral-small" => {
            let mut c = llama(name, 8, 1024, 16, 4, 2816, 32000);
            c["architectures"] = json!(["MixtralForCausalLM"]);
            c["model_type"] = json!("mixtral");
            c["num_local_experts"] = json!(8);
            c["num_experts_per_tok"] = json!(2);
            c["rope_theta"] = json!(1000000.0);
            c["max_position_embeddings"] = json!(32768);
            Shape {
                name: "mixtral-small",
                arch: Architecture::Mixtral,
                config: c,
                specials: llama2_specials,
                bos_prefix: Some("<s>"),
                chat_template: LLAMA2_TEMPLATE,
            }
        }
        "gpt-oss-20b" => {
            let mut c = gpt_oss(24, 2880, 64, 8, 32, 4, 2880, 201088, 128, 32.0, 4096);
            c["bos_token_id"] = json!(199998);
            c["eos_token_id"] = json!(200002);
            c["pad_token_id"] = json!(199999);
            Shape {
                name: "gpt-oss-20b",
                arch: Architecture::GptOss,
                config: c,
                specials: reserved_block(199998, 201087, &GPT_OSS_NAMED, |i| {
                    format!("<|reserved_{i}|>")
                }),
                bos_prefix: None,
                chat_template: HARMONY_TEMPLATE,
            }
        }
        "tiny-gpt-oss" => {
            let mut c = gpt_oss(2, 256, 4, 2, 4, 2, 256, 512, 8, 8.0, 32);
            c["bos_token_id"] = json!(400);
            c["eos_token_id"] = json!(402);
            c["pad_token_id"] = json!(401);
            c["max_position_embeddings"] = json!(256);
            let names = [
                "<|startoftext|>",
                "<|endoftext|>",
                "<|return|>",
                "<|start|>",
                "<|end|>",
                "<|message|>",
                "<|channel|>",
                "<|call|>",
            ];
            Shape {
                name: "tiny-gpt-oss",
                arch: Architecture::GptOss,
                config: c,
                specials: names
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (400 + i as u32, s.to_string()))
                    .collect(),
                bos_prefix: None,
                chat_template: HARMONY_TEMPLATE,
            }
        }
        _ => return None,
    })
}
