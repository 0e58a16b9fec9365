//! Hostile SafeTensors and MLX input, generated from the fixtures: every case must give an
//! error that names the offending file, and nothing may panic.

use minerva_formats::safetensors_reader::parse_header;
use minerva_formats::{Checkpoint, FormatError};
use serde_json::json;
use std::path::Path;

mod st_common;
use st_common::{copy_fixture, fixtures, safetensors_bytes, write_safetensors, Raw};

/// Writes `bytes` as the model.safetensors of a fresh folder and opens it; the error must name
/// that file.
fn refused(bytes: &[u8], case: &str) -> FormatError {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("model.safetensors");
    std::fs::write(&file, bytes).unwrap();
    let err = Checkpoint::open(dir.path()).expect_err(case);
    assert!(
        err.to_string().contains(&*file.to_string_lossy()),
        "{case}: {err}"
    );
    err
}

fn small_model() -> Vec<u8> {
    std::fs::read(fixtures().join("dequant/hf-mxfp4/model.safetensors")).unwrap()
}

fn header_len(bytes: &[u8]) -> usize {
    u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize
}

/// A file whose header is `header` (any text) followed by `data`.
fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn truncated_files() {
    let bytes = small_model();
    let h = 8 + header_len(&bytes);
    let mut cuts: Vec<usize> = vec![0, 1, 7, 8, 9, 20, h / 2, h - 1, h, h + 1, bytes.len() - 1];
    cuts.extend((1..40).map(|i| i * bytes.len() / 40));
    for cut in cuts {
        refused(&bytes[..cut], &format!("cut at {cut} of {}", bytes.len()));
    }
    // One byte too many is as wrong as one too few.
    let mut longer = bytes.clone();
    longer.push(0);
    refused(&longer, "trailing byte");
}

#[test]
fn lying_header_length() {
    let bytes = small_model();
    for claimed in [
        bytes.len() as u64,
        bytes.len() as u64 + 1,
        u64::MAX,
        1 << 40,
        3,
    ] {
        let mut b = bytes.clone();
        b[..8].copy_from_slice(&claimed.to_le_bytes());
        refused(&b, &format!("header length {claimed}"));
    }
}

#[test]
fn bad_header_text() {
    refused(
        &with_header("{\"a\": {\"dtype\": \"F32\", ", &[0; 4]),
        "cut JSON",
    );
    refused(&with_header("[1, 2, 3]", &[]), "not an object");
    let mut not_utf8 = with_header(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        &[0; 4],
    );
    not_utf8[10] = 0xFF;
    refused(&not_utf8, "not UTF-8");
    refused(
        &with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", &[0; 4]),
        "no offsets",
    );
}

#[test]
fn lying_offsets_shapes_and_dtypes() {
    let f32s = |n: usize| vec![0u8; 4 * n];
    let cases: Vec<(&str, String, Vec<u8>)> = vec![
        ("offsets past the end", r#"{"a":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}}"#.into(), f32s(4)),
        ("overlapping tensors", r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#.into(), f32s(4)),
        ("partly overlapping", r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}"#.into(), f32s(6)),
        ("gap between tensors", r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#.into(), f32s(3)),
        ("end before start", r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}"#.into(), f32s(2)),
        ("size not matching shape", r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}"#.into(), f32s(4)),
        ("shape product overflows", format!(r#"{{"a":{{"dtype":"F32","shape":[{0},{0},{0}],"data_offsets":[0,16]}}}}"#, 1u64 << 40), f32s(4)),
        ("size overflows", format!(r#"{{"a":{{"dtype":"F64","shape":[{}],"data_offsets":[0,16]}}}}"#, usize::MAX / 4), f32s(4)),
        ("unknown dtype", r#"{"a":{"dtype":"F7","shape":[4],"data_offsets":[0,16]}}"#.into(), f32s(4)),
        ("negative dimension", r#"{"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}}"#.into(), f32s(4)),
    ];
    for (case, header, data) in cases {
        refused(&with_header(&header, &data), case);
    }
    // A dtype the crate knows but the engine does not read.
    let err = refused(
        &with_header(
            r#"{"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}}"#,
            &[0; 4],
        ),
        "fp8",
    );
    assert!(
        matches!(err, FormatError::Unsupported { .. }) && err.to_string().contains("'a'"),
        "{err}"
    );
}

#[test]
fn index_naming_a_missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture(
        "llama/f32",
        &["model.safetensors", "config.json"],
        dir.path(),
    );
    let index = json!({"weight_map": {"model.norm.weight": "model.safetensors", "lm_head.weight": "model-00002-of-00002.safetensors"}});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("model-00002-of-00002.safetensors"), "{err}");
    // An index may not point outside its folder.
    let index = json!({"weight_map": {"model.norm.weight": "../model.safetensors"}});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors.index.json") && err.contains("../model.safetensors"),
        "{err}"
    );
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        "{\"weight_map\": ",
    )
    .unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("model.safetensors.index.json"), "{err}");
}

/// An MLX folder with one 4-bit pack of 4 rows × 64 values, and the given config and tensors.
fn mlx_folder(
    dir: &Path,
    quant: serde_json::Value,
    tensors: &[Raw],
) -> Result<Checkpoint, FormatError> {
    std::fs::write(
        dir.join("config.json"),
        json!({"model_type": "llama", "quantization": quant}).to_string(),
    )
    .unwrap();
    write_safetensors(&dir.join("model.safetensors"), tensors);
    Checkpoint::open(dir)
}

fn pack(scale_shape: Vec<usize>, bias_shape: Vec<usize>) -> Vec<Raw<'static>> {
    let n = |s: &[usize]| s.iter().product::<usize>();
    vec![
        Raw {
            name: "m.weight",
            dtype: "U32",
            shape: vec![4, 8],
            data: vec![0x5A; 4 * 8 * 4],
        },
        Raw {
            name: "m.scales",
            dtype: "BF16",
            data: vec![0x3F; 2 * n(&scale_shape)],
            shape: scale_shape,
        },
        Raw {
            name: "m.biases",
            dtype: "BF16",
            data: vec![0; 2 * n(&bias_shape)],
            shape: bias_shape,
        },
    ]
}

#[test]
fn mlx_packs_that_do_not_fit() {
    let q4 = json!({"bits": 4, "group_size": 64});
    let dir = tempfile::tempdir().unwrap();
    let file = dir
        .path()
        .join("model.safetensors")
        .to_string_lossy()
        .into_owned();
    let ok = mlx_folder(dir.path(), q4.clone(), &pack(vec![4, 1], vec![4, 1])).unwrap();
    assert_eq!(ok.tensor("m.weight").unwrap().shape, vec![4, 64]);

    for (case, scales, biases, tensor) in [
        (
            "scales of the wrong shape",
            vec![4, 2],
            vec![4, 1],
            "m.scales",
        ),
        (
            "scales with too few rows",
            vec![3, 1],
            vec![3, 1],
            "m.scales",
        ),
        (
            "biases of the wrong shape",
            vec![4, 1],
            vec![1, 4],
            "m.biases",
        ),
    ] {
        let err = mlx_folder(dir.path(), q4.clone(), &pack(scales, biases))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&file) && err.contains(tensor), "{case}: {err}");
    }
    // Group 128 does not divide a row of 64.
    let err = mlx_folder(
        dir.path(),
        json!({"bits": 4, "group_size": 128}),
        &pack(vec![4, 1], vec![4, 1]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&file) && err.contains("m.weight"), "{err}");
    // Affine without biases; mxfp4 with bf16 scales.
    let mut no_biases = pack(vec![4, 1], vec![4, 1]);
    no_biases.pop();
    let err = mlx_folder(dir.path(), q4.clone(), &no_biases)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&file) && err.contains("m.biases"), "{err}");
    let err = mlx_folder(
        dir.path(),
        json!({"bits": 4, "group_size": 32, "mode": "mxfp4"}),
        &no_biases,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&file) && err.contains("m.scales"), "{err}");
    // Scales for a module the config leaves unquantized.
    let err = mlx_folder(
        dir.path(),
        json!({"bits": 4, "group_size": 64, "m": false}),
        &pack(vec![4, 1], vec![4, 1]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&file) && err.contains("m.scales"), "{err}");
}

