//! `minerva bench` end to end on the tiny llama in three formats, on the CPU and on the
//! (software) GPU: the report follows its schema, every figure is finite and positive, the
//! reference drifts by nothing and the quantized formats by something; `--formats` picks
//! formats, and Ctrl-C stops a run and still writes what was measured.

use serde_json::Value;
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn bench(backend: &str, runs: &str, dir: &Path) -> Result<Value, String> {
    let json = dir.join(format!("{backend}.json"));
    let md = dir.join(format!("{backend}.md"));
    let csv = dir.join(format!("{backend}.csv"));
    let html = dir.join(format!("{backend}.html"));
    let models = [
        "llama/f32",
        "llama/gguf-q4_0/llama-Q4_0.gguf",
        "llama/mlx-4bit",
    ]
    .map(|m| format!("{FIXTURES}/{m}"));
    let mut args: Vec<&str> = vec!["bench"];
    args.extend(models.iter().map(String::as_str));
    args.extend([
        "--backend",
        backend,
        "--prompt-tokens",
        "16,32",
        "--gen-tokens",
        "8",
        "--runs",
        runs,
        "--quality-tokens",
        "128",
    ]);
    args.extend([
        "--json",
        json.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(&args)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let table = std::fs::read_to_string(&md).unwrap();
    assert_eq!(table.lines().count(), 2 + 3, "{table}");
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap().lines().count(),
        1 + 3 * runs.parse::<usize>().unwrap() * 2
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg ") && page.contains("safetensors F32 (reference)"));
    Ok(serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap())
}

fn check(report: &Value, runs: usize, gpu: bool) {
    assert_eq!(report["schema_version"], 3);
    assert_eq!(report["settings"]["reference"], "safetensors F32");
    let formats = report["formats"].as_array().unwrap();
    assert_eq!(formats.len(), 3);
    for f in formats {
        let label = f["label"].as_str().unwrap();
        let fig = f["runs"].as_array().unwrap();
        assert_eq!(fig.len(), runs, "{label}");
        for r in fig {
            for key in [
                "load_cold_ms",
                "load_warm_ms",
                "decode_tokens_per_s",
                "peak_rss_bytes",
            ] {
                let v = r[key].as_f64().unwrap_or(f64::NAN);
                assert!(v.is_finite() && v > 0.0, "{label} {key} = {v}");
            }
            // The engine's own account of its GPU memory: on the GPU only.
            for key in ["gpu_allocated_bytes", "gpu_reserved_bytes"] {
                let v = r[key].as_u64();
                assert_eq!(v.is_some_and(|b| b > 0), gpu, "{label} {key} = {v:?}");
            }
            for key in ["ttft_ms", "prefill_tokens_per_s"] {
                let v: Vec<f64> = r[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap_or(f64::NAN))
                    .collect();
                assert!(
                    v.len() == 2 && v.iter().all(|x| x.is_finite() && *x > 0.0),
                    "{label} {key} = {v:?}"
                );
            }
        }
        let q = &f["quality"];
        let (kl, top1, ppl) = (
            q["kl_mean"].as_f64().unwrap(),
            q["top1_agreement"].as_f64().unwrap(),
            q["perplexity"].as_f64().unwrap(),
        );
        assert!(ppl.is_finite() && ppl > 1.0, "{label} perplexity {ppl}");
        if label == "safetensors F32" {
            assert_eq!((kl, top1), (0.0, 1.0), "{label}");
        } else {
            assert!(kl > 0.0 && top1 < 1.0, "{label}: kl {kl}, top-1 {top1}");
        }
    }
}

#[test]
fn the_fixture_in_three_formats_on_the_cpu_and_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    check(&bench("cpu", "2", dir.path()).unwrap(), 2, false);
    match bench("gpu", "1", dir.path()) {
        Ok(report) => check(&report, 1, true),
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED the GPU bench (no adapter outside CI): {e}")
        }
        Err(e) => panic!("the GPU bench failed: {e}"),
    }
}

fn fixture_args() -> Vec<String> {
    [
        "llama/f32",
        "llama/gguf-q4_0/llama-Q4_0.gguf",
        "llama/mlx-4bit",
    ]
    .map(|m| format!("{FIXTURES}/{m}"))
    .to_vec()
}

#[test]
fn formats_picks_which_formats_run() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_minerva"))
        .arg("bench")
        .args(fixture_args())
        .args(["--formats", "gguf,mlx:4-bit", "--backend", "cpu"])
        .args(["--prompt-tokens", "8", "--gen-tokens", "2", "--runs", "1"])
        .args(["--quality-tokens", "32", "--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let labels: Vec<&str> = report["formats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["gguf Q4_0", "mlx 4-bit"]);
    // The most precise of those picked is the reference.
    assert_eq!(report["settings"]["reference"], "gguf Q4_0");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_minerva"))
        .arg("bench")
        .args(fixture_args())
        .args(["--formats", "safetensors:q8_0", "--backend", "cpu"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no format of"),
        "{err}"
    );
}

#[test]
fn ctrl_c_stops_and_keeps_what_was_measured() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let md = dir.path().join("r.md");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_minerva"))
        .arg("bench")
        .args(fixture_args())
        .args([
            "--backend",
            "cpu",
            "--prompt-tokens",
            "8",
            "--gen-tokens",
            "2",
        ])
        .args(["--runs", "1000", "--quality-tokens", "32"])
        .args([
            "--json",
            json.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
        ])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Stop once the second run of the first format has begun: one run is complete by then.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.contains("run 2/1000") {
            break;
        }
    }
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "{seen:?} {rest:?}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["interrupted"], true);
    let formats = report["formats"].as_array().unwrap();
    // Quality ran for all three before the speed runs; the first format kept its complete run
    // and the others, not reached, none.
    let runs: Vec<usize> = formats
        .iter()
        .map(|f| f["runs"].as_array().unwrap().len())
        .collect();
    assert_eq!(runs, [1, 0, 0], "{report}");
    for f in formats {
        assert!(f["quality"]["perplexity"].as_f64().unwrap() > 1.0, "{f}");
    }
    assert!(std::fs::read_to_string(&md)
        .unwrap()
        .contains("Stopped by the user"));
}
