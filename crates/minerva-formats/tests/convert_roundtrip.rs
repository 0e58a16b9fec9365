//! Convert round trips on the fixtures, read back with our own readers: lossless paths give
//! the same tensors exactly, and GGUF files converted from the f32 folders equal llama.cpp's
//! own files tensor for tensor (names, types, q/k permutation, quantized bytes).

use minerva_formats::write::from_checkpoint::model_from_checkpoint;
use minerva_formats::write::model::parse_target;
use minerva_formats::{dequantize, Checkpoint, TensorData};
use std::path::{Path, PathBuf};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn fixture(rel: &str) -> PathBuf {
    Path::new(FIXTURES).join(rel)
}

/// Converts `input` to `format`/`quant` at `out`.
fn convert(input: &Path, format: &str, quant: Option<&str>, out: &Path) {
    let ck = Checkpoint::open(input).unwrap();
    let model = model_from_checkpoint(&ck).unwrap();
    let target = parse_target(&model, format, quant, None).unwrap();
    model.write(&target, out, &|_| {}).unwrap();
}

fn plain_bytes<'a>(ck: &'a Checkpoint, name: &str) -> &'a [u8] {
    match ck
        .tensor(name)
        .unwrap_or_else(|| panic!("{name} missing"))
        .data
    {
        TensorData::Plain(b) => b,
        _ => panic!("{name} is not a plain tensor"),
    }
}

/// Every tensor of `theirs` is in `ours` with the same shape, dtype and bytes.
fn assert_same_gguf(ours: &Path, theirs: &Path) {
    let (a, b) = (
        Checkpoint::open(ours).unwrap(),
        Checkpoint::open(theirs).unwrap(),
    );
    assert_eq!(a.tensor_count(), b.tensor_count(), "tensor count");
    for t in b.tensors() {
        let o = a
            .tensor(t.name)
            .unwrap_or_else(|| panic!("{} missing from our file", t.name));
        assert_eq!(
            (o.shape.clone(), o.dtype),
            (t.shape.clone(), t.dtype),
            "{}",
            t.name
        );
        assert!(
            plain_bytes(&a, t.name) == plain_bytes(&b, t.name),
            "{} ({}) bytes differ",
            t.name,
            t.dtype.name()
        );
    }
}

#[test]
fn hf_to_gguf_equals_llama_cpp_files() {
    let tmp = tempfile::tempdir().unwrap();
    for (src, quant, theirs) in [
        ("llama/f32", "f32", "llama/gguf-f32/llama-F32.gguf"),
        ("llama/f32", "q8_0", "llama/gguf-q8_0/llama-Q8_0.gguf"),
        ("llama/f32", "q4_0", "llama/gguf-q4_0/llama-Q4_0.gguf"),
        ("qwen3/f32", "q8_0", "qwen3/gguf-q8_0/qwen3-Q8_0.gguf"),
        (
            "mixtral/f32",
            "q4_k_m",
            "mixtral/gguf-q4_k_m/mixtral-Q4_K_M.gguf",
        ),
        (
            "gpt_oss/f32",
            "mxfp4",
            "gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf",
        ),
    ] {
        let out = tmp
            .path()
            .join(format!("{}-{quant}.gguf", src.replace('/', "-")));
        convert(&fixture(src), "gguf", Some(quant), &out);
        assert_same_gguf(&out, &fixture(theirs));
        let (a, b) = (
            Checkpoint::open(&out).unwrap(),
            Checkpoint::open(fixture(theirs)).unwrap(),
        );
        for key in b.metadata.0.keys().filter(|k| {
            ![
                "general.name",
                "general.size_label",
                "tokenizer.ggml.add_sep_token",
            ]
            .contains(&k.as_str())
        }) {
            assert_eq!(
                a.metadata.get(key),
                b.metadata.get(key),
                "{src} {quant}: metadata {key}"
            );
        }
        assert_eq!(
            a.spec().unwrap(),
            b.spec().unwrap(),
            "{src} {quant}: ModelSpec"
        );
    }
}

