//! `minerva serve` end to end with real clients, on SmolLM2 (fetched by scripts/setup.sh) on
//! the CPU: the official `openai` Python package (tests/server/openai_client.py), a bounded
//! load test from concurrent clients (tests/server/load.py), and the web UI in Debian's
//! headless Chromium with a second server as a remote engine (tests/e2e/browser.py, which
//! saves screenshots to target/e2e-screenshots). Outside CI a machine without the model or the
//! tools skips loudly; under CI that is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The model, or None (after saying why) where the test may skip.
fn ready(python_modules: &[&str], tools: &[&str]) -> Option<PathBuf> {
    let model = Path::new(ROOT).join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut missing: Vec<String> = tools
        .iter()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|t| t.to_string())
        .collect();
    for m in python_modules {
        let ok = Command::new("python3")
            .args(["-c", &format!("import {m}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            missing.push(format!("python module {m}"));
        }
    }
    if !model.is_file() {
        missing.push("the SmolLM2 model".into());
    }
    if missing.is_empty() {
        return Some(model);
    }
    let why = format!("missing {missing:?}; run scripts/setup.sh");
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("SKIPPED: {why}");
    None
}

fn script(path: &str, args: &[&str]) {
    let status = Command::new("python3")
        .arg(Path::new(ROOT).join(path))
        .args(args)
        .status()
        .expect("python3 runs");
    assert!(
        status.success(),
        "{path} failed ({status}): see its output above"
    );
}

#[test]
fn the_official_openai_client_gets_what_minerva_run_says() {
    let Some(model) = ready(&["openai"], &["python3"]) else {
        return;
    };
    script(
        "tests/server/openai_client.py",
        &[
            "--minerva",
            env!("CARGO_BIN_EXE_minerva"),
            "--model",
            model.to_str().unwrap(),
        ],
    );
}

#[test]
fn concurrent_clients_get_their_own_answers_under_load() {
    let Some(model) = ready(&["openai"], &["python3"]) else {
        return;
    };
    // Bounded for CI (a debug build on two cores); the figures in benches/ come from a
    // release build with 200 requests.
    script(
        "tests/server/load.py",
        &[
            "--minerva",
            env!("CARGO_BIN_EXE_minerva"),
            "--model",
            model.to_str().unwrap(),
            "--requests",
            "64",
            "--clients",
            "8",
            "--max-tokens",
            "2",
            "--time-limit",
            "600",
        ],
    );
}

#[test]
fn the_web_ui_chats_in_a_browser_and_with_a_remote_engine() {
    let Some(model) = ready(&["selenium"], &["python3", "chromium", "chromedriver"]) else {
        return;
    };
    let out = Path::new(ROOT).join("target/e2e-screenshots");
    script(
        "tests/e2e/browser.py",
        &[
            "--minerva",
            env!("CARGO_BIN_EXE_minerva"),
            "--model",
            model.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    for shot in [
        "browser-01-chat",
        "browser-02-models",
        "browser-03-remote-chat",
    ] {
        let png = out.join(format!("{shot}.png"));
        assert!(png.is_file(), "{} was not saved", png.display());
    }
}
