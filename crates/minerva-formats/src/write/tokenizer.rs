//! Tokenizers beside the weights: GGUF `tokenizer.ggml.*` metadata from a byte-level BPE
//! tokenizer.json (llama.cpp's `gpt2` model), and a tokenizer.json rebuilt from that metadata.

use crate::error::{FormatError, Result};
use crate::metadata::{MetaValue, Metadata};
use serde_json::{json, Map, Value};
use std::path::Path;

/// llama.cpp token types.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// Special ids and flags that live in config files rather than in tokenizer.json.
#[derive(Debug, Clone, Default)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    pub add_bos: bool,
}

fn merges_of(model: &Value) -> Vec<String> {
    model["merges"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|x| match x {
                    Value::String(s) => Some(s.clone()),
                    Value::Array(p) if p.len() == 2 => {
                        Some(format!("{} {}", p[0].as_str()?, p[1].as_str()?))
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `tokenizer.ggml.*` (and `tokenizer.chat_template`) for a BPE tokenizer.json, padded to
/// `vocab_size` entries with `[PADn]` tokens as llama.cpp's converter does.
pub fn gguf_tokenizer_kv(
    tokenizer: &Value,
    vocab_size: usize,
    ids: &SpecialIds,
    chat_template: Option<&str>,
    path: &Path,
) -> Result<Vec<(String, MetaValue)>> {
    let model = &tokenizer["model"];
    if model["type"].as_str() != Some("BPE") {
        return Err(FormatError::unsupported(
            path,
            format!(
                "tokenizer model {} (only byte-level BPE goes into GGUF)",
                model["type"]
            ),
        ));
    }
    let vocab = model["vocab"].as_object().ok_or_else(|| {
        FormatError::malformed(path, "tokenizer.json: model.vocab is not an object")
    })?;
    let mut tokens: Vec<Option<(String, i32)>> = Vec::new();
    let mut put = |id: usize, s: &str, ty: i32| {
        if id >= tokens.len() {
            tokens.resize(id + 1, None);
        }
        tokens[id] = Some((s.to_string(), ty));
    };
    for (s, id) in vocab {
        let id = id.as_u64().ok_or_else(|| {
            FormatError::malformed(path, format!("tokenizer.json: id of '{s}' is not a number"))
        })?;
        if id > 16_000_000 {
            return Err(FormatError::malformed(
                path,
                format!("tokenizer.json: id {id} of '{s}' is implausibly large"),
            ));
        }
        put(id as usize, s, NORMAL);
    }
    for t in tokenizer["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(s)) = (t["id"].as_u64(), t["content"].as_str()) else {
            continue;
        };
        if id > 16_000_000 {
            return Err(FormatError::malformed(
                path,
                format!("tokenizer.json: added token id {id} is implausibly large"),
            ));
        }
        put(
            id as usize,
            s,
            if t["special"].as_bool() == Some(true) {
                CONTROL
            } else {
                USER_DEFINED
            },
        );
    }
    let n = tokens.len().max(vocab_size);
    let (mut names, mut types) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        match tokens.get(i).cloned().flatten() {
            Some((s, t)) => {
                names.push(MetaValue::String(s));
                types.push(MetaValue::I32(t));
            }
            None => {
                names.push(MetaValue::String(format!("[PAD{i}]")));
                types.push(MetaValue::I32(UNUSED));
            }
        }
    }
    let mut kv = vec![
        (
            "tokenizer.ggml.model".to_string(),
            MetaValue::String("gpt2".into()),
        ),
        (
            "tokenizer.ggml.pre".to_string(),
            MetaValue::String("gpt-2".into()),
        ),
        ("tokenizer.ggml.tokens".to_string(), MetaValue::Array(names)),
        (
            "tokenizer.ggml.token_type".to_string(),
            MetaValue::Array(types),
        ),
        (
            "tokenizer.ggml.merges".to_string(),
            MetaValue::Array(
                merges_of(model)
                    .into_iter()
                    .map(MetaValue::String)
                    .collect(),
            ),
        ),
    ];
    for (key, v) in [
        ("bos", ids.bos),
        ("eos", ids.eos),
        ("unknown", ids.unk),
        ("padding", ids.pad),
    ] {
        if let Some(v) = v {
            kv.push((format!("tokenizer.ggml.{key}_token_id"), MetaValue::U32(v)));
        }
    }
    kv.push((
        "tokenizer.ggml.add_bos_token".into(),
        MetaValue::Bool(ids.add_bos),
    ));
    kv.push((
        "tokenizer.ggml.add_eos_token".into(),
        MetaValue::Bool(false),
    ));
    if let Some(t) = chat_template {
        kv.push((
            "tokenizer.chat_template".into(),
            MetaValue::String(t.to_string()),
        ));
    }
    Ok(kv)
}

/// A byte-level BPE tokenizer.json from GGUF `gpt2` tokenizer metadata; None when the GGUF has
/// no such tokenizer.
pub fn tokenizer_json_from_gguf(md: &Metadata) -> Option<Value> {
    if md.get_str("tokenizer.ggml.model") != Some("gpt2") {
        return None;
    }
    let tokens = md.get_str_array("tokenizer.ggml.tokens")?;
    let types: Vec<i64> = md
        .get_array("tokenizer.ggml.token_type")
        .map(|a| a.iter().map(|v| v.as_i64().unwrap_or(1)).collect())
        .unwrap_or_default();
    let merges: Vec<&str> = md
        .get_str_array("tokenizer.ggml.merges")
        .unwrap_or_default();
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match types.get(i).copied().unwrap_or(NORMAL as i64) as i32 {
            UNUSED => {}
            ty @ (CONTROL | USER_DEFINED) => {
                added.push(json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": ty == CONTROL}));
                vocab.insert(t.to_string(), json!(i));
            }
            _ => {
                vocab.insert(t.to_string(), json!(i));
            }
        }
    }
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let bos = md
        .get_u64("tokenizer.ggml.bos_token_id")
        .and_then(|b| tokens.get(b as usize).map(|s| (b, s.to_string())));
    let post = match (md.get_bool("tokenizer.ggml.add_bos_token"), bos) {
        (Some(true), Some((id, s))) => json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": s, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": s, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": s, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {s.clone(): {"id": s, "ids": [id], "tokens": [s]}}
        }),
        _ => byte_level.clone(),
    };
    Some(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": post,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges}
    }))
}

/// tokenizer_config.json for a GGUF's tokenizer: special tokens, BOS flag, chat template.
pub fn tokenizer_config_from_gguf(md: &Metadata) -> Value {
    let tokens = md
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap_or_default();
    let tok = |key: &str| {
        md.get_u64(key)
            .and_then(|i| tokens.get(i as usize))
            .map(|s| Value::String(s.to_string()))
            .unwrap_or(Value::Null)
    };
    let mut c = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tok("tokenizer.ggml.bos_token_id"),
        "eos_token": tok("tokenizer.ggml.eos_token_id"),
        "pad_token": tok("tokenizer.ggml.padding_token_id"),
        "add_bos_token": md.get_bool("tokenizer.ggml.add_bos_token").unwrap_or(false),
        "clean_up_tokenization_spaces": false,
    });
    if let Some(t) = md.get_str("tokenizer.chat_template") {
        c["chat_template"] = Value::String(t.to_string());
    }
    c
}