/// All tensors of two checkpoints equal after dequantization (same names).
fn assert_same_values(a: &Checkpoint, b: &Checkpoint) {
    assert_eq!(a.tensor_count(), b.tensor_count());
    for t in b.tensors() {
        let o = a
            .tensor(t.name)
            .unwrap_or_else(|| panic!("{} missing", t.name));
        assert_eq!(o.shape, t.shape, "{}", t.name);
        assert!(
            dequantize(&o).unwrap() == dequantize(&t).unwrap(),
            "{} differs",
            t.name
        );
    }
}

#[test]
fn lossless_round_trips_through_every_format_layout() {
    let tmp = tempfile::tempdir().unwrap();
    // HF → GGUF f32 → HF f32 undoes the q/k permutation, the expert stacking (mixtral) and the
    // gpt-oss fused/transposed expert layout exactly.
    for arch in ["llama", "qwen3", "mixtral", "gpt_oss"] {
        let src = fixture(&format!("{arch}/f32"));
        let gguf = tmp.path().join(format!("{arch}.gguf"));
        let back = tmp.path().join(format!("{arch}-st"));
        convert(&src, "gguf", Some("f32"), &gguf);
        convert(&gguf, "safetensors", Some("f32"), &back);
        let (a, b) = (
            Checkpoint::open(&back).unwrap(),
            Checkpoint::open(&src).unwrap(),
        );
        assert_same_values(&a, &b);
        assert_eq!(
            a.spec().unwrap(),
            b.spec().unwrap(),
            "{arch}: ModelSpec after GGUF and back"
        );
        for f in ["tokenizer.json", "chat_template.jinja"] {
            assert!(a.companion(f).is_some(), "{arch}: {f} not carried");
        }
        let tok_a: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(back.join("tokenizer.json")).unwrap())
                .unwrap();
        let tok_b: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(src.join("tokenizer.json")).unwrap())
                .unwrap();
        assert_eq!(
            tok_a["model"]["vocab"], tok_b["model"]["vocab"],
            "{arch}: vocabulary after GGUF and back"
        );
        assert_eq!(
            std::fs::read_to_string(back.join("chat_template.jinja"))
                .unwrap()
                .trim(),
            std::fs::read_to_string(src.join("chat_template.jinja"))
                .unwrap()
                .trim()
        );
    }
    // bf16 and f16 folders copy their bytes through any float target of the same type.
    let bf = tmp.path().join("bf16");
    convert(&fixture("llama/bf16"), "safetensors", Some("bf16"), &bf);
    assert_same_values(
        &Checkpoint::open(&bf).unwrap(),
        &Checkpoint::open(fixture("llama/bf16")).unwrap(),
    );
    // An MLX folder re-written at the same quantization keeps its packs unchanged.
    let mlx = tmp.path().join("mlx");
    convert(&fixture("llama/mlx-4bit"), "mlx", Some("4"), &mlx);
    assert_same_values(
        &Checkpoint::open(&mlx).unwrap(),
        &Checkpoint::open(fixture("llama/mlx-4bit")).unwrap(),
    );
}

/// Relative RMSE of a quantized tensor against its f32 original.
fn rel_rmse(q: &[f32], x: &[f32]) -> f64 {
    let err: f64 = q.iter().zip(x).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let rms: f64 = x.iter().map(|b| (*b as f64).powi(2)).sum();
    (err / rms).sqrt()
}

