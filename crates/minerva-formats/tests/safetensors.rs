//! SafeTensors folders: single files, sharded sets, every plain dtype, and gpt-oss MXFP4 blocks
//! checked against transformers' own dequantization (fixtures/dequant/hf-mxfp4.json).

use minerva_formats::{dequantize, Checkpoint, DType, Format, FormatError, TensorData};

mod st_common;
use st_common::{check_dump, copy_fixture, fixtures, write_safetensors, Raw};

#[test]
fn llama_f32_single_file() {
    let ckpt = Checkpoint::open(fixtures().join("llama/f32")).unwrap();
    assert_eq!(ckpt.format, Format::Safetensors);
    assert_eq!(ckpt.files.len(), 1);
    assert!(ckpt.files[0].path.ends_with("model.safetensors"));
    // 2 layers × 9 tensors + embeddings, final norm, lm_head; reference.safetensors is not read.
    assert_eq!(ckpt.tensor_count(), 21);
    assert!(!ckpt.contains("logits"));
    assert_eq!(ckpt.parameters(), 1_377_536);
    let q = ckpt
        .tensor("model.layers.1.self_attn.k_proj.weight")
        .unwrap();
    assert_eq!((q.dtype, q.shape.clone()), (DType::F32, vec![64, 256]));
    assert_eq!(ckpt.config.as_ref().unwrap()["model_type"], "llama");
}

/// bf16 and f16 files hold the f32 weights rounded: decoding them lands within half an ulp.
#[test]
fn half_precision_files_decode_to_the_f32_weights() {
    let f32s = Checkpoint::open(fixtures().join("llama/f32")).unwrap();
    for (folder, dtype, rel) in [
        ("llama/bf16", DType::BF16, 2f32.powi(-8)),
        ("llama/f16", DType::F16, 2f32.powi(-11)),
    ] {
        let half = Checkpoint::open(fixtures().join(folder)).unwrap();
        assert_eq!(half.tensor_count(), f32s.tensor_count());
        for t in f32s.tensors() {
            let h = half.tensor(t.name).unwrap();
            assert_eq!((h.dtype, &h.shape), (dtype, &t.shape), "{}", t.name);
            let (a, b) = (dequantize(&t).unwrap(), dequantize(&h).unwrap());
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    (x - y).abs() <= rel * x.abs() + 1e-7,
                    "{}: {x} vs {y}",
                    t.name
                );
            }
        }
    }
}

/// Splits llama/f32 into two shards (with an index, or by name alone) and reads them back.
#[test]
fn sharded_sets_read_like_the_single_file() {
    let whole = Checkpoint::open(fixtures().join("llama/f32")).unwrap();
    let names: Vec<String> = whole.tensors().map(|t| t.name.to_string()).collect();
    let (a, b) = names.split_at(names.len() / 2);
    let shard = |names: &[String]| -> Vec<Raw> {
        names
            .iter()
            .map(|n| {
                let t = whole.tensor(n).unwrap();
                let TensorData::Plain(bytes) = t.data else {
                    panic!()
                };
                Raw {
                    name: t.name,
                    dtype: "F32",
                    shape: t.shape.clone(),
                    data: bytes.to_vec(),
                }
            })
            .collect()
    };
    for with_index in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        copy_fixture("llama/f32", &["config.json"], dir.path());
        write_safetensors(
            &dir.path().join("model-00001-of-00002.safetensors"),
            &shard(a),
        );
        write_safetensors(
            &dir.path().join("model-00002-of-00002.safetensors"),
            &shard(b),
        );
        if with_index {
            let mut map = serde_json::Map::new();
            for n in a {
                map.insert(n.clone(), "model-00001-of-00002.safetensors".into());
            }
            for n in b {
                map.insert(n.clone(), "model-00002-of-00002.safetensors".into());
            }
            let index = serde_json::json!({"metadata": {}, "weight_map": map});
            std::fs::write(
                dir.path().join("model.safetensors.index.json"),
                index.to_string(),
            )
            .unwrap();
        }
        let ckpt = Checkpoint::open(dir.path()).unwrap();
        assert_eq!(ckpt.format, Format::Safetensors);
        assert_eq!(ckpt.files.len(), 2);
        assert_eq!(ckpt.tensor_count(), whole.tensor_count());
        for t in whole.tensors() {
            let s = ckpt.tensor(t.name).unwrap();
            assert_eq!(dequantize(&s).unwrap(), dequantize(&t).unwrap());
        }

        std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
        let err = Checkpoint::open(dir.path()).unwrap_err();
        assert!(matches!(err, FormatError::NotAModel { .. }), "{err}");
        assert!(
            err.to_string().contains("model-00002-of-00002.safetensors"),
            "{err}"
        );
    }
}

