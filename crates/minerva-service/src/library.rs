//! Models a user already has: the recent ones, and those found in the folders other tools keep
//! them in (LM Studio, the Hugging Face hub cache, llama.cpp's cache, Jan, Ollama's store),
//! each with its format and size, ready to open in one click.

use crate::store::Store;
use minerva_formats::detect::find_models;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FoundModel {
    pub path: PathBuf,
    pub name: String,
    /// gguf, safetensors or mlx.
    pub format: String,
    pub bytes: u64,
    /// recent, lmstudio, hf-cache, llamacpp, jan, ollama, or folder (one the user named).
    pub source: &'static str,
}

/// Where other tools keep models, under the home folder, with the source each stands for.
const PLACES: &[(&str, &str)] = &[
    (".lmstudio/models", "lmstudio"),
    (".cache/lm-studio/models", "lmstudio"),
    (".cache/huggingface/hub", "hf-cache"),
    (".cache/llama.cpp", "llamacpp"),
    ("jan/models", "jan"),
    (".local/share/Jan/data/models", "jan"),
];

/// Bytes of a model file, or of the files directly in a model folder.
pub(crate) fn size_of(path: &Path) -> u64 {
    if path.is_file() {
        return std::fs::metadata(path).map_or(0, |m| m.len());
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// The recent models (most recent first, those still on disk), then every model found in the
/// usual places under `home` and in the user's own `folders`.
pub fn found_models(store: &Store, home: Option<&Path>, folders: &[PathBuf]) -> Vec<FoundModel> {
    // Format and size were recorded when the model was opened.
    let mut found: Vec<FoundModel> = store
        .recent_models(20)
        .unwrap_or_default()
        .into_iter()
        .map(|r| (PathBuf::from(&r.path), r))
        .filter(|(p, _)| p.exists())
        .map(|(p, r)| FoundModel {
            name: crate::models::display_name(&p),
            format: r.format,
            bytes: r.bytes,
            source: "recent",
            path: p,
        })
        .collect();
    let mut places: Vec<(PathBuf, &'static str)> = Vec::new();
    if let Some(home) = home {
        let ollama = std::env::var_os("OLLAMA_MODELS")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".ollama/models"));
        for m in ollama_models(&ollama) {
            if !found.iter().any(|f| f.path == m.path) {
                found.push(m);
            }
        }
        places.extend(PLACES.iter().map(|(p, source)| (home.join(p), *source)));
    }
    places.extend(folders.iter().map(|f| (f.clone(), "folder")));
    for (dir, source) in places {
        if !dir.is_dir() {
            continue;
        }
        for m in find_models(&dir) {
            if found.iter().any(|f| f.path == m.path) {
                continue;
            }
            found.push(FoundModel {
                name: crate::models::display_name(&m.path),
                format: m.format.name().to_string(),
                bytes: size_of(&m.path),
                source,
                path: m.path,
            });
        }
    }
    found
}

/// The GGUF blobs Ollama's manifests name (`manifests/<registry>/<namespace>/<model>/<tag>`,
/// each listing its layers; the model layer's digest names `blobs/sha256-<hex>`), as
/// `model:tag`.
pub(crate) fn ollama_models(root: &Path) -> Vec<FoundModel> {
    let mut manifests = Vec::new();
    collect_files(&root.join("manifests"), 4, &mut manifests);
    manifests.sort();
    manifests
        .into_iter()
        .filter_map(|manifest| {
            let text = std::fs::read_to_string(&manifest).ok()?;
            let json: serde_json::Value = serde_json::from_str(&text).ok()?;
            let digest = json["layers"]
                .as_array()?
                .iter()
                .find(|l| l["mediaType"] == "application/vnd.ollama.image.model")?["digest"]
                .as_str()?;
            let hex = digest.strip_prefix("sha256:")?;
            if !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            let blob = root.join("blobs").join(format!("sha256-{hex}"));
            let bytes = std::fs::metadata(&blob).ok()?.len();
            let tag = manifest.file_name()?.to_string_lossy().into_owned();
            let model = manifest
                .parent()?
                .file_name()?
                .to_string_lossy()
                .into_owned();
            Some(FoundModel {
                path: blob,
                name: format!("{model}:{tag}"),
                format: "gguf".into(),
                bytes,
                source: "ollama",
            })
        })
        .collect()
}

/// Files under `dir`, at most `depth` folders down.
fn collect_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_file() => out.push(path),
            Ok(t) if t.is_dir() && depth > 0 => collect_files(&path, depth - 1, out),
            _ => {}
        }
    }
}
