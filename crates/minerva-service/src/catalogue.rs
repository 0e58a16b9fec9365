//! The model catalogue: `models.toml` shipped with Minerva, extended (and overridden by id) by
//! the user's own `models.toml` in the config folder. Each entry names a model, its
//! architecture, where each format of it is usually kept, and the synthetic shape `minerva
//! synth` makes at the same size when no file is there. A bad entry is reported with its file,
//! line and what is wrong; the other entries still load.
//!
//! Where a format lives is a list of sources:
//! - `hf:ORG/REPO` — that repository in the Hugging Face hub cache (each snapshot folder, or
//!   its `.gguf` files), in LM Studio's models folder, and in llama.cpp's download cache;
//! - `ollama:NAME[:TAG]` — the GGUF blob Ollama's manifest for that model names;
//! - anything else — a path or a glob (`~/` is the home folder; relative paths start at the
//!   catalogue file's folder).

use crate::library::{ollama_models, FoundModel};
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The catalogue shipped with Minerva; its relative paths start at the repository root.
pub const SHIPPED: &str = include_str!("../../../models.toml");
pub const SHIPPED_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

const ARCHITECTURES: [&str; 9] = [
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "gpt_oss",
    "phi3",
];
const FORMATS: [&str; 3] = ["gguf", "safetensors", "mlx"];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    /// Each entry is checked on its own, so one bad entry leaves the others usable.
    #[serde(default)]
    model: Vec<toml::Spanned<toml::Value>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryDoc {
    id: String,
    name: String,
    architecture: String,
    #[serde(default)]
    gguf: Vec<String>,
    #[serde(default)]
    safetensors: Vec<String>,
    #[serde(default)]
    mlx: Vec<String>,
    synth: Option<Synth>,
}

/// What `minerva synth` makes when no file is found: a shape it knows and `format:quant`
/// targets as its `--formats` takes them.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Synth {
    pub shape: String,
    #[serde(default)]
    pub formats: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Entry {
    pub id: String,
    pub name: String,
    pub architecture: String,
    /// (format, sources) for each format the entry names.
    pub sources: Vec<(String, Vec<String>)>,
    pub synth: Option<Synth>,
    /// The folder relative paths start at.
    #[serde(skip)]
    pub root: PathBuf,
}

/// The entries that loaded, and a line per problem (`file:line: what`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Catalogue {
    pub entries: Vec<Entry>,
    pub problems: Vec<String>,
}

fn line_of(text: &str, span: &Range<usize>) -> usize {
    text[..span.start.min(text.len())].matches('\n').count() + 1
}

fn check(e: &EntryDoc) -> Result<(), String> {
    if e.id.trim().is_empty() {
        return Err("the id is empty".into());
    }
    if !ARCHITECTURES.contains(&e.architecture.as_str()) {
        return Err(format!(
            "architecture '{}' is not one of {}",
            e.architecture,
            ARCHITECTURES.join(", ")
        ));
    }
    if let Some(s) = &e.synth {
        if minerva_formats::synth::shapes::shape(&s.shape).is_none() {
            return Err(format!(
                "synth shape '{}' is not one `minerva synth` knows",
                s.shape
            ));
        }
        for f in &s.formats {
            let format = f.split(':').next().unwrap_or_default();
            if !FORMATS.contains(&format) {
                return Err(format!(
                    "synth format '{f}' is not gguf:…, safetensors:… or mlx:…"
                ));
            }
        }
    }
    if e.gguf.is_empty() && e.safetensors.is_empty() && e.mlx.is_empty() && e.synth.is_none() {
        return Err("it names no format and no synth shape".into());
    }
    Ok(())
}

impl Catalogue {
    /// Adds the entries of one catalogue file's text; an entry with an id already present
    /// replaces it (a user's file overrides the shipped one).
    pub fn add(&mut self, text: &str, file: &Path, root: &Path) {
        let doc: FileDoc = match toml::from_str(text) {
            Ok(d) => d,
            Err(e) => {
                let line = e.span().map_or(0, |s| line_of(text, &s));
                self.problems
                    .push(format!("{}:{line}: {}", file.display(), e.message()));
                return;
            }
        };
        for spanned in doc.model {
            let line = line_of(text, &spanned.span());
            let value = spanned.into_inner();
            let id = value
                .get("id")
                .and_then(|v| v.as_str())
                .unwrap_or("?")
                .to_string();
            let checked = value
                .try_into::<EntryDoc>()
                .map_err(|e| e.message().trim().to_string())
                .and_then(|e| check(&e).map(|()| e));
            let e = match checked {
                Ok(e) => e,
                Err(what) => {
                    self.problems
                        .push(format!("{}:{line}: model '{id}': {what}", file.display()));
                    continue;
                }
            };
            let entry = Entry {
                sources: [
                    ("gguf", e.gguf),
                    ("safetensors", e.safetensors),
                    ("mlx", e.mlx),
                ]
                .into_iter()
                .filter(|(_, s)| !s.is_empty())
                .map(|(f, s)| (f.to_string(), s))
                .collect(),
                id: e.id,
                name: e.name,
                architecture: e.architecture,
                synth: e.synth,
                root: root.to_path_buf(),
            };
            self.entries.retain(|old| old.id != entry.id);
            self.entries.push(entry);
        }
    }

