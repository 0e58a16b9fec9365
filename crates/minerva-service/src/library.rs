//! Models a user already has: the recent ones, and those found in the folders other tools keep
//! them in (LM Studio, the Hugging Face hub cache, llama.cpp's cache, Jan), each with its
//! format and size, ready to open in one click.

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
    /// recent, lmstudio, hf-cache, llamacpp or jan.
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
fn size_of(path: &Path) -> u64 {
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
/// usual places under `home`.
pub fn found_models(store: &Store, home: Option<&Path>) -> Vec<FoundModel> {
    let mut found: Vec<FoundModel> = store
        .recent_models(20)
        .unwrap_or_default()
        .into_iter()
        .map(|r| PathBuf::from(&r.path))
        .filter(|p| p.exists())
        .map(|p| FoundModel {
            name: crate::models::display_name(&p),
            format: String::new(),
            bytes: 0,
            source: "recent",
            path: p,
        })
        .collect();
    for r in &mut found {
        if let Ok(c) = minerva_formats::Checkpoint::open(&r.path) {
            r.format = c.format.name().to_string();
        }
        r.bytes = size_of(&r.path);
    }
    let Some(home) = home else { return found };
    for (place, source) in PLACES {
        let dir = home.join(place);
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
