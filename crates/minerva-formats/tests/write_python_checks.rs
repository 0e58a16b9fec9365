//! Our files read and run by other people's tools: every GGUF quant type through gguf-py
//! (llama.cpp's Python package) against the f32 GGUF of the same synthetic weights, with BF16,
//! Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 bytes equal to gguf-py's own quantizer's; MLX folders through
//! mlx's loader and `mx.dequantize` against the f32 SafeTensors folder, with our error no worse
//! than `mx.quantize`'s; converted and synthetic MLX folders run by mlx-lm and SafeTensors folders
//! by transformers; tokenizer.json files written for GGUF tokenizers tokenized by Hugging Face
//! `tokenizers` as the GGUF's own tokenizer does. Needs `python3` with gguf, numpy, safetensors,
//! mlx, mlx-lm, torch, transformers and tokenizers installed.

use minerva_formats::synth::{self, shapes};
use minerva_formats::write::model::parse_target;
use minerva_formats::write::tokenizer::tokenizer_json_from_gguf;
use minerva_formats::{MetaValue, Metadata};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tool(script: &str, args: &[&str]) -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/").to_string() + script;
    let out = Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{script} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn synth_to(shape: &str, format: &str, quant: &str, out: &Path) {
    let model = synth::model(&shapes::shape(shape).unwrap(), 7);
    let target = parse_target(&model, format, Some(quant), None).unwrap();
    model.write(&target, out, &|_| {}).unwrap();
}

/// Relative RMSE bound of each GGUF type on Gaussian weights (measured errors are below these
/// by a margin; a wrong layout gives errors near or above 1).
fn bound(ty: &str) -> f64 {
    match ty {
        "F32" => 0.0,
        "F16" => 1e-3,
        "BF16" => 5e-3,
        "Q8_0" => 0.01,
        "Q6_K" => 0.025,
        "Q5_0" | "Q5_1" | "Q5_K" => 0.05,
        "Q4_0" | "Q4_1" | "Q4_K" => 0.1,
        "MXFP4" => 0.15,
        other => panic!("unexpected type {other}"),
    }
}

#[test]
fn gguf_files_read_by_gguf_py_with_expected_error() {
    let tmp = tempfile::tempdir().unwrap();
    for shape in ["tiny-llama", "tiny-gpt-oss", "tiny-qwen3"] {
        let reference = tmp.path().join(format!("{shape}-f32.gguf"));
        synth_to(shape, "gguf", "f32", &reference);
        for quant in [
            "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m", "q5_k_m", "q6_k",
            "mxfp4",
        ] {
            let file = tmp.path().join(format!("{shape}-{quant}.gguf"));
            synth_to(shape, "gguf", quant, &file);
            let r = tool(
                "check_gguf.py",
                &[
                    file.to_str().unwrap(),
                    "--reference",
                    reference.to_str().unwrap(),
                ],
            );
            let arch = if shape == "tiny-gpt-oss" {
                "gpt-oss"
            } else if shape == "tiny-qwen3" {
                "qwen3"
            } else {
                "llama"
            };
            assert_eq!(r["architecture"], arch);
            assert_eq!(r["metadata"]["tokenizer.ggml.model"], "gpt2");
            assert!(r["metadata"]["tokenizer.chat_template"]
                .as_str()
                .is_some_and(|t| !t.is_empty()));
            assert_eq!(
                r["tokens"],
                shapes::shape(shape).unwrap().config["vocab_size"],
                "{shape}: tokenizer size"
            );
            let mut types = std::collections::BTreeSet::new();
            for (name, t) in r["tensors"].as_object().unwrap() {
                let ty = t["type"].as_str().unwrap();
                types.insert(ty.to_string());
                let e = r["relative_rmse"][name].as_f64().unwrap();
                assert!(
                    e <= bound(ty),
                    "{shape} {quant}: {name} ({ty}) relative RMSE {e}"
                );
            }
            let want = match quant {
                "q4_k_m" => "Q4_K".to_string(),
                "q5_k_m" => "Q5_K".to_string(),
                q => q.to_ascii_uppercase(),
            };
            assert!(
                types.contains(&want),
                "{shape} {quant}: no {want} tensor among {types:?}"
            );
        }
    }
}

