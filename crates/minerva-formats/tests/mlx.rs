//! MLX folders: packs joined into logical tensors, and our dequantization against mlx's own
//! (`tools/dump_mlx_dequant.py` wrote mlx.core.dequantize's results under fixtures/dequant/).

use minerva_formats::{Checkpoint, DType, Format, TensorData};

mod st_common;
use st_common::{check_dump, copy_fixture, fixtures};

fn check_against_mlx(folder: &str, dump: &str) -> usize {
    let ckpt = Checkpoint::open(fixtures().join(folder)).unwrap();
    assert_eq!(ckpt.format, Format::Mlx);
    check_dump(&ckpt, dump)
}

#[test]
fn llama_4bit_matches_mlx_dequantize() {
    assert_eq!(
        check_against_mlx("llama/mlx-4bit", "mlx-llama-4bit.json"),
        16
    );
}

#[test]
fn every_bits_group_and_mxfp4_match_mlx_dequantize() {
    assert_eq!(
        check_against_mlx("dequant/mlx-synthetic", "mlx-synthetic.json"),
        21
    );
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
        TensorData::MlxAffine {
            weight,
            scales,
            biases,
            scale_dtype,
        } => {
            assert_eq!(
                (weight.len(), scales.len(), biases.len()),
                (256 * 64 * 4, 256 * 8 * 2, 256 * 8 * 2)
            );
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
    assert_eq!(
        dtype("model.packs.b3_g128.weight"),
        DType::MlxAffine {
            bits: 3,
            group: 128
        }
    );
    assert_eq!(
        dtype("model.packs.b4_g64.weight"),
        DType::MlxAffine { bits: 4, group: 64 }
    );
    assert_eq!(dtype("model.packs.mxfp4.weight"), DType::MlxMxfp4);
    assert_eq!(
        ckpt.tensor("model.experts.mxfp4.weight").unwrap().shape,
        vec![2, 3, 64]
    );
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
    assert_eq!(
        scale_dtypes.len(),
        3,
        "bf16, f16 and f32 scales are all exercised: {scale_dtypes:?}"
    );
}

#[test]
fn unquantized_mlx_folder_is_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture(
        "llama/mlx-4bit",
        &[
            "model.safetensors",
            "model.safetensors.index.json",
            "config.json",
        ],
        dir.path(),
    );
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
            .unwrap();
    config.as_object_mut().unwrap().remove("quantization");
    config
        .as_object_mut()
        .unwrap()
        .remove("quantization_config");
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let ckpt = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ckpt.format, Format::Safetensors);
    assert_eq!(ckpt.tensor("lm_head.weight").unwrap().dtype, DType::U32);
    assert!(ckpt.contains("lm_head.scales"));
}
