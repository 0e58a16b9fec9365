//! MLX folders: packs joined into logical tensors, and our dequantization against mlx's own
//! (`tools/dump_mlx_dequant.py` wrote mlx.core.dequantize's results under fixtures/dequant/).

use minerva_formats::{dequantize, Checkpoint, DType, Format, TensorData};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks every tensor of a dump against our dequantization; returns how many were checked.
fn check_against_mlx(folder: &str, dump: &str) -> usize {
    let ckpt = Checkpoint::open(fixtures().join(folder)).unwrap();
    assert_eq!(ckpt.format, Format::Mlx);
    let text = std::fs::read_to_string(fixtures().join("dequant").join(dump)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tensors = json["tensors"].as_array().unwrap();
    assert!(!tensors.is_empty());
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let view = ckpt.tensor(name).unwrap_or_else(|| panic!("{name} missing"));
        let shape: Vec<usize> = t["shape"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(view.shape, shape, "{name}");
        let ours = dequantize(&view).unwrap();
        let bytes: Vec<u8> = ours.iter().flat_map(|v| v.to_le_bytes()).collect();
        let first: Vec<f32> = t["first"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        assert_eq!(&ours[..first.len()], &first[..], "{name}: first values");
        let sum: f64 = ours.iter().map(|&v| v as f64).sum();
        let want_sum = t["sum"].as_f64().unwrap();
        assert!((sum - want_sum).abs() <= 1e-9 * want_sum.abs().max(1.0), "{name}: sum {sum} vs {want_sum}");
        assert_eq!(hex(&Sha256::digest(&bytes)), t["sha256"].as_str().unwrap(), "{name}: f32 bytes differ from mlx");
    }
    tensors.len()
}

#[test]
fn llama_4bit_matches_mlx_dequantize() {
    assert_eq!(check_against_mlx("llama/mlx-4bit", "mlx-llama-4bit.json"), 16);
}

#[test]
fn every_bits_group_and_mxfp4_match_mlx_dequantize() {
    assert_eq!(check_against_mlx("dequant/mlx-synthetic", "mlx-synthetic.json"), 21);
}

#[test]
fn llama_4bit_table() {
    let ckpt = Checkpoint::open(fixtures().join("llama/mlx-4bit")).unwrap();
    // 16 packs + 5 norms; scales and biases are part of their packs.
    assert_eq!(ckpt.tensor_count(), 21);
    assert!(!ckpt.contains("lm_head.scales") && !ckpt.contains("lm_head.biases"));
    let q = ckpt.tensor("model.layers.0.mlp.down_proj.weight").unwrap();
    assert_eq!(q.shape, vec![256, 512]);
    assert_eq!(q.dtype, DType::MlxAffine { bits: 4, group: 64 });
    match q.data {
        TensorData::MlxAffine { weight, scales, biases, scale_dtype } => {
            assert_eq!((weight.len(), scales.len(), biases.len()), (256 * 64 * 4, 256 * 8 * 2, 256 * 8 * 2));
            assert_eq!(scale_dtype, DType::BF16);
        }
        other => panic!("unexpected data {other:?}"),
    }
    let norm = ckpt.tensor("model.norm.weight").unwrap();
    assert_eq!((norm.dtype, norm.shape.clone()), (DType::BF16, vec![256]));
    assert!(ckpt.config.as_ref().unwrap()["quantization"].is_object());
}

#[test]
fn overrides_mxfp4_and_unquantized_modules() {
    let ckpt = Checkpoint::open(fixtures().join("dequant/mlx-synthetic")).unwrap();
    let dtype = |n: &str| ckpt.tensor(n).unwrap().dtype;
    assert_eq!(dtype("model.packs.b3_g128.weight"), DType::MlxAffine { bits: 3, group: 128 });
    assert_eq!(dtype("model.packs.b4_g64.weight"), DType::MlxAffine { bits: 4, group: 64 });
    assert_eq!(dtype("model.packs.mxfp4.weight"), DType::MlxMxfp4);
    assert_eq!(ckpt.tensor("model.experts.mxfp4.weight").unwrap().shape, vec![2, 3, 64]);
    // `false` in the config: a plain bf16 linear, its `.bias` kept as is.
    assert_eq!(dtype("model.plain.weight"), DType::BF16);
    assert_eq!(dtype("model.plain.bias"), DType::BF16);
    let scale_dtypes: std::collections::BTreeSet<String> = ckpt
        .tensors()
        .filter_map(|t| match t.data {
            TensorData::MlxAffine { scale_dtype, .. } => Some(scale_dtype.name()),
            _ => None,
        })
        .collect();
    assert_eq!(scale_dtypes.len(), 3, "bf16, f16 and f32 scales are all exercised: {scale_dtypes:?}");
}

#[test]
fn unquantized_mlx_folder_is_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["model.safetensors", "model.safetensors.index.json", "config.json"] {
        std::fs::copy(fixtures().join("llama/mlx-4bit").join(f), dir.path().join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("quantization");
    config.as_object_mut().unwrap().remove("quantization_config");
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let ckpt = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ckpt.format, Format::Safetensors);
    assert_eq!(ckpt.tensor("lm_head.weight").unwrap().dtype, DType::U32);
    assert!(ckpt.contains("lm_head.scales"));
}