#[test]
fn mlx_folders_read_by_mlx_with_error_no_worse_than_mlx_quantize() {
    let tmp = tempfile::tempdir().unwrap();
    for shape in ["tiny-llama", "tiny-gpt-oss"] {
        let reference = tmp.path().join(format!("{shape}-f32"));
        synth_to(shape, "safetensors", "f32", &reference);
        for quant in ["2", "3", "4", "5", "6", "8", "mxfp4"] {
            let dir = tmp.path().join(format!("{shape}-mlx-{quant}"));
            synth_to(shape, "mlx", quant, &dir);
            let r = tool(
                "check_mlx.py",
                &[
                    dir.to_str().unwrap(),
                    "--reference",
                    reference.to_str().unwrap(),
                    "--mlx-quantize",
                ],
            );
            let quantized = r["quantized"].as_object().unwrap();
            assert!(
                quantized.len() >= 10,
                "{shape} mlx {quant}: only {} quantized modules",
                quantized.len()
            );
            if shape == "tiny-gpt-oss" {
                assert_eq!(
                    r["quantized"]["model.layers.0.mlp.router"]["bits"], 8,
                    "router kept at 8 bits"
                );
            }
            for (name, theirs) in r["mlx_relative_rmse"].as_object().unwrap() {
                let (ours, theirs) = (
                    r["relative_rmse"][name].as_f64().unwrap(),
                    theirs.as_f64().unwrap(),
                );
                assert!(
                    ours <= theirs,
                    "{shape} mlx {quant}: {name} relative RMSE {ours} vs mx.quantize's {theirs}"
                );
            }
            for (name, e) in r["relative_rmse"].as_object().unwrap() {
                assert!(
                    e.as_f64().unwrap() < 0.6,
                    "{shape} mlx {quant}: {name} relative RMSE {e}"
                );
            }
        }
    }
}

