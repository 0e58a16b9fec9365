//! The table of `tokenizer.ggml.pre` names against llama.cpp and Hugging Face `tokenizers`
//! (tests/fixtures/text/pre_tokenizer_splits.json, written by tools/dump_pre_tokenizer_splits.py
//! from llama.cpp's src/llama-vocab.cpp): every name llama.cpp knows is in the table with
//! llama.cpp's expressions and flags, and splits test strings (digits, contractions, CJK, emoji,
//! runs of spaces, code, other scripts) as `tokenizers` does with the same expressions.

mod common;

use common::{metadata_from_json, read_json};
use minerva_formats::MetaValue;
use minerva_text::pretokenizer::{self, Alphabet, ONIG_REWRITES, TABLE};
use minerva_text::Tokenizer;
use serde_json::Value;

/// Table names that llama.cpp does not know: Minerva's earlier spellings.
const MINERVA_ONLY: [&str; 2] = ["gpt2", "o200k"];

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

fn pieces(name: &str, text: &str) -> Vec<String> {
    pretokenizer::pieces(name, text).unwrap()
}

#[test]
fn every_llama_cpp_name_has_its_expressions_and_flags() {
    let data = read_json("text/pre_tokenizer_splits.json");
    let names = data["names"].as_object().unwrap();
    assert!(names.len() > 80, "{} names", names.len());
    for (name, want) in names {
        let row = pretokenizer::row(Some(name))
            .unwrap_or_else(|| panic!("llama.cpp's '{name}' is not in the table"));
        let what = format!("'{name}' ({})", want["llama_cpp_type"]);
        assert_eq!(row.exprs, strs(&want["exprs"]), "{what}: expressions");
        assert_eq!(
            row.ignore_merges, want["ignore_merges"],
            "{what}: ignore_merges"
        );
        let alphabet = match (
            want["byte_level"].as_bool(),
            want["escape_spaces"].as_bool(),
        ) {
            (Some(true), Some(false)) => Alphabet::ByteLevel,
            (Some(false), Some(escape_spaces)) => Alphabet::Utf8 { escape_spaces },
            other => panic!("{what}: byte_level/escape_spaces {other:?}"),
        };
        assert_eq!(row.alphabet, alphabet, "{what}: alphabet");
        let run = &data["runs"][want["run"].as_u64().unwrap() as usize];
        assert_eq!(
            row.onig_exprs(),
            strs(&run["exprs"]),
            "{what}: expressions run"
        );
    }
    for row in TABLE {
        for name in row.names {
            assert!(
                names.contains_key(*name) || MINERVA_ONLY.contains(name),
                "'{name}' is not a llama.cpp name"
            );
        }
    }
    let rewrites: Vec<(&str, &str)> = data["rewrites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["llama_cpp"].as_str().unwrap(),
                r["onig"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(ONIG_REWRITES, rewrites.as_slice());
}

#[test]
fn every_name_splits_as_hf_tokenizers() {
    let data = read_json("text/pre_tokenizer_splits.json");
    let strings = strs(&data["strings"]);
    for (name, want) in data["names"].as_object().unwrap() {
        let run = &data["runs"][want["run"].as_u64().unwrap() as usize];
        for (text, expected) in strings.iter().zip(run["splits"].as_array().unwrap()) {
            assert_eq!(pieces(name, text), strs(expected), "'{name}' on {text:?}");
        }
    }
}

/// Every name builds a whole tokenizer from GGUF metadata (the small byte-level vocabulary of
/// pre_tokenizer_ids.json), and byte-level ones give back the text they encode.
#[test]
fn every_name_builds_from_gguf_metadata() {
    let data = read_json("text/pre_tokenizer_ids.json");
    let text = "I'm sure you'll see 1234567 and 3.14159 —  日本語 🦊\n\tdone";
    for row in TABLE {
        for name in row.names {
            let mut meta = metadata_from_json(&data["metadata"]);
            meta.0.insert(
                "tokenizer.ggml.pre".into(),
                MetaValue::String((*name).to_owned()),
            );
            let tok = Tokenizer::from_gguf_metadata(&meta, "fixture.gguf")
                .unwrap_or_else(|e| panic!("'{name}': {e}"));
            let ids = tok.encode(text, false).unwrap();
            assert!(!ids.is_empty(), "'{name}'");
            if row.alphabet == Alphabet::ByteLevel {
                assert_eq!(tok.decode(&ids, false).unwrap(), text, "'{name}'");
            }
        }
    }
}

#[test]
fn smollm_builds_from_gguf_metadata() {
    let data = read_json("text/pre_tokenizer_ids.json");
    let mut meta = metadata_from_json(&data["metadata"]);
    meta.0.insert(
        "tokenizer.ggml.pre".into(),
        MetaValue::String("smollm".into()),
    );
    let tok = Tokenizer::from_gguf_metadata(&meta, "smollm.gguf").unwrap();
    let ids = tok.encode("x = 12345", false).unwrap();
    assert_eq!(tok.decode(&ids, false).unwrap(), "x = 12345");
}
