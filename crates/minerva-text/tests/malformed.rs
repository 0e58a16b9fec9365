//! Broken tokenizer data and templates give errors that say what is wrong, never a panic.

mod common;

use common::{fixtures, gguf_metadata};
use minerva_formats::{MetaValue, Metadata};
use minerva_text::{ChatTemplate, Message, Tokenizer};

fn error_of(meta: &Metadata) -> String {
    Tokenizer::from_gguf_metadata(meta, "bad.gguf")
        .unwrap_err()
        .to_string()
}

fn with(key: &str, value: MetaValue) -> Metadata {
    let mut m = gguf_metadata("llama");
    m.0.insert(key.to_owned(), value);
    m
}

fn strings(v: &[&str]) -> MetaValue {
    MetaValue::Array(
        v.iter()
            .map(|s| MetaValue::String((*s).to_owned()))
            .collect(),
    )
}

#[test]
fn merges_naming_unknown_tokens() {
    let msg = error_of(&with("tokenizer.ggml.merges", strings(&["Ġ t", "zz q"])));
    assert!(
        msg.contains("bad.gguf") && msg.contains("merge 1 'zz q' names unknown token 'zz'"),
        "{msg}"
    );
    let msg = error_of(&with("tokenizer.ggml.merges", strings(&["nospace"])));
    assert!(msg.contains("merge 0 'nospace' is not two tokens"), "{msg}");
}

#[test]
fn arrays_of_different_lengths() {
    let msg = error_of(&with(
        "tokenizer.ggml.token_type",
        MetaValue::Array(vec![MetaValue::I32(1); 10]),
    ));
    assert!(
        msg.contains("token_type has 10 entries for 512 tokens"),
        "{msg}"
    );
    let mut m = with("tokenizer.ggml.model", MetaValue::String("llama".into()));
    m.0.insert(
        "tokenizer.ggml.scores".into(),
        MetaValue::Array(vec![MetaValue::F32(0.0); 3]),
    );
    assert!(error_of(&m).contains("scores has 3 entries for 512 tokens"));
}

#[test]
fn wrong_types_missing_keys_and_bad_ids() {
    let msg = error_of(&with(
        "tokenizer.ggml.tokens",
        MetaValue::Array(vec![MetaValue::U32(5)]),
    ));
    assert!(
        msg.contains("tokenizer.ggml.tokens is not an array of strings"),
        "{msg}"
    );
    let msg = error_of(&with("tokenizer.ggml.eos_token_id", MetaValue::U32(9999)));
    assert!(
        msg.contains("eos_token_id = 9999 is outside the vocabulary of 512 tokens"),
        "{msg}"
    );
    let msg = error_of(&with(
        "tokenizer.ggml.model",
        MetaValue::String("llama".into()),
    ));
    assert!(msg.contains("without tokenizer.ggml.scores"), "{msg}");
    let msg = error_of(&with(
        "tokenizer.ggml.model",
        MetaValue::String("t5".into()),
    ));
    assert!(msg.contains("unsupported") && msg.contains("'t5'"), "{msg}");
    let msg = error_of(&with(
        "tokenizer.ggml.pre",
        MetaValue::String("mystery-pre".into()),
    ));
    assert!(
        msg.contains("tokenizer.ggml.pre 'mystery-pre'") && msg.contains("known:"),
        "{msg}"
    );
    let mut m = gguf_metadata("llama");
    m.0.remove("tokenizer.ggml.tokens");
    assert!(error_of(&m).contains("no tokenizer.ggml.tokens"));
    let msg = error_of(&with(
        "tokenizer.ggml.add_bos_token",
        MetaValue::String("yes".into()),
    ));
    assert!(
        msg.contains("add_bos_token is a string, not a bool"),
        "{msg}"
    );
}

#[test]
fn folder_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let msg = Tokenizer::from_folder(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("no tokenizer.json"), "{msg}");
    std::fs::write(dir.path().join("tokenizer.json"), "{ not json").unwrap();
    let msg = Tokenizer::from_folder(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("tokenizer.json") && msg.contains("not a valid tokenizer.json"),
        "{msg}"
    );

    std::fs::copy(
        fixtures().join("qwen3/f32/tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"eos_token": "<|nope|>"}"#,
    )
    .unwrap();
    let msg = Tokenizer::from_folder(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("eos token '<|nope|>'"), "{msg}");
    std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
    std::fs::write(
        dir.path().join("generation_config.json"),
        r#"{"eos_token_id": [2, 70000]}"#,
    )
    .unwrap();
    let msg = Tokenizer::from_folder(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("eos_token_id id 70000"), "{msg}");
    std::fs::write(
        dir.path().join("generation_config.json"),
        r#"{"eos_token_id": [2, 1]}"#,
    )
    .unwrap();
    assert_eq!(
        Tokenizer::from_folder(dir.path()).unwrap().eos_ids(),
        [2, 1]
    );
    assert!(ChatTemplate::from_folder(dir.path()).unwrap().is_none());

    // Added tokens named only by tokenizer_config.json join the vocabulary at their ids.
    let config = r#"{"added_tokens_decoder": {"2": {"content": "<|im_end|>", "special": true},
                     "512": {"content": "<tool>", "special": true}, "513": {"content": "<x>", "special": false}}}"#;
    std::fs::write(dir.path().join("tokenizer_config.json"), config).unwrap();
    let tok = Tokenizer::from_folder(dir.path()).unwrap();
    assert_eq!(tok.vocab_size(), 514);
    assert_eq!(
        tok.encode("a<tool>b<x>", false).unwrap()[1..4],
        [512, 68, 513]
    );
    assert_eq!(tok.decode(&[512, 513], true).unwrap(), "<x>");
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"added_tokens_decoder": {"600": {"content": "<far>"}}}"#,
    )
    .unwrap();
    let msg = Tokenizer::from_folder(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("'<far>' as id 600, but the next free id is 512"),
        "{msg}"
    );
}

#[test]
fn templates_that_raise_or_loop() {
    let raising = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation must start with user') }}{% endif %}";
    let t = ChatTemplate::new(raising, "model.gguf", "", "").unwrap();
    let msg = t
        .render(&[Message::system("x")], true)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("model.gguf") && msg.contains("Conversation must start with user"),
        "{msg}"
    );
    assert_eq!(t.render(&[Message::user("x")], true).unwrap(), "");

    let looping = "{% macro again() %}{{ again() }}{% endmacro %}{{ again() }}";
    let msg = ChatTemplate::new(looping, "t", "", "")
        .unwrap()
        .render(&[], true)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("recursion"), "{msg}");
    let mut m = gguf_metadata("llama");
    m.0.insert("tokenizer.chat_template".into(), MetaValue::U32(3));
    let msg = ChatTemplate::from_gguf_metadata(&m, "bad.gguf")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("tokenizer.chat_template is a u32"), "{msg}");
}
