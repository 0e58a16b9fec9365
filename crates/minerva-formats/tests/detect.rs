//! Format detection: files, model folders, folders of several models, Hugging Face cache
//! entries, and the errors for what is not (or not wholly) a model.

use minerva_formats::detect::{find_models, ModelCandidate};
use minerva_formats::{Checkpoint, Format, FormatError};
use std::path::Path;

mod st_common;
use st_common::{copy_fixture, fixtures};

const HF_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// What opening gave, comparable across two paths: the files read, or the error's text.
fn outcome(path: &Path) -> String {
    match Checkpoint::open(path) {
        Ok(c) => format!(
            "{:?} {:?}",
            c.format,
            c.files.iter().map(|f| f.path.clone()).collect::<Vec<_>>()
        ),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn model_folders_and_their_files() {
    assert_eq!(
        Checkpoint::open(fixtures().join("llama/f32"))
            .unwrap()
            .format,
        Format::Safetensors
    );
    assert_eq!(
        Checkpoint::open(fixtures().join("llama/mlx-4bit"))
            .unwrap()
            .format,
        Format::Mlx
    );
    // A weight file or config.json names its folder.
    for f in ["model.safetensors", "config.json"] {
        let c = Checkpoint::open(fixtures().join("qwen3/f32").join(f)).unwrap();
        assert_eq!(c.dir, fixtures().join("qwen3/f32"));
        assert_eq!(c.format, Format::Safetensors);
    }
    let c =
        Checkpoint::open(fixtures().join("llama/mlx-4bit/model.safetensors.index.json")).unwrap();
    assert_eq!(c.format, Format::Mlx);
    // reference.safetensors is not a model file.
    let err = Checkpoint::open(fixtures().join("llama/f32/reference.safetensors")).unwrap_err();
    assert!(matches!(err, FormatError::NotAModel { .. }), "{err}");
}

#[test]
fn a_folder_with_one_gguf_is_that_gguf() {
    let folder = fixtures().join("llama/gguf-q8_0");
    let file = folder.join("llama-Q8_0.gguf");
    assert_eq!(outcome(&folder), outcome(&file));
    assert!(outcome(&folder).starts_with("Gguf"), "{}", outcome(&folder));
    assert_eq!(
        find_models(&folder),
        vec![ModelCandidate {
            path: file,
            format: Format::Gguf
        }]
    );
}

#[test]
fn split_gguf_sets_count_once() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixtures().join("llama/gguf-q8_0/llama-Q8_0.gguf");
    for name in ["tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"] {
        std::fs::copy(&src, dir.path().join(name)).unwrap();
    }
    let first = dir.path().join("tiny-00001-of-00002.gguf");
    assert_eq!(
        find_models(dir.path()),
        vec![ModelCandidate {
            path: first.clone(),
            format: Format::Gguf
        }]
    );
    assert_eq!(outcome(dir.path()), outcome(&first));
    // Copies of one file are no valid split set: the GGUF reader says so about the first part.
    assert!(
        outcome(dir.path()).contains("tiny-00001-of-00002.gguf"),
        "{}",
        outcome(dir.path())
    );
}

#[test]
fn several_models_are_listed_not_guessed() {
    let llama = fixtures().join("llama");
    let found = find_models(&llama);
    let names: Vec<String> = found
        .iter()
        .map(|c| c.path.strip_prefix(&llama).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "bf16",
            "f16",
            "f32",
            "gguf-f32/llama-F32.gguf",
            "gguf-q4_0/llama-Q4_0.gguf",
            "gguf-q8_0/llama-Q8_0.gguf",
            "mlx-4bit"
        ]
    );
    let formats: Vec<Format> = found.iter().map(|c| c.format).collect();
    use Format::*;
    assert_eq!(
        formats,
        [Safetensors, Safetensors, Safetensors, Gguf, Gguf, Gguf, Mlx]
    );
    let err = Checkpoint::open(&llama).unwrap_err().to_string();
    assert!(
        err.contains("7 models") && err.contains("mlx-4bit") && err.contains("llama-Q4_0.gguf"),
        "{err}"
    );

    // LM Studio's models root: publisher/model/file.gguf.
    let root = tempfile::tempdir().unwrap();
    for (publisher, model) in [("lmstudio-community", "a-GGUF"), ("someone", "b-GGUF")] {
        let d = root.path().join(publisher).join(model);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(
            fixtures().join("llama/gguf-q8_0/llama-Q8_0.gguf"),
            d.join("m.gguf"),
        )
        .unwrap();
    }
    assert_eq!(find_models(root.path()).len(), 2);
    let err = Checkpoint::open(root.path()).unwrap_err().to_string();
    assert!(
        err.contains("2 models") && err.contains("a-GGUF") && err.contains("b-GGUF"),
        "{err}"
    );
    // One publisher's folder with one model inside opens that model.
    let one = root.path().join("someone");
    assert_eq!(outcome(&one), outcome(&one.join("b-GGUF/m.gguf")));
    assert!(outcome(&one).starts_with("Gguf"));
}

#[test]
fn hugging_face_cache_entry_opens_the_newest_snapshot() {
    let root = tempfile::tempdir().unwrap();
    let entry = root.path().join("models--org--tiny");
    let blobs = entry.join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    copy_fixture("llama/f32", &HF_FILES, &blobs);
    let old = entry.join("snapshots/0000old");
    let new = entry.join("snapshots/ffffnew");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::create_dir_all(&new).unwrap();
    for f in HF_FILES {
        std::os::unix::fs::symlink(blobs.join(f), new.join(f)).unwrap();
    }
    // The old snapshot is incomplete: picking it would fail.
    std::os::unix::fs::symlink(blobs.join("config.json"), old.join("config.json")).unwrap();
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::open(&old)
        .unwrap()
        .set_modified(past)
        .unwrap();
    let c = Checkpoint::open(&entry).unwrap();
    assert_eq!(c.dir, new);
    assert_eq!(c.tensor_count(), 21);
    assert_eq!(
        find_models(root.path()),
        vec![ModelCandidate {
            path: new,
            format: Format::Safetensors
        }]
    );
}

#[test]
fn incomplete_and_missing_models() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture("llama/f32", &["config.json", "tokenizer.json"], dir.path());
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::NotAModel { .. }), "{err}");
    assert!(
        err.to_string().contains("config.json but no weights"),
        "{err}"
    );

    // An index whose shard is absent.
    copy_fixture(
        "llama/mlx-4bit",
        &["model.safetensors.index.json"],
        dir.path(),
    );
    let err = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::NotAModel { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("shard model.safetensors named by model.safetensors.index.json is missing"),
        "{err}"
    );

    // Numbered shards with a gap.
    let dir = tempfile::tempdir().unwrap();
    copy_fixture("llama/f32", &["model.safetensors"], dir.path());
    std::fs::rename(
        dir.path().join("model.safetensors"),
        dir.path().join("model-00001-of-00003.safetensors"),
    )
    .unwrap();
    let err = Checkpoint::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("model-00002-of-00003.safetensors is missing"),
        "{err}"
    );

    let err = Checkpoint::open(fixtures().join("no/such/model")).unwrap_err();
    assert!(
        err.to_string().contains("no/such/model")
            && err.to_string().contains("no such file or folder"),
        "{err}"
    );

    let empty = tempfile::tempdir().unwrap();
    let err = Checkpoint::open(empty.path()).unwrap_err();
    assert!(
        matches!(err, FormatError::NotAModel { .. })
            && err
                .to_string()
                .contains("no GGUF, SafeTensors or MLX model"),
        "{err}"
    );
}
