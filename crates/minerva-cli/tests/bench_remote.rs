//! `minerva bench` with a remote engine beside a local format: a real `minerva serve` of the
//! tiny llama on the loopback, and the same model on disk. The remote entry has timed requests
//! (time to first token, prefill, decode), no load or memory figures, and (same weights on both
//! sides, greedy) top-1 agreement with the local reference; the Markdown table has its row.

mod common;

use common::serving::{get, serve};
use serde_json::Value;
use std::process::Command;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/llama/f32"
);

fn positive(v: &Value) -> bool {
    v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0)
}

#[test]
fn a_remote_engine_is_measured_beside_the_local_format() {
    let server = serve(FIXTURE);
    let (_, models) = get(server.port, "/v1/models").unwrap();
    let models: Value = serde_json::from_str(&models).unwrap();
    let id = models["data"][0]["id"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (json, md) = (dir.path().join("r.json"), dir.path().join("r.md"));
    let remote = format!("http://127.0.0.1:{}/v1#{id}", server.port);
    let out = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(["bench", FIXTURE, "--remote", &remote])
        .args(["--runs", "1", "--prompt-tokens", "16", "--gen-tokens", "4"])
        .args(["--quality-tokens", "128", "--backend", "cpu"])
        .args(["--json", json.to_str().unwrap()])
        .args(["--markdown", md.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let formats = report["formats"].as_array().unwrap();
    let label = format!("remote: {id} @ 127.0.0.1:{}", server.port);
    let labels: Vec<&str> = formats
        .iter()
        .map(|f| f["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["safetensors F32", label.as_str()]);
    assert_eq!(report["settings"]["reference"], "safetensors F32");

    let r = &formats[1];
    assert_eq!(r["format"], "remote");
    assert!(r["bytes_on_disk"].is_null(), "{r}");
    let run = &r["runs"][0];
    for key in ["load_cold_ms", "load_warm_ms", "peak_rss_bytes"] {
        assert!(run[key].is_null(), "{key}: {run}");
    }
    for key in ["ttft_ms", "prefill_tokens_per_s"] {
        assert!(positive(&run[key][0]), "{key}: {run}");
    }
    assert!(positive(&run["decode_tokens_per_s"]), "{run}");
    // The engine's own count of the prompt cut from the text: about 16 tokens.
    let sent = run["prompt_tokens"][0].as_u64().unwrap();
    assert!((8..=32).contains(&sent), "{run}");
    assert!(r["summary"]["load_cold_ms"].is_null() && r["summary"]["peak_rss_bytes"].is_null());

    // Same weights, both greedy: the engine's top token is the reference's nearly everywhere.
    let q = &r["quality"];
    let top1 = q["top1_agreement"].as_f64().unwrap();
    assert!(top1 >= 0.9, "top-1 agreement {top1}: {q}");
    assert!(q["positions"].as_u64().unwrap() >= 32, "{q}");
    assert!(q["kl_mean"].is_null() && q["perplexity"].is_null(), "{q}");

    let table = std::fs::read_to_string(&md).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("| {label} |")))
        .unwrap_or_else(|| panic!("no row for {label}:\n{table}"));
    // Size and loads not measured; the time to first token is.
    assert!(
        row.starts_with(&format!("| {label} | – | – | – | ")),
        "{row}"
    );
    drop(server);
}

#[test]
fn an_unreachable_engine_fails_before_anything_runs() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args([
            "bench",
            "--remote",
            &format!("http://127.0.0.1:{port}/v1#m"),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot reach the engine at http://127.0.0.1:"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(["bench", "--remote", "http://127.0.0.1:1/v1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("URL#MODEL"), "{err}");
}
