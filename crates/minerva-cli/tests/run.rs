//! `minerva run` end to end: the greedy continuation of the fixture prompt, as JSON.

use std::path::Path;
use std::process::Command;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
const PROMPT: &str = "The quick brown fox jumps over the lazy dog.";

fn reference_greedy(fixture: &str) -> Vec<u64> {
    let text =
        std::fs::read_to_string(Path::new(FIXTURES).join(fixture).join("reference.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    r["greedy_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// `minerva run --json` with the CPU's f32 products: the references are float32 runs, and a
/// greedy step may sit on a near tie that 8-bit activations decide the other way.
fn run_json(model: &Path, extra: &[&str]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .env("MINERVA_CPU_PRODUCTS", "f32")
        .arg("run")
        .arg(model)
        .args(["--prompt", PROMPT, "--max-tokens", "16", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn greedy_run_reproduces_the_reference() {
    // One SafeTensors folder (tokenizer.json) and one GGUF file (embedded vocabulary).
    for (fixture, model) in [
        ("llama/f32", "llama/f32"),
        ("qwen3/gguf-q8_0", "qwen3/gguf-q8_0/qwen3-Q8_0.gguf"),
    ] {
        let out = run_json(&Path::new(FIXTURES).join(model), &[]);
        let ids: Vec<u64> = out["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(ids, reference_greedy(fixture), "{fixture}");
        assert!(out["text"].as_str().is_some_and(|t| !t.is_empty()));
        for key in ["load_ms", "prefill_tokens_per_s", "decode_tokens_per_s"] {
            assert!(
                out[key].as_f64().is_some_and(|v| v > 0.0),
                "{fixture}: {key} = {}",
                out[key]
            );
        }
    }
}

#[test]
fn sampled_runs_repeat_per_seed() {
    let model = Path::new(FIXTURES).join("llama/f32");
    let args = ["--temp", "1.0", "--top-k", "40", "--top-p", "0.95"];
    let a = run_json(&model, &[&args[..], &["--seed", "5"]].concat());
    let b = run_json(&model, &[&args[..], &["--seed", "5"]].concat());
    let c = run_json(&model, &[&args[..], &["--seed", "6"]].concat());
    assert_eq!(a["ids"], b["ids"]);
    assert_ne!(a["ids"], c["ids"]);
}

#[test]
fn a_prompt_longer_than_the_context_is_an_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .arg("run")
        .arg(Path::new(FIXTURES).join("llama/f32"))
        .args(["--prompt", PROMPT, "--ctx", "8"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("context full"));
}
