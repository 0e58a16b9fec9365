//! Converted models run in the engine: `minerva score` logits of each converted fixture against
//! the fixtures' reference logits. Lossless conversions and conversions whose bytes equal
//! llama.cpp's files match to float noise; MLX 4-bit stays as close to the f32 logits as mlx-lm's
//! own 4-bit folder does.

use std::path::Path;
use std::process::Command;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn minerva(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "minerva {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn f32_tensor(path: &Path, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn reference(variant: &str) -> Vec<f32> {
    f32_tensor(
        &Path::new(FIXTURES)
            .join(variant)
            .join("reference.safetensors"),
        "logits",
    )
}

fn ids(arch: &str) -> String {
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(FIXTURES).join(arch).join("f32/reference.json"))
            .unwrap(),
    )
    .unwrap();
    r["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn score(model: &Path, ids: &str, out: &Path) -> Vec<f32> {
    minerva(&[
        "score",
        model.to_str().unwrap(),
        "--ids",
        ids,
        "--out",
        out.to_str().unwrap(),
    ]);
    f32_tensor(out, "logits")
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn mean_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f32>() / a.len() as f32
}

#[test]
fn converted_fixtures_score_like_their_references() {
    let tmp = tempfile::tempdir().unwrap();
    let t = |n: &str| tmp.path().join(n);
    for (arch, quant, same_as) in [
        ("llama", "q8_0", "llama/gguf-q8_0"),
        ("llama", "q4_0", "llama/gguf-q4_0"),
        ("qwen3", "q8_0", "qwen3/gguf-q8_0"),
        ("mixtral", "q4_k_m", "mixtral/gguf-q4_k_m"),
        ("gpt_oss", "mxfp4", "gpt_oss/gguf-mxfp4_moe"),
    ] {
        let src = Path::new(FIXTURES).join(arch).join("f32");
        let ids = ids(arch);
        let f32_ref = reference(&format!("{arch}/f32"));
        // HF → GGUF f32 → HF f32: lossless.
        let (gguf, back) = (t(&format!("{arch}.gguf")), t(&format!("{arch}-back")));
        if !gguf.exists() {
            minerva(&[
                "convert",
                src.to_str().unwrap(),
                "--to",
                "gguf",
                "--quant",
                "f32",
                "--out",
                gguf.to_str().unwrap(),
            ]);
            minerva(&[
                "convert",
                gguf.to_str().unwrap(),
                "--to",
                "safetensors",
                "--quant",
                "f32",
                "--out",
                back.to_str().unwrap(),
            ]);
            for m in [&gguf, &back] {
                let d = max_abs(&score(m, &ids, &t("l.st")), &f32_ref);
                assert!(d < 1e-3, "{arch}: {} logits differ by {d}", m.display());
            }
        }
        // HF → quantized GGUF: the same bytes as llama.cpp's file, so its reference logits.
        let q = t(&format!("{arch}-{quant}.gguf"));
        minerva(&[
            "convert",
            src.to_str().unwrap(),
            "--to",
            "gguf",
            "--quant",
            quant,
            "--out",
            q.to_str().unwrap(),
        ]);
        let d = max_abs(&score(&q, &ids, &t("l.st")), &reference(same_as));
        assert!(
            d < 1e-3,
            "{arch} {quant}: logits differ from {same_as}'s reference by {d}"
        );
    }
    // HF → MLX 4-bit: no further from the f32 logits than mlx-lm's own 4-bit folder.
    let mlx = t("llama-mlx4");
    minerva(&[
        "convert",
        &format!("{FIXTURES}/llama/f32"),
        "--to",
        "mlx",
        "--quant",
        "4",
        "--out",
        mlx.to_str().unwrap(),
    ]);
    let f32_ref = reference("llama/f32");
    let ours = mean_abs(&score(&mlx, &ids("llama"), &t("l.st")), &f32_ref);
    let theirs = mean_abs(&reference("llama/mlx-4bit"), &f32_ref);
    assert!(
        ours <= theirs * 1.1,
        "MLX 4-bit: mean |logit error| {ours} vs mlx-lm's {theirs}"
    );
}

#[test]
fn synthetic_formats_hold_the_same_weights_in_the_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = "1,17,200,42,99,7,5,300";
    for shape in ["tiny-llama", "tiny-qwen3", "tiny-gpt-oss"] {
        let dir = tmp.path().join(shape);
        minerva(&[
            "synth",
            shape,
            "--out",
            dir.to_str().unwrap(),
            "--formats",
            "gguf:f32,safetensors:f32,gguf:q8_0,mlx:8",
            "--seed",
            "4",
        ]);
        let gguf = |q: &str| {
            dir.join(format!("gguf-{q}"))
                .join(format!("{shape}-{}.gguf", q.to_ascii_uppercase()))
        };
        let f32_logits = score(&gguf("f32"), ids, &tmp.path().join("a.st"));
        let st = score(&dir.join("safetensors-f32"), ids, &tmp.path().join("b.st"));
        assert!(
            max_abs(&st, &f32_logits) < 1e-3,
            "{shape}: SafeTensors and GGUF f32 differ"
        );
        for q in [
            score(&gguf("q8_0"), ids, &tmp.path().join("c.st")),
            score(&dir.join("mlx-8bit"), ids, &tmp.path().join("d.st")),
        ] {
            let d = max_abs(&q, &f32_logits);
            assert!(
                d > 0.0 && d < 0.5,
                "{shape}: 8-bit logits differ from f32 by {d}"
            );
        }
    }
}
