//! Split GGUF sets (llama.cpp gguf-split): opened from a part, all parts found beside it,
//! tensors read from the part that holds them; missing or inconsistent parts are errors.

mod gguf_writer;

use gguf_writer::{val, Gguf};
use minerva_formats::{dequantize, gguf, Checkpoint, Format};
use std::path::Path;

/// Part `i` (0-based) of 3, holding tensor `t{i}` of 4·(i+1) values i·100, i·100+1, ….
fn part(i: u16) -> Vec<u8> {
    let mut g = Gguf::default();
    if i == 0 {
        g = g
            .kv("general.architecture", val::string("llama"))
            .kv("general.name", val::string("split-test"));
    }
    g = g
        .kv("split.no", val::u16(i))
        .kv("split.count", val::u16(3))
        .kv("split.tensors.count", val::i32(3));
    let n = 4 * (i as usize + 1);
    let values: Vec<f32> = (0..n).map(|k| (i as usize * 100 + k) as f32).collect();
    g.f32_tensor(&format!("t{i}"), &[2, n as u64 / 2], &values)
        .bytes()
}

fn write_set(dir: &Path) {
    for i in 0..3u16 {
        std::fs::write(
            dir.join(format!("model-{:05}-of-00003.gguf", i + 1)),
            part(i),
        )
        .unwrap();
    }
}

fn check_set(ckpt: &Checkpoint) {
    assert_eq!(ckpt.format, Format::Gguf);
    assert_eq!(ckpt.files.len(), 3);
    assert_eq!(ckpt.tensor_count(), 3);
    assert_eq!(ckpt.metadata.get_str("general.name"), Some("split-test"));
    for i in 0..3usize {
        let t = ckpt.tensor(&format!("t{i}")).unwrap();
        let n = 4 * (i + 1);
        assert_eq!(t.shape, vec![n / 2, 2]);
        let want: Vec<f32> = (0..n).map(|k| (i * 100 + k) as f32).collect();
        assert_eq!(dequantize(&t).unwrap(), want);
    }
}

#[test]
fn opens_every_part_from_the_first_or_any_other() {
    let dir = tempfile::tempdir().unwrap();
    write_set(dir.path());
    check_set(&gguf::open(&dir.path().join("model-00001-of-00003.gguf")).unwrap());
    check_set(&gguf::open(&dir.path().join("model-00003-of-00003.gguf")).unwrap());
}

#[test]
fn missing_part_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_set(dir.path());
    std::fs::remove_file(dir.path().join("model-00002-of-00003.gguf")).unwrap();
    let e = gguf::open(&dir.path().join("model-00001-of-00003.gguf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("model-00002-of-00003.gguf"), "{e}");
}

#[test]
fn parts_that_disagree_with_their_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_set(dir.path());
    // Part 3's bytes under part 2's name.
    std::fs::write(dir.path().join("model-00002-of-00003.gguf"), part(2)).unwrap();
    let e = gguf::open(&dir.path().join("model-00001-of-00003.gguf"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("model-00002-of-00003.gguf") && e.contains("split"),
        "{e}"
    );
}

#[test]
fn tensor_total_must_match_split_tensors_count() {
    let dir = tempfile::tempdir().unwrap();
    write_set(dir.path());
    let short = Gguf::default()
        .kv("split.no", val::u16(2))
        .kv("split.count", val::u16(3))
        .kv("split.tensors.count", val::i32(3))
        .bytes();
    std::fs::write(dir.path().join("model-00003-of-00003.gguf"), short).unwrap();
    let e = gguf::open(&dir.path().join("model-00001-of-00003.gguf"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("model-00001-of-00003.gguf") && e.contains("split.tensors.count"),
        "{e}"
    );
}