#[test]
fn index_naming_a_tensor_its_shard_lacks_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture("llama/f32", &["model.safetensors"], dir.path());
    let index = serde_json::json!({"weight_map": {"model.norm.weight": "model.safetensors", "ghost.weight": "model.safetensors"}});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors.index.json") && err.contains("ghost.weight"),
        "{err}"
    );
}

#[test]
fn every_plain_dtype_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let f64s = [1.5f64, -2.25, 1e10];
    let i64s = [-3i64, 7, 1 << 40];
    let i32s = [-5i32, 9];
    let u16s = [65535u16, 3];
    let i8s = [-128i8, 127];
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &[
            Raw {
                name: "f64",
                dtype: "F64",
                shape: vec![3],
                data: f64s.iter().flat_map(|v| v.to_le_bytes()).collect(),
            },
            Raw {
                name: "i64",
                dtype: "I64",
                shape: vec![3],
                data: i64s.iter().flat_map(|v| v.to_le_bytes()).collect(),
            },
            Raw {
                name: "i32",
                dtype: "I32",
                shape: vec![1, 2],
                data: i32s.iter().flat_map(|v| v.to_le_bytes()).collect(),
            },
            Raw {
                name: "u16",
                dtype: "U16",
                shape: vec![2],
                data: u16s.iter().flat_map(|v| v.to_le_bytes()).collect(),
            },
            Raw {
                name: "i8",
                dtype: "I8",
                shape: vec![2],
                data: i8s.iter().map(|&v| v as u8).collect(),
            },
            Raw {
                name: "u8",
                dtype: "U8",
                shape: vec![2, 1],
                data: vec![0, 255],
            },
            Raw {
                name: "bool",
                dtype: "BOOL",
                shape: vec![2],
                data: vec![1, 0],
            },
            Raw {
                name: "scalar",
                dtype: "F32",
                shape: vec![],
                data: 0.25f32.to_le_bytes().to_vec(),
            },
            Raw {
                name: "empty",
                dtype: "F16",
                shape: vec![0, 4],
                data: vec![],
            },
        ],
    );
    let ckpt = Checkpoint::open(dir.path()).unwrap();
    assert!(ckpt.config.is_none());
    let get = |n: &str| dequantize(&ckpt.tensor(n).unwrap()).unwrap();
    assert_eq!(ckpt.tensor("f64").unwrap().dtype, DType::F64);
    assert_eq!(get("f64"), vec![1.5, -2.25, 1e10]);
    assert_eq!(get("i64"), vec![-3.0, 7.0, (1u64 << 40) as f32]);
    assert_eq!(get("i32"), vec![-5.0, 9.0]);
    assert_eq!(get("u16"), vec![65535.0, 3.0]);
    assert_eq!(get("i8"), vec![-128.0, 127.0]);
    assert_eq!(get("u8"), vec![0.0, 255.0]);
    assert_eq!(get("bool"), vec![1.0, 0.0]);
    assert_eq!(get("scalar"), vec![0.25]);
    assert_eq!(get("empty"), Vec::<f32>::new());
}

#[test]
fn gpt_oss_mxfp4_blocks_match_transformers() {
    let ckpt = Checkpoint::open(fixtures().join("dequant/hf-mxfp4")).unwrap();
    // The Hugging Face quantization_config (quant_method mxfp4) is not an MLX folder.
    assert_eq!(ckpt.format, Format::Safetensors);
    assert_eq!(ckpt.tensor_count(), 2);
    let t = ckpt
        .tensor("model.layers.0.mlp.experts.gate_up_proj")
        .unwrap();
    assert_eq!(
        (t.dtype, t.shape.clone()),
        (DType::HfMxfp4, vec![2, 128, 256])
    );
    assert!(
        matches!(t.data, TensorData::HfMxfp4 { blocks, scales } if blocks.len() == 2 * 128 * 8 * 16 && scales.len() == 2 * 128 * 8)
    );
    assert!(!ckpt.contains("model.layers.0.mlp.experts.gate_up_proj_blocks"));
    assert_eq!(check_dump(&ckpt, "hf-mxfp4.json"), 2);
}

#[test]
fn mxfp4_scales_of_the_wrong_shape_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &[
            Raw {
                name: "w_blocks",
                dtype: "U8",
                shape: vec![2, 1, 16],
                data: vec![0; 32],
            },
            Raw {
                name: "w_scales",
                dtype: "U8",
                shape: vec![2, 2],
                data: vec![127; 4],
            },
        ],
    );
    let err = Checkpoint::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("w_scales"),
        "{err}"
    );
}
