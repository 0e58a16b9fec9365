//! Shared helpers of the text tests: fixture paths and GGUF metadata rebuilt from gguf-py's dump.

#![allow(dead_code)]

use minerva_formats::{MetaValue, Metadata};
use serde_json::Value;
use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
}

pub fn read_json(rel: &str) -> Value {
    let path = fixtures().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn meta_value(v: &Value) -> MetaValue {
    match v {
        Value::Bool(b) => MetaValue::Bool(*b),
        Value::String(s) => MetaValue::String(s.clone()),
        Value::Number(n) if n.is_f64() => MetaValue::F32(n.as_f64().unwrap() as f32),
        Value::Number(n) if n.is_i64() && n.as_i64().unwrap() < 0 => {
            MetaValue::I32(n.as_i64().unwrap() as i32)
        }
        Value::Number(n) => MetaValue::U32(n.as_u64().unwrap() as u32),
        Value::Array(a) => MetaValue::Array(a.iter().map(meta_value).collect()),
        other => panic!("no GGUF value for {other}"),
    }
}

/// GGUF metadata from a JSON object of key → value (as written by tools/dump_tokenizer_ids.py).
pub fn metadata_from_json(obj: &Value) -> Metadata {
    let mut m = Metadata::default();
    for (k, v) in obj.as_object().unwrap() {
        m.0.insert(k.clone(), meta_value(v));
    }
    m
}

/// The tokenizer metadata of the fixture GGUF of a tokenizer flavour (llama, qwen3, gpt_oss).
pub fn gguf_metadata(flavour: &str) -> Metadata {
    metadata_from_json(&read_json("text/gguf_tokenizers.json")[flavour])
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}
