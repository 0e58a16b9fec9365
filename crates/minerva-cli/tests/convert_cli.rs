//! `minerva convert` and `minerva synth` as a user runs them: exit status, messages naming the
//! file, and nothing left behind when the input is bad.

use std::path::Path;
use std::process::Command;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn minerva(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(args)
        .output()
        .unwrap()
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn convert_writes_a_model_our_reader_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("llama-q8.gguf");
    let o = minerva(&[
        "convert",
        &format!("{FIXTURES}/llama/f32"),
        "--to",
        "gguf",
        "--quant",
        "q8_0",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let info = minerva(&["info", out.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(v["format"], "gguf");
    assert_eq!(v["dtypes"]["Q8_0"], 16);
}

#[test]
fn bad_input_fails_with_status_1_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("broken.gguf");
    let bytes = std::fs::read(format!("{FIXTURES}/llama/gguf-q8_0/llama-Q8_0.gguf")).unwrap();
    std::fs::write(&bad, &bytes[..4000]).unwrap();
    let out = tmp.path().join("out");
    let o = minerva(&[
        "convert",
        bad.to_str().unwrap(),
        "--to",
        "safetensors",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("broken.gguf"), "{err}");
    assert_eq!(listing(tmp.path()), ["broken.gguf"]);
    let o = minerva(&[
        "convert",
        &format!("{FIXTURES}/llama/f32"),
        "--to",
        "gguf",
        "--quant",
        "q3_k",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("q3_k"));
    assert_eq!(listing(tmp.path()), ["broken.gguf"]);
}

#[test]
fn synth_writes_each_format_from_the_same_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let o = minerva(&[
        "synth",
        "tiny-llama",
        "--out",
        tmp.path().to_str().unwrap(),
        "--formats",
        "gguf:f32,safetensors:f32,mlx:8",
        "--seed",
        "5",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        listing(tmp.path()),
        ["gguf-f32", "mlx-8bit", "safetensors-f32"]
    );
    let info = |p: &Path| -> serde_json::Value {
        serde_json::from_slice(&minerva(&["info", p.to_str().unwrap(), "--json"]).stdout).unwrap()
    };
    let g = info(&tmp.path().join("gguf-f32/tiny-llama-F32.gguf"));
    let s = info(&tmp.path().join("safetensors-f32"));
    assert_eq!(g["parameters"], s["parameters"]);
    let o = minerva(&[
        "synth",
        "no-such-shape",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("tinyllama-1.1b"));
}
