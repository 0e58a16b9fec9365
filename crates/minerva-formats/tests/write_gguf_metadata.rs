//! The GGUF writer's metadata: every value type, arrays of each, and the alignment of tensor
//! data, read back by our reader and by gguf-py.

use minerva_formats::write::gguf::{write_gguf, ALIGNMENT};
use minerva_formats::write::{OutTensor, Source};
use minerva_formats::{dequantize, Checkpoint, DType, MetaValue};
use std::process::Command;

#[test]
fn every_metadata_type_round_trips() {
    let values = vec![
        ("t.u8", MetaValue::U8(200)),
        ("t.i8", MetaValue::I8(-100)),
        ("t.u16", MetaValue::U16(60000)),
        ("t.i16", MetaValue::I16(-30000)),
        ("t.u32", MetaValue::U32(4_000_000_000)),
        ("t.i32", MetaValue::I32(-2_000_000_000)),
        ("t.u64", MetaValue::U64(1 << 60)),
        ("t.i64", MetaValue::I64(-(1 << 60))),
        ("t.f32", MetaValue::F32(1.5e-5)),
        ("t.f64", MetaValue::F64(-2.25e100)),
        ("t.bool", MetaValue::Bool(true)),
        ("t.string", MetaValue::String("héllo {{ template }}".into())),
        (
            "t.strings",
            MetaValue::Array(vec![
                MetaValue::String("a".into()),
                MetaValue::String(String::new()),
            ]),
        ),
        (
            "t.i32s",
            MetaValue::Array(vec![MetaValue::I32(1), MetaValue::I32(-3)]),
        ),
        ("t.f32s", MetaValue::Array(vec![MetaValue::F32(0.5); 3])),
        (
            "t.bools",
            MetaValue::Array(vec![MetaValue::Bool(false), MetaValue::Bool(true)]),
        ),
        ("general.architecture", MetaValue::String("llama".into())),
    ];
    let meta: Vec<(String, MetaValue)> = values
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("m.gguf");
    // Odd sizes so that the second tensor needs padding to stay aligned.
    let a = OutTensor::new(
        "a.weight",
        vec![3, 5],
        DType::F32,
        Source::Rows(Box::new(|f, _, o: &mut [f32]| {
            for (i, v) in o.iter_mut().enumerate() {
                *v = (f * 5 + i) as f32;
            }
            Ok(())
        })),
    );
    let b = OutTensor::new(
        "b.weight",
        vec![2, 64],
        DType::Q8_0,
        Source::Rows(Box::new(|_, _, o: &mut [f32]| {
            o.fill(-127.0 / 128.0); // scale 2^-7: exact in Q8_0's f16 scale
            Ok(())
        })),
    );
    write_gguf(&path, &meta, &[a, b], &|_| {}).unwrap();
    let ck = Checkpoint::open(&path).unwrap();
    for (k, v) in &values {
        assert_eq!(ck.metadata.get(k), Some(v), "{k}");
    }
    assert_eq!(
        dequantize(&ck.tensor("a.weight").unwrap()).unwrap(),
        (0..15).map(|i| i as f32).collect::<Vec<_>>()
    );
    assert_eq!(
        dequantize(&ck.tensor("b.weight").unwrap()).unwrap(),
        vec![-127.0 / 128.0; 128]
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/check_gguf.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["metadata"]["t.u64"], 1u64 << 60);
    assert_eq!(r["metadata"]["t.string"], "héllo {{ template }}");
    assert_eq!(r["metadata"]["t.strings"]["array_len"], 2);
    assert_eq!(r["tensors"]["b.weight"]["type"], "Q8_0");
    assert_eq!(ALIGNMENT, 32);
}
