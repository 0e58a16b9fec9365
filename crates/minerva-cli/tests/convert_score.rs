//! Converted models run in the engine: `minerva score` logits of each converted fixture against
//! the fixtures' reference logits. Lossless conversions and conversions whose bytes equal
//! llama.cpp's files match to float noise; MLX 4-bit stays as close to the f32 logits as mlx-lm's
//! own 4-bit folder does.

mod common;

use common::{minerva, minerva_with};
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

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

/// `minerva score` logits with the CPU's f32 products: the references are float32 runs.
fn score(model: &Path, ids: &str, out: &Path) -> Vec<f32> {
    minerva_with(
        &[
            "score",
            model.to_str().unwrap(),
            "--ids",
            ids,
            "--out",
            out.to_str().unwrap(),
        ],
        &[("MINERVA_CPU_PRODUCTS", "f32")],
    );
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

/// Llama 3 RoPE scaling lives in config.json for SafeTensors but in a `rope_freqs.weight`
/// tensor for GGUF: both must give the same logits, and the scaling must matter.
#[test]
fn llama3_rope_scaling_agrees_across_formats() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("llama3-hf");
    std::fs::create_dir(&hf).unwrap();
    for entry in std::fs::read_dir(Path::new(FIXTURES).join("llama/f32")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, hf.join(p.file_name().unwrap())).unwrap();
    }
    let config_path = hf.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    // Short original context so that the fixture's head_dim 32 has frequencies in all three
    // llama3 bands (kept, blended, divided by the factor).
    config["rope_parameters"] = serde_json::json!({
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16
    });
    std::fs::write(&config_path, config.to_string()).unwrap();
    let gguf = tmp.path().join("llama3.gguf");
    minerva(&[
        "convert",
        hf.to_str().unwrap(),
        "--to",
        "gguf",
        "--quant",
        "f32",
        "--out",
        gguf.to_str().unwrap(),
    ]);

    let ids = ids("llama");
    let from_hf = score(&hf, &ids, &tmp.path().join("hf.safetensors"));
    let from_gguf = score(&gguf, &ids, &tmp.path().join("gguf.safetensors"));
    assert!(
        max_abs(&from_hf, &from_gguf) < 1e-4,
        "{}",
        max_abs(&from_hf, &from_gguf)
    );
    assert!(
        max_abs(&from_hf, &reference("llama/f32")) > 1e-2,
        "the scaling changed nothing"
    );
}
