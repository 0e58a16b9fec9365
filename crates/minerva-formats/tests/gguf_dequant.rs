//! Every fixture GGUF read by this crate agrees with gguf-py: tensor table, metadata, and the
//! dequantized values bit for bit (dumps by tools/dump_gguf_dequant.py), and with the fixtures'
//! own reference.json (tensor types, ggml shapes, scalar metadata).

use minerva_formats::{dequantize, gguf, MetaValue};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures")).to_path_buf()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every dump written by the script (the folder also holds other formats' dumps, which have
/// no `gguf` field), with the GGUF it describes.
fn dumps() -> Vec<(PathBuf, Value)> {
    let mut out: Vec<_> = std::fs::read_dir(fixtures().join("dequant"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| {
            let dump = read_json(&p);
            let gguf = fixtures().join(dump.get("gguf")?.as_str()?);
            Some((gguf, dump))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_fixture_gguf_has_a_dump() {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            // hostile/ holds damaged files on purpose (their tests are minerva-mutate's).
            if p.is_dir() && !p.ends_with("hostile") {
                walk(&p, found);
            } else if p.extension().is_some_and(|e| e == "gguf") {
                found.push(p);
            }
        }
    }
    let mut found = Vec::new();
    walk(&fixtures(), &mut found);
    found.sort();
    let dumped: Vec<PathBuf> = dumps().into_iter().map(|d| d.0).collect();
    assert_eq!(found, dumped);
    assert!(found.len() >= 6);
}

#[test]
fn dequantized_values_match_gguf_py_exactly() {
    let mut types_seen = std::collections::BTreeSet::new();
    for (path, dump) in dumps() {
        let ckpt = gguf::open(&path).unwrap();
        let want = dump["tensors"].as_object().unwrap();
        assert_eq!(ckpt.tensor_count(), want.len(), "{}", path.display());
        for t in ckpt.tensors() {
            let w = &want[t.name];
            assert_eq!(t.dtype.name(), w["type"], "{}: {}", path.display(), t.name);
            let shape: Vec<usize> = serde_json::from_value(w["shape"].clone()).unwrap();
            assert_eq!(t.shape, shape, "{}: {}", path.display(), t.name);
            let values = dequantize(&t).unwrap();
            assert_eq!(values.len() as u64, w["elements"].as_u64().unwrap());
            let first: Vec<f32> = serde_json::from_value(w["first"].clone()).unwrap();
            assert_eq!(
                &values[..first.len()],
                &first[..],
                "{}: {}",
                path.display(),
                t.name
            );
            let mut h = Sha256::new();
            for v in &values {
                h.update(v.to_le_bytes());
            }
            let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(
                hex,
                w["sha256"],
                "{}: {} ({})",
                path.display(),
                t.name,
                t.dtype.name()
            );
            types_seen.insert(t.dtype.name());
        }
    }
    for ty in [
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
        "Q8_K", "MXFP4",
    ] {
        assert!(
            types_seen.contains(ty),
            "no tensor of type {ty} was checked"
        );
    }
}

/// gguf-py's reader flattens nested arrays; so does this comparison.
fn flatten(v: &MetaValue, out: &mut Vec<Value>) {
    match v {
        MetaValue::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        other => out.push(scalar_json(other)),
    }
}

fn scalar_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::String(s) => Value::from(s.as_str()),
        MetaValue::Bool(b) => Value::from(*b),
        MetaValue::F32(f) => Value::from(*f as f64),
        MetaValue::F64(f) => Value::from(*f),
        other => match other.as_u64() {
            Some(u) => Value::from(u),
            None => Value::from(other.as_i64().unwrap()),
        },
    }
}

/// GGUF value type ids along an array's nesting, as gguf-py lists them.
fn type_ids(v: &MetaValue) -> Vec<u64> {
    let id = match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::String(_) => 8,
        MetaValue::Array(items) => {
            return [vec![9], items.first().map_or(vec![], type_ids)].concat()
        }
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    };
    vec![id]
}

#[test]
fn metadata_matches_gguf_py() {
    for (path, dump) in dumps() {
        let ckpt = gguf::open(&path).unwrap();
        let want = dump["metadata"].as_object().unwrap();
        assert_eq!(ckpt.metadata.0.len(), want.len(), "{}", path.display());
        for (key, w) in want {
            let got = ckpt
                .metadata
                .get(key)
                .unwrap_or_else(|| panic!("{}: no key {key}", path.display()));
            let ids: Vec<u64> = serde_json::from_value(w["types"].clone()).unwrap();
            assert_eq!(type_ids(got), ids, "{}: {key}", path.display());
            if let Some(len) = w.get("len") {
                let mut flat = Vec::new();
                flatten(got, &mut flat);
                assert_eq!(
                    flat.len() as u64,
                    len.as_u64().unwrap(),
                    "{}: {key}",
                    path.display()
                );
                let head = w["head"].as_array().unwrap();
                assert_eq!(&flat[..head.len()], &head[..], "{}: {key}", path.display());
            } else {
                assert_eq!(scalar_json(got), w["value"], "{}: {key}", path.display());
            }
        }
    }
}

#[test]
fn tensor_table_and_metadata_match_reference_json() {
    let mut checked = 0;
    for (path, _) in dumps() {
        let reference = path.with_file_name("reference.json");
        if !reference.is_file() {
            continue;
        }
        let r = read_json(&reference);
        let ckpt = gguf::open(&path).unwrap();
        let types = r["gguf_tensor_types"].as_object().unwrap();
        let shapes = r["gguf_tensor_shapes_ne"].as_object().unwrap();
        assert_eq!(ckpt.tensor_count(), types.len());
        for t in ckpt.tensors() {
            assert_eq!(
                t.dtype.name(),
                types[t.name],
                "{}: {}",
                path.display(),
                t.name
            );
            let mut ne: Vec<usize> = serde_json::from_value(shapes[t.name].clone()).unwrap();
            ne.reverse();
            assert_eq!(t.shape, ne, "{}: {}", path.display(), t.name);
        }
        for (key, want) in r["gguf_metadata"].as_object().unwrap() {
            let got = ckpt
                .metadata
                .get(key)
                .unwrap_or_else(|| panic!("{}: no key {key}", path.display()));
            assert_eq!(&scalar_json(got), want, "{}: {key}", path.display());
        }
        checked += 1;
    }
    assert_eq!(checked, 6);
}
