//! Writing is atomic and bad input fails cleanly: a failure part-way, a malformed or
//! unsupported input, or an existing target leave nothing behind under the final name (and no
//! temporary either).

use minerva_formats::write::from_checkpoint::model_from_checkpoint;
use minerva_formats::write::gguf::write_gguf;
use minerva_formats::write::model::parse_target;
use minerva_formats::write::safetensors::write_safetensors;
use minerva_formats::write::{AtomicOutput, OutTensor, Source};
use minerva_formats::{Checkpoint, DType, FormatError};
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_failing_tensor_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("model.gguf");
    let ok = OutTensor::new(
        "a.weight",
        vec![64, 32],
        DType::Q8_0,
        Source::Rows(Box::new(|_, _, out: &mut [f32]| {
            out.fill(0.5);
            Ok(())
        })),
    );
    let failing = OutTensor::new(
        "b.weight",
        vec![4096, 512],
        DType::Q4_0,
        Source::Rows(Box::new(|first, _, out: &mut [f32]| {
            if first > 1000 {
                return Err(FormatError::malformed("source.bin", "row read failed"));
            }
            out.fill(1.0);
            Ok(())
        })),
    );
    let out = AtomicOutput::file(&target).unwrap();
    let err = write_gguf(out.path(), &[], &[ok, failing], &|_| {}).unwrap_err();
    assert!(err.to_string().contains("row read failed"), "{err}");
    drop(out);
    assert!(
        entries(tmp.path()).is_empty(),
        "left behind: {:?}",
        entries(tmp.path())
    );
}

#[test]
fn an_existing_target_is_refused_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("out");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep.txt"), "mine").unwrap();
    let ck = Checkpoint::open(Path::new(FIXTURES).join("llama/f32")).unwrap();
    let model = model_from_checkpoint(&ck).unwrap();
    let t = parse_target(&model, "safetensors", Some("bf16"), None).unwrap();
    let err = model.write(&t, &target, &|_| {}).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(entries(&target), ["keep.txt"]);
    assert_eq!(entries(tmp.path()), ["out"]);
}

#[test]
fn malformed_and_unsupported_inputs_fail_with_the_file_named() {
    let tmp = tempfile::tempdir().unwrap();
    // A GGUF cut short in its tensor data.
    let bytes = std::fs::read(Path::new(FIXTURES).join("llama/gguf-q8_0/llama-Q8_0.gguf")).unwrap();
    let cut = tmp.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let err = Checkpoint::open(&cut).unwrap_err();
    assert!(err.to_string().contains("cut.gguf"), "{err}");
    // A folder whose config names an architecture convert does not know.
    let odd = tmp.path().join("odd");
    std::fs::create_dir(&odd).unwrap();
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(Path::new(FIXTURES).join("llama/f32").join(f), odd.join(f)).unwrap();
    }
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(FIXTURES).join("llama/f32/config.json")).unwrap(),
    )
    .unwrap();
    config["model_type"] = "falcon".into();
    std::fs::write(odd.join("config.json"), config.to_string()).unwrap();
    let ck = Checkpoint::open(&odd).unwrap();
    let err = model_from_checkpoint(&ck)
        .err()
        .expect("unknown model_type is refused");
    assert!(
        err.to_string().contains("falcon") && err.to_string().contains("config.json"),
        "{err}"
    );
    // A tensor with no known role.
    let bad = tmp.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    let t = OutTensor::new(
        "model.layers.0.mystery.weight",
        vec![4, 8],
        DType::F32,
        Source::Rows(Box::new(|_, _, o: &mut [f32]| {
            o.fill(1.0);
            Ok(())
        })),
    );
    write_safetensors(&bad, &[t], 1 << 30, "pt", false, &|_| {}).unwrap();
    std::fs::copy(
        Path::new(FIXTURES).join("llama/f32/config.json"),
        bad.join("config.json"),
    )
    .unwrap();
    let ck = Checkpoint::open(&bad).unwrap();
    let err = model_from_checkpoint(&ck)
        .err()
        .expect("unknown tensor is refused");
    assert!(
        err.to_string().contains("model.layers.0.mystery.weight"),
        "{err}"
    );
    // Unknown targets and quants are refused before anything is written.
    let ck = Checkpoint::open(Path::new(FIXTURES).join("gpt_oss/f32")).unwrap();
    let model = model_from_checkpoint(&ck).unwrap();
    for (f, q) in [
        ("gguf", "q3_k"),
        ("mlx", "7"),
        ("safetensors", "q4_0"),
        ("onnx", "f32"),
    ] {
        assert!(
            parse_target(&model, f, Some(q), None).is_err(),
            "{f}:{q} accepted"
        );
    }
    assert!(
        entries(tmp.path()).iter().all(|e| !e.starts_with('.')),
        "{:?}",
        entries(tmp.path())
    );
}

#[test]
fn a_shape_that_does_not_fit_the_dtype_is_refused_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("x.gguf");
    let out = AtomicOutput::file(&target).unwrap();
    let t = OutTensor::new(
        "a.weight",
        vec![3, 33],
        DType::Q4_0,
        Source::Rows(Box::new(|_, _, _: &mut [f32]| Ok(()))),
    );
    let err = write_gguf(out.path(), &[], &[t], &|_| {}).unwrap_err();
    assert!(err.to_string().contains("a.weight"), "{err}");
    drop(out);
    assert!(entries(tmp.path()).is_empty());
}
