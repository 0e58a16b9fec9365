//! `--backend auto` (the default): a real GPU adapter when there is one, else the CPU; the
//! choice on stderr and in `--json`, and `minerva info --adapters` listing what wgpu sees.

mod common;

use common::minerva;
use std::path::Path;
use std::process::{Command, Output};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn auto_takes_the_best_adapter_only_when_it_is_a_real_gpu() {
    let listed = json(&minerva(&["info", "--adapters", "--json"]));
    let adapters = listed["adapters"].as_array().unwrap();
    if std::env::var_os("CI").is_some() {
        // CI installs Mesa's software Vulkan driver.
        assert!(!adapters.is_empty(), "no adapters under CI: {listed}");
    }
    for a in adapters {
        assert!(a["name"].as_str().is_some_and(|n| !n.is_empty()), "{a}");
        assert!(a["api"].is_string() && a["driver"].is_string(), "{a}");
    }
    let real_gpu = adapters.first().is_some_and(|a| a["software"] == false);
    let auto = &listed["auto"];
    assert_eq!(
        auto["backend"],
        if real_gpu { "gpu" } else { "cpu" },
        "{listed}"
    );
    if real_gpu {
        assert_eq!(auto["adapter"]["name"], adapters[0]["name"]);
    } else {
        // The CPU was chosen, and the reason says so.
        assert!(
            auto["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{listed}"
        );
    }

    // `run` without --backend makes the same choice and says so.
    let model = Path::new(FIXTURES).join("llama/gguf-q4_0/llama-Q4_0.gguf");
    let o = minerva(&[
        "run",
        model.to_str().unwrap(),
        "--prompt",
        "Hello",
        "--max-tokens",
        "2",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let out = json(&o);
    if real_gpu {
        assert_eq!(out["adapter"]["name"], adapters[0]["name"], "{out}");
        assert!(stderr.contains("backend: gpu: "), "{stderr}");
    } else {
        assert!(out["adapter"].is_null(), "{out}");
        assert!(stderr.contains("backend: cpu ("), "{stderr}");
    }
}

#[test]
fn text_listing_names_the_auto_choice() {
    let o = minerva(&["info", "--adapters"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("--backend auto: "), "{text}");
}

#[test]
fn an_unknown_backend_is_refused_with_the_choices() {
    let o = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(["run", "x.gguf", "--prompt", "hi", "--backend", "tpu"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("auto, gpu or cpu"), "{stderr}");
}
