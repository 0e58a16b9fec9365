//! `minerva score` end to end: the written logits match the fixture's reference.

use safetensors::SafeTensors;
use std::path::Path;
use std::process::Command;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn floats(st: &SafeTensors, name: &str) -> (Vec<usize>, Vec<f32>) {
    let t = st.tensor(name).unwrap();
    (
        t.shape().to_vec(),
        t.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

#[test]
fn score_writes_reference_logits() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logits.safetensors");
    let model = Path::new(FIXTURES).join("qwen3/gguf-q8_0/qwen3-Q8_0.gguf");
    // The first five prompt ids of the fixture: causal attention makes their logits the
    // reference's first five rows. The reference is a float32 run: the CPU's f32 products.
    let status = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .env("MINERVA_CPU_PRODUCTS", "f32")
        .args([
            "score",
            model.to_str().unwrap(),
            "--ids",
            "330,223,449,358,77",
            "--out",
            out.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&out).unwrap();
    let (shape, got) = floats(&SafeTensors::deserialize(&bytes).unwrap(), "logits");
    assert_eq!(shape, [5, 512]);
    let rb =
        std::fs::read(Path::new(FIXTURES).join("qwen3/gguf-q8_0/reference.safetensors")).unwrap();
    let (_, want) = floats(&SafeTensors::deserialize(&rb).unwrap(), "logits");
    let d = got
        .iter()
        .zip(&want[..5 * 512])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(d < 1e-3, "max abs diff {d}");
}

#[test]
fn score_errors_are_clear() {
    let model = Path::new(FIXTURES).join("llama/f32");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_minerva"))
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&[
        "score",
        model.to_str().unwrap(),
        "--ids",
        "1,9999",
        "--out",
        "/nonexistent/x.safetensors",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("token id 9999"));
}