#[test]
fn mlx_affine_error_no_worse_than_mlx_lm() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("mlx4");
    convert(&fixture("llama/f32"), "mlx", Some("4"), &out);
    let ours = Checkpoint::open(&out).unwrap();
    let theirs = Checkpoint::open(fixture("llama/mlx-4bit")).unwrap();
    let f32s = Checkpoint::open(fixture("llama/f32")).unwrap();
    let mut compared = 0;
    for t in theirs.tensors().filter(|t| t.dtype.is_quantized()) {
        let x = dequantize(&f32s.tensor(t.name).unwrap()).unwrap();
        let o = ours.tensor(t.name).unwrap();
        assert_eq!(o.dtype, t.dtype, "{}", t.name);
        let (e_ours, e_theirs) = (
            rel_rmse(&dequantize(&o).unwrap(), &x),
            rel_rmse(&dequantize(&t).unwrap(), &x),
        );
        assert!(
            e_ours <= e_theirs,
            "{}: relative RMSE {e_ours} vs mlx-lm's {e_theirs}",
            t.name
        );
        compared += 1;
    }
    assert_eq!(compared, 16);
}

#[test]
fn gguf_to_gguf_keeps_quantized_bytes_and_mxfp4_crosses_formats_losslessly() {
    let tmp = tempfile::tempdir().unwrap();
    // Same quant in and out: every tensor is copied, permuted q/k rows included.
    let q4 = fixture("llama/gguf-q4_0/llama-Q4_0.gguf");
    let out = tmp.path().join("again.gguf");
    convert(&q4, "gguf", Some("q4_0"), &out);
    assert_same_gguf(&out, &q4);
    // GGUF MXFP4 → MLX mxfp4 → GGUF MXFP4: the experts' values survive both nibble orders.
    let src = fixture("gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf");
    let mlx = tmp.path().join("mlx");
    convert(&src, "mlx", Some("mxfp4"), &mlx);
    let back = tmp.path().join("back.gguf");
    convert(&mlx, "gguf", Some("mxfp4"), &back);
    let (a, m, b) = (
        Checkpoint::open(&src).unwrap(),
        Checkpoint::open(&mlx).unwrap(),
        Checkpoint::open(&back).unwrap(),
    );
    let mut experts = 0;
    for t in a
        .tensors()
        .filter(|t| t.dtype == minerva_formats::DType::MXFP4)
    {
        let id = minerva_formats::names::parse_gguf(minerva_formats::Architecture::GptOss, t.name)
            .unwrap();
        let mlx_name =
            minerva_formats::names::mlx_name(minerva_formats::Architecture::GptOss, id).unwrap();
        let mv = m.tensor(&mlx_name).unwrap();
        assert_eq!(mv.dtype, minerva_formats::DType::MlxMxfp4, "{mlx_name}");
        let x = dequantize(&t).unwrap();
        assert!(
            dequantize(&mv).unwrap() == x,
            "{mlx_name} differs from {}",
            t.name
        );
        assert!(
            plain_bytes(&b, t.name) == plain_bytes(&a, t.name),
            "{} bytes after MLX and back",
            t.name
        );
        experts += 1;
    }
    assert_eq!(experts, 6);
}

#[test]
fn sharded_safetensors_and_mlx_folders_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("mixtral/f32");
    let ck = Checkpoint::open(&src).unwrap();
    let mut model = model_from_checkpoint(&ck).unwrap();
    model.shard_bytes = 1 << 20;
    for (format, quant) in [("safetensors", "f32"), ("mlx", "8")] {
        let out = tmp.path().join(format);
        let target = parse_target(&model, format, Some(quant), None).unwrap();
        model.write(&target, &out, &|_| {}).unwrap();
        let index: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join("model.safetensors.index.json")).unwrap(),
        )
        .unwrap();
        let files: std::collections::BTreeSet<&str> = index["weight_map"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(files.len() >= 2, "{format}: {files:?}");
        assert!(
            files
                .iter()
                .all(|f| f.starts_with("model-0000")
                    && f.contains(&format!("-of-{:05}", files.len()))),
            "{files:?}"
        );
        let back = Checkpoint::open(&out).unwrap();
        if format == "safetensors" {
            assert_same_values(&back, &ck);
        } else {
            assert_eq!(back.tensor_count(), 13);
            assert_eq!(back.spec().unwrap().moe, ck.spec().unwrap().moe);
        }
    }
}