fn fixture_logits(path: &Path, key: &str) -> Option<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(key).ok()?;
    Some(
        t.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

#[test]
fn converted_mlx_folders_run_in_mlx_lm() {
    let fixtures = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"));
    let tmp = tempfile::tempdir().unwrap();
    for arch in ["llama", "qwen3", "mixtral", "gpt_oss"] {
        let src = fixtures.join(arch).join("f32");
        let ck = minerva_formats::Checkpoint::open(&src).unwrap();
        let model = minerva_formats::write::from_checkpoint::model_from_checkpoint(&ck).unwrap();
        let dir = tmp.path().join(arch);
        model
            .write(
                &parse_target(&model, "mlx", Some("8"), None).unwrap(),
                &dir,
                &|_| {},
            )
            .unwrap();
        let reference: Value =
            serde_json::from_str(&std::fs::read_to_string(src.join("reference.json")).unwrap())
                .unwrap();
        let ids: Vec<String> = reference["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.to_string())
            .collect();
        let out = tmp.path().join(format!("{arch}-logits.safetensors"));
        tool(
            "check_mlx.py",
            &[
                dir.to_str().unwrap(),
                "--mlx-lm-logits",
                &ids.join(","),
                out.to_str().unwrap(),
            ],
        );
        let ours = fixture_logits(&out, "logits").unwrap();
        // mlx-lm implements gpt-oss's YaRN with the rounded correction range.
        let refs = src.join("reference.safetensors");
        let want = fixture_logits(&refs, "logits_yarn_truncated")
            .or_else(|| fixture_logits(&refs, "logits"))
            .unwrap();
        let d = ours
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        // 8-bit weights move these logits by about 0.2 (the engine sees the same on Q8_0).
        assert!(
            d < 0.4,
            "{arch}: mlx-lm logits of our 8-bit folder differ by {d} from the f32 reference"
        );
    }
}

#[test]
fn synthetic_models_run_in_transformers_and_mlx_lm_with_the_same_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = "1,17,200,42,99,7,5,300";
    for shape in ["tiny-llama", "tiny-qwen3", "tiny-gpt-oss"] {
        let (hf, mlx) = (
            tmp.path().join(format!("{shape}-hf")),
            tmp.path().join(format!("{shape}-mlx")),
        );
        synth_to(shape, "safetensors", "f32", &hf);
        synth_to(shape, "mlx", "8", &mlx);
        let (hf_out, mlx_out) = (
            tmp.path().join("hf.safetensors"),
            tmp.path().join("mlx.safetensors"),
        );
        let r = tool(
            "check_hf.py",
            &[hf.to_str().unwrap(), ids, hf_out.to_str().unwrap()],
        );
        assert_eq!(
            r["decoded"], "The quick brown fox jumps over the lazy dog.",
            "{shape}: tokenizer round trip"
        );
        assert_eq!(
            r["vocab"],
            shapes::shape(shape).unwrap().config["vocab_size"]
        );
        tool(
            "check_mlx.py",
            &[
                mlx.to_str().unwrap(),
                "--mlx-lm-logits",
                ids,
                mlx_out.to_str().unwrap(),
            ],
        );
        let (a, b) = (
            fixture_logits(&hf_out, "logits").unwrap(),
            fixture_logits(&mlx_out, "logits").unwrap(),
        );
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        let std = (a.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / a.len() as f32).sqrt();
        assert!(
            std > 0.3 && std < 10.0,
            "{shape}: transformers logit std {std}"
        );
        let d = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        // 8-bit weights (and gpt-oss's rounded YaRN range in mlx-lm) account for the difference.
        assert!(
            d < 0.35,
            "{shape}: transformers (f32 folder) and mlx-lm (8-bit folder) logits differ by {d}"
        );
    }
}

/// llama.cpp's GGUF files converted back to Hugging Face folders run in transformers exactly as
/// the fixtures' references (which were computed from the same dequantized weights): names,
/// q/k un-permutation, expert layouts and the rebuilt config.json all agree.
#[test]
fn gguf_fixtures_converted_to_hf_run_in_transformers_like_their_references() {
    let fixtures = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"));
    let tmp = tempfile::tempdir().unwrap();
    for (arch, variant) in [
        ("llama", "gguf-q4_0/llama-Q4_0.gguf"),
        ("qwen3", "gguf-q8_0/qwen3-Q8_0.gguf"),
        ("mixtral", "gguf-q4_k_m/mixtral-Q4_K_M.gguf"),
        ("gpt_oss", "gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf"),
    ] {
        let src = fixtures.join(arch).join(variant);
        let ck = minerva_formats::Checkpoint::open(&src).unwrap();
        let model = minerva_formats::write::from_checkpoint::model_from_checkpoint(&ck).unwrap();
        let dir = tmp.path().join(arch);
        model
            .write(
                &parse_target(&model, "safetensors", Some("f32"), None).unwrap(),
                &dir,
                &|_| {},
            )
            .unwrap();
        let reference: Value = serde_json::from_str(
            &std::fs::read_to_string(src.parent().unwrap().join("reference.json")).unwrap(),
        )
        .unwrap();
        let ids: Vec<String> = reference["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.to_string())
            .collect();
        let out = tmp.path().join(format!("{arch}.safetensors"));
        tool(
            "check_hf.py",
            &[dir.to_str().unwrap(), &ids.join(","), out.to_str().unwrap()],
        );
        let ours = fixture_logits(&out, "logits").unwrap();
        let want = fixture_logits(
            &src.parent().unwrap().join("reference.safetensors"),
            "logits",
        )
        .unwrap();
        let d = ours
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            d < 1e-3,
            "{arch}: transformers on the converted folder differs from the reference by {d}"
        );
    }
}

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn meta_value(v: &Value) -> MetaValue {
    match v {
        Value::Bool(b) => MetaValue::Bool(*b),
        Value::String(s) => MetaValue::String(s.clone()),
        Value::Number(n) if n.is_f64() => MetaValue::F32(n.as_f64().unwrap() as f32),
        Value::Number(n) if n.is_i64() && n.as_i64().unwrap() < 0 => {
            MetaValue::I32(n.as_i64().unwrap() as i32)
        }
        Value::Number(n) => MetaValue::U32(n.as_u64().unwrap() as u32),
        Value::Array(a) => MetaValue::Array(a.iter().map(meta_value).collect()),
        other => panic!("no GGUF value for {other}"),
    }
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// `tokenizers`' ids and decodings of `strings` under the tokenizer.json written for `md`.
fn hf_tokenize(md: &Metadata, strings: &[&str], dir: &Path) -> (Vec<Vec<u32>>, Vec<String>) {
    std::fs::create_dir_all(dir).unwrap();
    let written = tokenizer_json_from_gguf(md, Path::new("model.gguf"))
        .unwrap()
        .unwrap();
    let (tj, sj) = (dir.join("tokenizer.json"), dir.join("strings.json"));
    std::fs::write(&tj, written.to_string()).unwrap();
    std::fs::write(&sj, serde_json::to_string(strings).unwrap()).unwrap();
    let r = tool(
        "check_tokenizer_json.py",
        &[tj.to_str().unwrap(), sj.to_str().unwrap()],
    );
    let ids = r["ids"].as_array().unwrap().iter().map(u32s).collect();
    let decoded = r["decoded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    (ids, decoded)
}

/// The tokenizer.json written for a GGUF tokenizer (`convert` to SafeTensors or MLX) is loaded by
/// Hugging Face `tokenizers` with the GGUF's own pre-tokenizer: under `llama-bpe`, `qwen2` and
/// `gpt-4o` the small vocabulary of tests/fixtures/text/pre_tokenizer_ids.json gives the ids
/// recorded there (those of the models' own tokenizer.json regexes, which minerva-text's GGUF
/// tokenizer matches), digits and runs of spaces included; and SmolLM2's GGUF (`smollm`, when
/// scripts/setup.sh has fetched it) gives transformers' reference ids.
#[test]
fn tokenizer_json_from_gguf_tokenizes_in_hf_tokenizers_like_the_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let data = read_json(&fixtures().join("text/pre_tokenizer_ids.json"));
    let strings: Vec<&str> = data["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    // Digit runs and runs of spaces are where the splits differ.
    assert!(strings.iter().any(|s| s.contains("12345")));
    assert!(strings.iter().any(|s| s.contains("   ")));
    let names = data["ids"].as_object().unwrap();
    assert_eq!(names.len(), 3);
    for (name, expected) in names {
        let mut md = Metadata::default();
        for (k, v) in data["metadata"].as_object().unwrap() {
            md.0.insert(k.clone(), meta_value(v));
        }
        md.0.insert("tokenizer.ggml.pre".into(), MetaValue::String(name.clone()));
        let (ids, decoded) = hf_tokenize(&md, &strings, &tmp.path().join(name));
        for (i, s) in strings.iter().enumerate() {
            assert_eq!(ids[i], u32s(&expected[i]), "pre '{name}' on {s:?}");
            assert_eq!(decoded[i], *s, "pre '{name}' decode of {s:?}");
        }
    }

    let smollm2 = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.cache/models"))
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !smollm2.is_file() {
        eprintln!("SKIPPED SmolLM2: {} is missing", smollm2.display());
        return;
    }
    let ck = minerva_formats::Checkpoint::open(&smollm2).unwrap();
    assert_eq!(ck.metadata.get_str("tokenizer.ggml.pre"), Some("smollm"));
    let r = read_json(&fixtures().join("smollm2/reference.json"));
    let (t, d) = (&r["tokenization"], &r["tokenization_divergent"]);
    let texts = [t["text"].as_str().unwrap(), d["text"].as_str().unwrap()];
    let (ids, decoded) = hf_tokenize(&ck.metadata, &texts, &tmp.path().join("smollm2"));
    assert_eq!(ids[0], u32s(&t["ids"]));
    // Spaces before digits: SmolLM2's own split (digits first) keeps "  " whole.
    assert_eq!(ids[1], u32s(&d["ids_smollm_pretokenizer"]));
    assert_eq!(decoded, texts);
}
