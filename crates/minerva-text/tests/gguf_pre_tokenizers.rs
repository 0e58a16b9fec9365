//! GGUF byte-level BPE under each `tokenizer.ggml.pre` split (llama-bpe, qwen2, gpt-4o) against
//! the Hugging Face `tokenizers` package with the same vocabulary and the models' own regexes
//! (tests/fixtures/text/pre_tokenizer_ids.json; the vocabulary's merges cross the points where
//! the regexes differ, so a wrong split changes the ids).

mod common;

use common::{ids, metadata_from_json, read_json};
use minerva_formats::write::tokenizer::tokenizer_json_from_gguf;
use minerva_formats::MetaValue;
use minerva_text::pretokenizer::{Alphabet, TABLE};
use minerva_text::Tokenizer;
use std::path::Path;

#[test]
fn every_named_split_matches_hf_tokenizers() {
    let data = read_json("text/pre_tokenizer_ids.json");
    let strings: Vec<&str> = data["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let mut per_name = Vec::new();
    for (name, expected) in data["ids"].as_object().unwrap() {
        let mut meta = metadata_from_json(&data["metadata"]);
        meta.0
            .insert("tokenizer.ggml.pre".into(), MetaValue::String(name.clone()));
        let tok = Tokenizer::from_gguf_metadata(&meta, name).unwrap();
        let expected = expected.as_array().unwrap();
        let mut all = Vec::new();
        for (s, want) in strings.iter().zip(expected) {
            let got = tok.encode(s, false).unwrap();
            assert_eq!(got, ids(want), "pre '{name}' on {s:?}");
            assert_eq!(
                tok.decode(&got, false).unwrap(),
                *s,
                "pre '{name}' decode of {s:?}"
            );
            all.push(got);
        }
        per_name.push(all);
    }
    assert_eq!(per_name.len(), 3);
    // The data can tell the splits apart.
    assert!(per_name[0] != per_name[1] && per_name[1] != per_name[2] && per_name[0] != per_name[2]);
}

/// The tokenizer.json that `minerva convert` writes for a GGUF (minerva-formats'
/// `tokenizer_json_from_gguf`) is the tokenizer built from the GGUF metadata: the same
/// normalizer, pre-tokenizer and BPE flags for every `tokenizer.ggml.pre` name, and the same ids
/// when loaded back from a folder.
#[test]
fn converted_tokenizer_json_is_the_gguf_tokenizer_for_every_name() {
    let data = read_json("text/pre_tokenizer_ids.json");
    let mut strings: Vec<&str> = data["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    strings.push("a  1\nb   22\n\n3");
    let tmp = tempfile::tempdir().unwrap();
    for row in TABLE {
        for name in row.names {
            let mut meta = metadata_from_json(&data["metadata"]);
            meta.0.insert(
                "tokenizer.ggml.pre".into(),
                MetaValue::String((*name).to_owned()),
            );
            let written = tokenizer_json_from_gguf(&meta, Path::new("fixture.gguf"))
                .unwrap()
                .unwrap();
            let (built, _) = minerva_text::gguf_vocab::build(&meta, name).unwrap();
            let built = serde_json::to_value(&built).unwrap();
            for key in ["normalizer", "pre_tokenizer"] {
                assert_eq!(written[key], built[key], "'{name}': {key}");
            }
            for key in ["ignore_merges", "byte_fallback", "fuse_unk", "unk_token"] {
                assert_eq!(
                    written["model"][key], built["model"][key],
                    "'{name}': {key}"
                );
            }
            if row.alphabet == Alphabet::ByteLevel {
                assert_eq!(written["decoder"]["type"], "ByteLevel", "'{name}'");
            } else {
                assert_eq!(written["decoder"], built["decoder"], "'{name}': decoder");
            }

            let dir = tmp.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("tokenizer.json"), written.to_string()).unwrap();
            let from_json = Tokenizer::from_folder(&dir).unwrap();
            let from_gguf = Tokenizer::from_gguf_metadata(&meta, name).unwrap();
            for s in &strings {
                let want = from_gguf.encode(s, false).unwrap();
                assert_eq!(
                    from_json.encode(s, false).unwrap(),
                    want,
                    "'{name}' on {s:?}"
                );
                assert_eq!(
                    from_json.decode(&want, false).unwrap(),
                    from_gguf.decode(&want, false).unwrap(),
                    "'{name}' decode of {s:?}"
                );
            }
        }
    }
}
