//! `minerva info` end to end: the JSON card of every fixture matches what the reference tools
//! listed, and bad input exits with status 1 and a message naming the file.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
}

fn minerva(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_minerva"))
        .args(args)
        .output()
        .expect("minerva runs")
}

fn info_json(path: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["info", path.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = minerva(&args);
    assert!(
        out.status.success(),
        "info {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("info --json prints one JSON object")
}

fn reference(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap()
}

/// GGUF fixtures: dtype counts and tensor count equal llama.cpp's listing in reference.json.
#[test]
fn gguf_cards_match_reference_listing() {
    for (dir, file, arch) in [
        ("llama/gguf-q4_0", "llama-Q4_0.gguf", "llama"),
        ("llama/gguf-q8_0", "llama-Q8_0.gguf", "llama"),
        ("llama/gguf-f32", "llama-F32.gguf", "llama"),
        ("qwen3/gguf-q8_0", "qwen3-Q8_0.gguf", "qwen3"),
        ("mixtral/gguf-q4_k_m", "mixtral-Q4_K_M.gguf", "mixtral"),
        (
            "gpt_oss/gguf-mxfp4_moe",
            "gpt_oss-MXFP4_MOE.gguf",
            "gpt_oss",
        ),
    ] {
        let dir = fixtures().join(dir);
        let card = info_json(&dir.join(file), &[]);
        let r = reference(&dir);
        assert_eq!(card["format"], "gguf");
        assert_eq!(card["architecture"], arch, "{file}");
        let types = r["gguf_tensor_types"].as_object().unwrap();
        assert_eq!(
            card["tensors"].as_u64().unwrap() as usize,
            types.len(),
            "{file}"
        );
        let counts = r["gguf_type_counts"].as_object().unwrap();
        assert_eq!(card["dtypes"].as_object().unwrap(), counts, "{file}");
        let shapes = r["gguf_tensor_shapes_ne"].as_object().unwrap();
        let params: u64 = shapes
            .values()
            .map(|s| {
                s.as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap())
                    .product::<u64>()
            })
            .sum();
        assert_eq!(card["parameters"].as_u64().unwrap(), params, "{file}");
        assert_eq!(card["tokenizer"], true);
    }
}

/// SafeTensors and MLX folders: architecture and sizes from config.json, parameter counts as the
/// fixtures README lists them, memory = stored bytes + f16 KV cache.
#[test]
fn folder_cards_match_configs() {
    for (dir, format, arch, params) in [
        ("llama/f32", "safetensors", "llama", 1_377_536u64),
        ("llama/bf16", "safetensors", "llama", 1_377_536),
        ("qwen3/f32", "safetensors", "qwen3", 1_181_184),
        ("mixtral/f32", "safetensors", "mixtral", 1_214_208),
        ("gpt_oss/f32", "safetensors", "gpt_oss", 1_056_528),
        ("llama/mlx-4bit", "mlx", "llama", 1_377_536),
    ] {
        let card = info_json(&fixtures().join(dir), &["--ctx", "100"]);
        assert_eq!(card["format"], format, "{dir}");
        assert_eq!(card["architecture"], arch, "{dir}");
        assert_eq!(card["parameters"].as_u64().unwrap(), params, "{dir}");
        assert_eq!(card["chat_template"], true, "{dir}");
        let spec = &card["spec"];
        let kv = 2
            * spec["n_layers"].as_u64().unwrap()
            * spec["n_kv_heads"].as_u64().unwrap()
            * spec["head_dim"].as_u64().unwrap()
            * 100
            * 2;
        let window_layers = spec["sliding_layers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b.as_bool().unwrap())
            .count() as u64;
        if window_layers == 0 {
            assert_eq!(card["memory"]["kv_bytes"].as_u64().unwrap(), kv, "{dir}");
        }
        assert_eq!(card["memory"]["ctx"], 100);
        let file_bytes: u64 = card["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["size"].as_u64().unwrap())
            .sum();
        let weights = card["memory"]["weights_bytes"].as_u64().unwrap();
        assert!(
            weights <= file_bytes && weights * 100 >= file_bytes * 95,
            "{dir}: {weights} of {file_bytes}"
        );
    }
    let card = info_json(&fixtures().join("llama/mlx-4bit"), &[]);
    assert_eq!(card["dtypes"]["mlx-affine-4-g64"].as_u64(), Some(16));
}

#[test]
fn bad_input_exits_1_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = std::fs::read(fixtures().join("llama/gguf-q4_0/llama-Q4_0.gguf")).unwrap();
    let truncated = tmp.path().join("cut.gguf");
    std::fs::write(&truncated, &src[..1000]).unwrap();
    let empty_dir = tmp.path().join("nothing-here");
    std::fs::create_dir(&empty_dir).unwrap();
    let missing = tmp.path().join("does-not-exist.gguf");
    for p in [&truncated, &empty_dir, &missing] {
        let out = minerva(&["info", p.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{}", p.display());
        let err = String::from_utf8_lossy(&out.stderr);
        let name = p.file_name().unwrap().to_str().unwrap();
        assert!(
            err.contains(name),
            "message for {} does not name it: {err}",
            p.display()
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A layer count of 10^8 used to make `info --json` run for minutes and write 1.3 GB; a
/// context of 1 made `run` fail with "context full" and no file named.
#[test]
fn damaged_counts_end_in_one_line_naming_the_file_and_key() {
    let hostile = fixtures().join("hostile");
    let out = minerva(&[
        "info",
        "--json",
        hostile.join("block-count-1e8.gguf").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains("block-count-1e8.gguf") && err.contains("llama.block_count is 100000000"),
        "{err}"
    );
    let out = minerva(&[
        "run",
        hostile.join("context-1").to_str().unwrap(),
        "--prompt",
        "Hi",
        "--backend",
        "cpu",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("config.json") && err.contains("max_position_embeddings is 1"),
        "{err}"
    );
}

/// A catalogue id (models.toml) stands for its first file on this disk; an id with none says
/// how to make one.
#[test]
fn a_catalogue_id_opens_its_file() {
    let card = info_json(Path::new("tiny-llama-fixture"), &[]);
    assert_eq!(card["architecture"], "llama");
    let out = minerva(&["info", "gpt-oss-20b"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return; // this machine has gpt-oss-20b in one of the usual stores
    }
    assert!(
        err.contains("catalogue model 'gpt-oss-20b'")
            && err.contains("minerva synth --shape gpt-oss-20b"),
        "{err}"
    );
}
