//! `minerva run` benchmark flags: an exact prompt length and generation that ignores EOS.

use serde_json::Value;
use std::process::Command;

#[test]
fn prompt_tokens_and_ignore_eos_give_exact_counts() {
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/llama/gguf-q8_0/llama-Q8_0.gguf"
    );
    // This fixture's greedy continuation of the passage reaches EOS before 40 tokens
    // without --ignore-eos, so the flag is what makes the count exact.
    let out = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args([
            "run",
            model,
            "--prompt-tokens",
            "37",
            "--max-tokens",
            "40",
            "--ignore-eos",
            "--ctx",
            "200",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["prompt_tokens"], 37);
    assert_eq!(v["generated_tokens"], 40);
    assert_eq!(v["ids"].as_array().unwrap().len(), 40);
    assert_eq!(v["stop_reason"], "max_tokens");
}