#[test]
fn mlx_quantization_settings_outside_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir
        .path()
        .join("config.json")
        .to_string_lossy()
        .into_owned();
    for quant in [
        json!({"bits": 7, "group_size": 64}),
        json!({"bits": 1, "group_size": 64}),
        json!({"bits": 4, "group_size": 48}),
        json!({"bits": 4, "group_size": 64, "mode": "nvfp4"}),
        json!({"bits": 4, "group_size": 64, "m": {"bits": 9}}),
        json!({"bits": "four", "group_size": 64}),
        json!({"bits": 8, "group_size": 64, "mode": "mxfp4"}),
    ] {
        let err = mlx_folder(dir.path(), quant.clone(), &pack(vec![4, 1], vec![4, 1]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&config), "{quant}: {err}");
    }
}

/// Byte flips and bit flips all over a real header (deterministic): errors or a valid
/// checkpoint, never a panic.
#[test]
fn header_mutations_do_not_panic() {
    let bytes = small_model();
    let h = 8 + header_len(&bytes);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("model.safetensors");
    for _ in 0..300 {
        let mut b = bytes[..h].to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() as usize) % h;
            b[at] = match next() % 3 {
                0 => b[at] ^ (1 << (next() % 8)),
                1 => b"0123456789,:[]{}\"-"[(next() % 18) as usize],
                _ => next() as u8,
            };
        }
        let _ = parse_header(&b);
        b.extend_from_slice(&bytes[h..]);
        std::fs::write(&file, &b).unwrap();
        if let Err(e) = Checkpoint::open(dir.path()) {
            assert!(
                e.to_string().contains(&*file.to_string_lossy())
                    || e.to_string().contains("model.safetensors"),
                "{e}"
            );
        }
    }
    // parse_header alone on a few raw prefixes.
    for cut in 0..64.min(h) {
        assert!(parse_header(&bytes[..cut]).is_err());
    }
    assert_eq!(parse_header(&safetensors_bytes(&[])).unwrap(), vec![]);
}

/// A name given twice: a map-based reading would keep one entry and drop the other.
#[test]
fn a_tensor_name_given_twice_is_refused() {
    let one = |shape: Vec<usize>| Raw {
        name: "w",
        dtype: "F32",
        shape,
        data: vec![0; 8],
    };
    let mut bytes = safetensors_bytes(&[one(vec![2])]);
    let n = header_len(&bytes);
    let header = String::from_utf8(bytes[8..8 + n].to_vec()).unwrap();
    let twice = header.replacen(
        '{',
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]},",
        1,
    );
    bytes = with_header(&twice, &bytes[8 + n..]);
    let e = refused(&bytes, "name twice").to_string();
    assert!(e.contains("tensor 'w' appears twice"), "{e}");
}

/// The crate's "invalid shape, data type, or offset" names no tensor; ours does.
#[test]
fn a_size_mismatch_names_the_tensor() {
    let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[3],"data_offsets":[8,16]}}"#;
    let e = refused(&with_header(header, &[0; 16]), "b too small").to_string();
    assert!(
        e.contains("tensor 'b'") && e.contains("needs 12 bytes, data_offsets give 8"),
        "{e}"
    );
}
