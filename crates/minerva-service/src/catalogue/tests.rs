//! The catalogue: the shipped file loads whole; a user's file extends and overrides it; bad
//! entries are reported with file and line; sources resolve in a fake home's stores.

use super::*;

#[test]
fn the_shipped_catalogue_loads_without_problems() {
    let c = Catalogue::load(None);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    for id in [
        "smollm2-135m-instruct",
        "tinyllama-1.1b",
        "llama-3.2-1b",
        "qwen3-0.6b",
        "mixtral-8x7b",
        "gpt-oss-20b",
    ] {
        let e = c.get(id).unwrap_or_else(|| panic!("{id} missing"));
        assert_eq!(e.sources.len(), 3, "{id}: a source for each format");
    }
    // Every shape `minerva synth` knows at a real size has an entry.
    for shape in [
        "tinyllama-1.1b",
        "llama-3.2-1b",
        "qwen3-0.6b",
        "mixtral-small",
        "gpt-oss-20b",
    ] {
        assert!(
            c.entries
                .iter()
                .any(|e| e.synth.as_ref().is_some_and(|s| s.shape == shape)),
            "{shape}"
        );
    }
    // The fixture entry resolves inside the repository.
    let fixture = c.get("tiny-llama-fixture").unwrap();
    let found = c.found(None);
    assert!(
        found
            .iter()
            .filter(|f| f.name.starts_with(&fixture.name))
            .count()
            >= 5,
        "{found:?}"
    );
    assert!(found
        .iter()
        .any(|f| f.format == "mlx" && f.path.ends_with("llama/mlx-4bit")));
}

#[test]
fn a_users_file_extends_overrides_and_reports_bad_entries_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("models.toml");
    std::fs::write(
        &user,
        r#"
[[model]]
id = "mine"
name = "Mine"
architecture = "llama"
gguf = ["mine.gguf"]

[[model]]
id = "qwen3-0.6b"
name = "My Qwen3"
architecture = "qwen3"
gguf = ["~/qwen.gguf"]

[[model]]
id = "broken"
name = "Broken"
architecture = "gpt2"
gguf = ["x.gguf"]

[[model]]
id = "typo"
name = "Typo"
architecture = "llama"
ggfu = ["x.gguf"]
"#,
    )
    .unwrap();
    let c = Catalogue::load(Some(&user));
    assert_eq!(c.get("qwen3-0.6b").unwrap().name, "My Qwen3");
    assert_eq!(c.entries.iter().filter(|e| e.id == "qwen3-0.6b").count(), 1);
    assert!(c.get("mine").is_some() && c.get("broken").is_none());
    let shown = format!("{}:14: model 'broken': architecture 'gpt2'", user.display());
    assert!(
        c.problems.iter().any(|p| p.starts_with(&shown)),
        "{:?}",
        c.problems
    );
    let typo = format!("{}:20: model 'typo': unknown field `ggfu`", user.display());
    assert!(
        c.problems.iter().any(|p| p.starts_with(&typo)),
        "{:?}",
        c.problems
    );
    assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
}

#[test]
fn sources_resolve_in_the_usual_stores() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let write = |rel: &str, text: &str| {
        let p = h.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        ".cache/huggingface/hub/models--Qwen--Qwen3-0.6B-GGUF/snapshots/abc/Qwen3-0.6B-Q8_0.gguf",
        "GGUF",
    );
    write(
        ".cache/huggingface/hub/models--Qwen--Qwen3-0.6B/snapshots/abc/config.json",
        "{}",
    );
    write(
        ".lmstudio/models/mlx-community/Qwen3-0.6B-4bit/config.json",
        "{}",
    );
    write(
        ".cache/llama.cpp/unsloth_Qwen3-0.6B-GGUF_Qwen3-0.6B-Q4_K_M.gguf",
        "GGUF",
    );
    write(
        ".ollama/models/manifests/registry.ollama.ai/library/qwen3/0.6b",
        r#"{"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:ab12"}]}"#,
    );
    write(".ollama/models/blobs/sha256-ab12", "GGUF");
    let c = Catalogue::load(None);
    let found: Vec<_> = c
        .found(Some(h))
        .into_iter()
        .filter(|f| f.name.starts_with("Qwen3 0.6B"))
        .collect();
    let has = |rel: &str, format: &str| {
        found
            .iter()
            .any(|f| f.path == h.join(rel) && f.format == format && f.source == "catalogue")
    };
    assert!(has(".cache/huggingface/hub/models--Qwen--Qwen3-0.6B-GGUF/snapshots/abc/Qwen3-0.6B-Q8_0.gguf", "gguf"), "{found:?}");
    assert!(
        has(
            ".cache/huggingface/hub/models--Qwen--Qwen3-0.6B/snapshots/abc",
            "safetensors"
        ),
        "{found:?}"
    );
    assert!(
        has(".lmstudio/models/mlx-community/Qwen3-0.6B-4bit", "mlx"),
        "{found:?}"
    );
    assert!(
        has(
            ".cache/llama.cpp/unsloth_Qwen3-0.6B-GGUF_Qwen3-0.6B-Q4_K_M.gguf",
            "gguf"
        ),
        "{found:?}"
    );
    assert!(has(".ollama/models/blobs/sha256-ab12", "gguf"), "{found:?}");
}
