//! Helpers shared by the SafeTensors/MLX tests: fixture paths and a minimal safetensors writer
//! (raw bytes, so tests can also write files that lie).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One tensor to write: name, safetensors dtype string, shape, raw little-endian bytes.
pub struct Raw<'a> {
    pub name: &'a str,
    pub dtype: &'a str,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// The bytes of a safetensors file holding `tensors` in order.
pub fn safetensors_bytes(tensors: &[Raw]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for t in tensors {
        header.insert(
            t.name.to_string(),
            serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + t.data.len()]}),
        );
        offset += t.data.len();
    }
    let mut text = serde_json::Value::Object(header).to_string();
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    out
}

pub fn write_safetensors(path: &Path, tensors: &[Raw]) {
    std::fs::write(path, safetensors_bytes(tensors)).unwrap();
}

/// Copies the named files of a fixture folder into `to`.
pub fn copy_fixture(folder: &str, files: &[&str], to: &Path) {
    for f in files {
        std::fs::copy(fixtures().join(folder).join(f), to.join(f)).unwrap();
    }
}

/// Checks every tensor of a reference dump (fixtures/dequant/*.json) against our
/// dequantization: shape, first values, sum and the SHA-256 of the f32 bytes. Returns how
/// many tensors it checked.
pub fn check_dump(ckpt: &minerva_formats::Checkpoint, dump: &str) -> usize {
    use sha2::{Digest, Sha256};
    let text = std::fs::read_to_string(fixtures().join("dequant").join(dump)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tensors = json["tensors"].as_array().unwrap();
    assert!(!tensors.is_empty());
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let view = ckpt
            .tensor(name)
            .unwrap_or_else(|| panic!("{name} missing"));
        let shape: Vec<usize> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(view.shape, shape, "{name}");
        let ours = minerva_formats::dequantize(&view).unwrap();
        let first: Vec<f32> = t["first"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(&ours[..first.len()], &first[..], "{name}: first values");
        let sum: f64 = ours.iter().map(|&v| v as f64).sum();
        let want_sum = t["sum"].as_f64().unwrap();
        assert!(
            (sum - want_sum).abs() <= 1e-9 * want_sum.abs().max(1.0),
            "{name}: sum {sum} vs {want_sum}"
        );
        let bytes: Vec<u8> = ours.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            hex(&Sha256::digest(&bytes)),
            t["sha256"].as_str().unwrap(),
            "{name}: f32 bytes differ from the reference"
        );
    }
    tensors.len()
}