    /// The shipped catalogue extended by `user` (a file that may not exist).
    pub fn load(user: Option<&Path>) -> Catalogue {
        let mut c = Catalogue::default();
        c.add(SHIPPED, Path::new("models.toml"), Path::new(SHIPPED_ROOT));
        if let Some(path) = user {
            match std::fs::read_to_string(path) {
                Ok(text) => c.add(&text, path, path.parent().unwrap_or(Path::new("."))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => c.problems.push(format!("{}: {e}", path.display())),
            }
        }
        c
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// Every file or folder of the catalogue's models present on this disk, under the entry's
    /// name (with the file's own name where a format has several).
    pub fn found(&self, home: Option<&Path>) -> Vec<FoundModel> {
        let mut out: Vec<FoundModel> = Vec::new();
        for e in &self.entries {
            for (format, sources) in &e.sources {
                let paths = e.locate(format, sources, home);
                let several = paths.len() > 1;
                for path in paths {
                    if out.iter().any(|f| f.path == path) {
                        continue;
                    }
                    // Several files of one format are told apart by their own names.
                    let name = if several {
                        format!("{} · {}", e.name, crate::models::display_name(&path))
                    } else {
                        e.name.clone()
                    };
                    out.push(FoundModel {
                        name,
                        format: format.clone(),
                        bytes: crate::library::size_of(&path),
                        source: "catalogue",
                        path,
                    });
                }
            }
        }
        out
    }
}

impl Entry {
    /// Every file or folder of this model on disk, format by format in the entry's order.
    pub fn files(&self, home: Option<&Path>) -> Vec<PathBuf> {
        self.sources
            .iter()
            .flat_map(|(f, s)| self.locate(f, s, home))
            .collect()
    }

    /// The paths present on disk for one format's sources.
    pub fn locate(&self, format: &str, sources: &[String], home: Option<&Path>) -> Vec<PathBuf> {
        let gguf = format == "gguf";
        let mut patterns: Vec<String> = Vec::new();
        let mut out: Vec<PathBuf> = Vec::new();
        for s in sources {
            if let Some(repo) = s.strip_prefix("hf:") {
                let Some(home) = home else { continue };
                let (org, name) = repo.split_once('/').unwrap_or(("", repo));
                let h = home.display();
                let snapshots =
                    format!("{h}/.cache/huggingface/hub/models--{org}--{name}/snapshots/*");
                if gguf {
                    patterns.push(format!("{snapshots}/*.gguf"));
                    for lms in [".lmstudio/models", ".cache/lm-studio/models"] {
                        patterns.push(format!("{h}/{lms}/{org}/{name}/*.gguf"));
                    }
                    patterns.push(format!("{h}/.cache/llama.cpp/{org}_{name}_*.gguf"));
                } else {
                    patterns.push(snapshots);
                    for lms in [".lmstudio/models", ".cache/lm-studio/models"] {
                        patterns.push(format!("{h}/{lms}/{org}/{name}"));
                    }
                }
            } else if let Some(model) = s.strip_prefix("ollama:") {
                let Some(home) = home else { continue };
                let tagged = if model.contains(':') {
                    model.to_string()
                } else {
                    format!("{model}:latest")
                };
                let root = std::env::var_os("OLLAMA_MODELS")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home.join(".ollama/models"));
                out.extend(
                    ollama_models(&root)
                        .into_iter()
                        .filter(|m| m.name == tagged)
                        .map(|m| m.path),
                );
            } else if let (Some(rest), Some(home)) = (s.strip_prefix("~/"), home) {
                patterns.push(home.join(rest).display().to_string());
            } else {
                patterns.push(self.root.join(s).display().to_string());
            }
        }
        for p in patterns {
            let Ok(paths) = glob::glob(&p) else { continue };
            for path in paths.flatten() {
                let fits = if gguf {
                    path.is_file()
                } else {
                    path.join("config.json").is_file()
                };
                if fits && !out.contains(&path) {
                    out.push(path);
                }
            }
        }
        out
    }
}

/// What a model argument names: an existing path as it is, or a catalogue id as the first of
/// its files on this disk. An id with no file on disk is an error that says how to make one.
pub fn resolve(arg: &Path) -> crate::Result<PathBuf> {
    let id = match arg.to_str() {
        Some(id) if !arg.exists() => id,
        _ => return Ok(arg.to_path_buf()),
    };
    let catalogue = Catalogue::load(crate::user_catalogue_path().as_deref());
    let Some(entry) = catalogue.get(id) else {
        return Ok(arg.to_path_buf());
    };
    let first = entry.files(dirs::home_dir().as_deref()).into_iter().next();
    first.ok_or_else(|| {
        let make = entry.synth.as_ref().map_or(String::new(), |s| {
            format!(
                "; `minerva synth --shape {} --out DIR` makes one of its size",
                s.shape
            )
        });
        crate::ServiceError::Model(format!(
            "catalogue model '{id}' ({}) has no file on this disk{make}",
            entry.name
        ))
    })
}

#[cfg(test)]
mod tests;
