//! GGUF byte-level BPE under each `tokenizer.ggml.pre` split (llama-bpe, qwen2, gpt-4o) against
//! the Hugging Face `tokenizers` package with the same vocabulary and the models' own regexes
//! (tests/fixtures/text/pre_tokenizer_ids.json; the vocabulary's merges cross the points where
//! the regexes differ, so a wrong split changes the ids).

mod common;

use common::{ids, metadata_from_json, read_json};
use minerva_formats::MetaValue;
use minerva_text::Tokenizer;

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
