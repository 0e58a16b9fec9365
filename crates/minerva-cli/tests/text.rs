//! `minerva tokenize` and `minerva template` end to end against the fixtures' reference ids and
//! rendered chat prompts, for tokenizer.json folders and GGUF-embedded vocabularies alike.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
}

fn minerva(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(args)
        .output()
        .expect("minerva runs");
    assert!(
        out.status.success(),
        "minerva {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// (model path, folder holding its reference.json)
fn models() -> Vec<(PathBuf, PathBuf)> {
    let f = fixtures();
    let mut out = Vec::new();
    for dir in [
        "llama/f32",
        "llama/mlx-4bit",
        "qwen3/f32",
        "mixtral/f32",
        "gpt_oss/f32",
    ] {
        out.push((f.join(dir), f.join(dir)));
    }
    for (dir, file) in [
        ("llama/gguf-q4_0", "llama-Q4_0.gguf"),
        ("qwen3/gguf-q8_0", "qwen3-Q8_0.gguf"),
        ("mixtral/gguf-q4_k_m", "mixtral-Q4_K_M.gguf"),
        ("gpt_oss/gguf-mxfp4_moe", "gpt_oss-MXFP4_MOE.gguf"),
    ] {
        out.push((f.join(dir).join(file), f.join(dir)));
    }
    out
}

fn reference(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap()
}

#[test]
fn tokenize_gives_the_reference_prompt_ids() {
    for (model, dir) in models() {
        let r = reference(&dir);
        let text = r["prompt_text"].as_str().unwrap();
        let out: Value = serde_json::from_str(&minerva(&[
            "tokenize",
            model.to_str().unwrap(),
            "--text",
            text,
            "--json",
        ]))
        .unwrap();
        assert_eq!(out["ids"], r["input_ids"], "{}", model.display());
        assert_eq!(
            out["tokens"].as_array().unwrap().len(),
            r["input_ids"].as_array().unwrap().len()
        );
        let plain = minerva(&["tokenize", model.to_str().unwrap(), "--text", text]);
        let ids: Vec<u64> = plain
            .trim()
            .split(',')
            .map(|s| s.trim().parse().unwrap())
            .collect();
        assert_eq!(Value::from(ids), r["input_ids"], "{}", model.display());
    }
}

#[test]
fn template_renders_the_reference_chat_prompt() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, dir) in models() {
        let r = reference(&dir);
        let messages = tmp.path().join("messages.json");
        std::fs::write(&messages, r["chat_messages"].to_string()).unwrap();
        let mut args = vec![
            "template",
            model.to_str().unwrap(),
            "--messages",
            messages.to_str().unwrap(),
        ];
        // gpt-oss prompts are harmony by default; the fixture's own template is a simplified one.
        if dir.starts_with(fixtures().join("gpt_oss")) {
            args.push("--jinja");
        }
        let rendered = minerva(&args);
        let want = r["chat_rendered"].as_str().unwrap();
        assert_eq!(rendered, want, "{}", model.display());
    }
}
