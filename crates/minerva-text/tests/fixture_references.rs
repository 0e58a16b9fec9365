//! Every fixture model's reference prompt ids and chat prompt, reproduced by the tokenizer.json
//! tokenizers and by the tokenizers built from the GGUFs' embedded vocabularies.

mod common;

use common::{fixtures, gguf_metadata, ids, read_json};
use minerva_text::{ChatTemplate, Message, Tokenizer};
use serde_json::Value;

/// HF / MLX folders and their tokenizer flavour.
const FOLDERS: &[&str] = &[
    "llama/f32",
    "llama/bf16",
    "llama/f16",
    "llama/mlx-4bit",
    "qwen3/f32",
    "mixtral/f32",
    "gpt_oss/f32",
];

/// GGUF folders and the flavour of vocabulary they embed.
const GGUFS: &[(&str, &str)] = &[
    ("llama/gguf-f32", "llama"),
    ("llama/gguf-q8_0", "llama"),
    ("llama/gguf-q4_0", "llama"),
    ("mixtral/gguf-q4_k_m", "llama"),
    ("qwen3/gguf-q8_0", "qwen3"),
    ("gpt_oss/gguf-mxfp4_moe", "gpt_oss"),
];

fn messages(reference: &Value) -> Vec<Message> {
    serde_json::from_value(reference["chat_messages"].clone()).unwrap()
}

fn check(label: &str, tok: &Tokenizer, template: &ChatTemplate, reference: &Value) {
    let prompt = reference["prompt_text"].as_str().unwrap();
    assert_eq!(
        tok.encode(prompt, true).unwrap(),
        ids(&reference["input_ids"]),
        "{label}: prompt ids"
    );
    assert_eq!(
        tok.decode(&ids(&reference["input_ids"]), true).unwrap(),
        prompt,
        "{label}: decoded prompt"
    );

    let add_gen = reference["chat_add_generation_prompt"].as_bool().unwrap();
    let rendered = template.render(&messages(reference), add_gen).unwrap();
    assert_eq!(
        rendered,
        reference["chat_rendered"].as_str().unwrap(),
        "{label}: chat prompt"
    );
    let chat_ids = ids(&reference["chat_rendered_ids_no_extra_special"]);
    assert_eq!(
        tok.encode(&rendered, false).unwrap(),
        chat_ids,
        "{label}: chat prompt ids"
    );
    assert_eq!(
        tok.decode(&chat_ids, false).unwrap(),
        rendered,
        "{label}: decoded chat prompt"
    );
}

#[test]
fn folder_tokenizers_match_references() {
    for dir in FOLDERS {
        let path = fixtures().join(dir);
        let reference = read_json(&format!("{dir}/reference.json"));
        let tok = Tokenizer::from_folder(&path).unwrap();
        let template = ChatTemplate::from_folder(&path)
            .unwrap()
            .expect("fixture folders have a chat template");
        check(dir, &tok, &template, &reference);
    }
}

#[test]
fn gguf_tokenizers_match_references() {
    for (dir, flavour) in GGUFS {
        let reference = read_json(&format!("{dir}/reference.json"));
        let meta = gguf_metadata(flavour);
        let tok = Tokenizer::from_gguf_metadata(&meta, dir).unwrap();
        let template = ChatTemplate::from_gguf_metadata(&meta, dir)
            .unwrap()
            .expect("fixture GGUFs have a chat template");
        check(dir, &tok, &template, &reference);
    }
}

#[test]
fn special_ids_agree_between_folder_and_gguf() {
    // bos / eos / pad as the fixtures' README lists them.
    let expected = [
        ("llama", Some(1), vec![2], None),
        ("qwen3", Some(0), vec![2], Some(0)),
        ("gpt_oss", Some(0), vec![6], Some(1)),
    ];
    for (flavour, bos, eos, pad) in expected {
        let folder = Tokenizer::from_folder(&fixtures().join(flavour).join("f32")).unwrap();
        let gguf = Tokenizer::from_gguf_metadata(&gguf_metadata(flavour), flavour).unwrap();
        for (kind, tok) in [("folder", &folder), ("gguf", &gguf)] {
            assert_eq!(tok.bos_id(), bos, "{flavour} {kind} bos");
            assert_eq!(tok.eos_ids(), eos.as_slice(), "{flavour} {kind} eos");
            assert_eq!(tok.pad_id(), pad, "{flavour} {kind} pad");
            assert_eq!(tok.vocab_size(), 512, "{flavour} {kind} vocab");
        }
        for id in 0..512 {
            assert_eq!(
                folder.id_to_token(id),
                gguf.id_to_token(id),
                "{flavour}: token {id}"
            );
        }
    }
}

#[test]
fn checkpoints_give_the_same_tokenizers_and_templates() {
    use minerva_formats::Checkpoint;
    use minerva_text::{PromptBuilder, PromptKind};
    let all = FOLDERS.iter().copied().chain(GGUFS.iter().map(|(d, _)| *d));
    for dir in all {
        let ckpt = Checkpoint::open(fixtures().join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        let reference = read_json(&format!("{dir}/reference.json"));
        let tok = Tokenizer::from_checkpoint(&ckpt).unwrap();
        let template = ChatTemplate::from_checkpoint(&ckpt)
            .unwrap()
            .expect("every fixture has a chat template");
        check(dir, &tok, &template, &reference);
        let expected = if dir.starts_with("gpt_oss") {
            PromptKind::Harmony
        } else {
            PromptKind::Template
        };
        assert_eq!(
            PromptBuilder::from_checkpoint(&ckpt).unwrap().kind(),
            expected,
            "{dir}"
        );
    }
}
