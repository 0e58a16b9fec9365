//! Format detection: from a file or a folder to an opened Checkpoint. A path may be a GGUF
//! file (lone or the first of a split set), a model folder (SafeTensors or MLX, or one holding
//! a single GGUF as LM Studio lays them out), a Hugging Face cache entry (`models--org--name`),
//! or a folder of several models, which is refused with the list of what it holds.

use crate::checkpoint::{Checkpoint, Format};
use crate::error::{FormatError, Result};
use crate::metadata::Metadata;
use crate::{mlx, safetensors_reader};
use std::path::{Path, PathBuf};

/// One model found under a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCandidate {
    /// What to pass to `open`: a GGUF file (the first of a split set) or a model folder.
    pub path: PathBuf,
    /// Gguf, Safetensors, or Mlx where config.json has an MLX quantization block.
    pub format: Format,
}

/// How deep `find_models` looks: LM Studio's root holds `publisher/model/file.gguf`.
const SEARCH_DEPTH: usize = 3;

impl Checkpoint {
    /// Opens a model from a file or folder, detecting its format.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        open(path.as_ref())
    }
}

pub fn open(path: &Path) -> Result<Checkpoint> {
    let meta = std::fs::metadata(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            FormatError::not_a_model(path, "no such file or folder")
        } else {
            FormatError::io(path, e)
        }
    })?;
    if meta.is_file() {
        return open_file(path);
    }
    if let Some(snapshot) = hf_cache_snapshot(path)? {
        return open(&snapshot);
    }
    if safetensors_reader::weight_files(path)?.is_some() {
        return open_folder(path);
    }
    let ggufs = gguf_models_in(path);
    match ggufs.len() {
        1 => return crate::gguf::open(&ggufs[0]),
        0 => {}
        _ => {
            return Err(several(
                path,
                ggufs
                    .into_iter()
                    .map(|p| ModelCandidate {
                        path: p,
                        format: Format::Gguf,
                    })
                    .collect(),
            ))
        }
    }
    if path.join("config.json").is_file() {
        return Err(FormatError::not_a_model(
            path,
            format!(
                "config.json but no weights ({}, {} or model-XXXXX-of-XXXXX.safetensors)",
                safetensors_reader::SINGLE_FILE,
                safetensors_reader::INDEX_FILE
            ),
        ));
    }
    let found = find_models(path);
    match found.len() {
        0 => Err(FormatError::not_a_model(
            path,
            "no GGUF, SafeTensors or MLX model found",
        )),
        1 => open(&found[0].path),
        _ => Err(several(path, found)),
    }
}

fn several(path: &Path, found: Vec<ModelCandidate>) -> FormatError {
    let list: Vec<String> = found
        .iter()
        .map(|c| format!("  {} ({})", c.path.display(), c.format.name()))
        .collect();
    FormatError::not_a_model(
        path,
        format!(
            "holds {} models; pick one:\n{}",
            found.len(),
            list.join("\n")
        ),
    )
}

fn open_file(path: &Path) -> Result<Checkpoint> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Stores that name files by their hash (Ollama's blobs) keep GGUF files without the
    // extension: the magic says what they are.
    if name.ends_with(".gguf") || starts_with_gguf_magic(path) {
        return crate::gguf::open(path);
    }
    let is_weights = name == safetensors_reader::SINGLE_FILE
        || name == safetensors_reader::INDEX_FILE
        || name == "config.json"
        || (name.starts_with("model-") && name.ends_with(".safetensors"));
    match path.parent() {
        Some(dir) if is_weights => open(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }),
        _ => Err(FormatError::not_a_model(
            path,
            "not a model file (expected a .gguf file, model.safetensors, model.safetensors.index.json or a model folder)",
        )),
    }
}

fn starts_with_gguf_magic(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"GGUF")
}

/// `models--org--name` of a Hugging Face cache: its newest `snapshots/<hash>/`.
fn hf_cache_snapshot(path: &Path) -> Result<Option<PathBuf>> {
    let is_cache_entry = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("models--"));
    let snapshots = path.join("snapshots");
    if !is_cache_entry || !snapshots.is_dir() {
        return Ok(None);
    }
    let newest = std::fs::read_dir(&snapshots)
        .map_err(|e| FormatError::io(&snapshots, e))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max();
    match newest {
        Some((_, p)) => Ok(Some(p)),
        None => Err(FormatError::not_a_model(
            path,
            "Hugging Face cache entry with no snapshot",
        )),
    }
}

/// Split GGUF name `x-00002-of-00003.gguf` → (2, 3).
fn gguf_split(name: &str) -> Option<(usize, usize)> {
    let stem = name.strip_suffix(".gguf")?;
    let (head, total) = stem.rsplit_once("-of-")?;
    let (_, index) = head.rsplit_once('-')?;
    let num = |s: &str| {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    Some((num(index)?, num(total)?))
}

/// The GGUF models directly in a folder: lone files and the first file of each split set.
fn gguf_models_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            name.ends_with(".gguf") && gguf_split(&name).is_none_or(|(i, _)| i == 1)
        })
        .collect();
    out.sort();
    out
}

/// Every model under `path` (the path itself included), up to three folder levels down:
/// GGUF files, SafeTensors/MLX folders and Hugging Face cache entries.
pub fn find_models(path: &Path) -> Vec<ModelCandidate> {
    let mut found = Vec::new();
    if path.is_file() {
        if path.extension().is_some_and(|e| e == "gguf") {
            found.push(ModelCandidate {
                path: path.to_path_buf(),
                format: Format::Gguf,
            });
        }
        return found;
    }
    search(path, SEARCH_DEPTH, &mut found);
    found
}

fn search(dir: &Path, depth: usize, found: &mut Vec<ModelCandidate>) {
    if let Ok(Some(snapshot)) = hf_cache_snapshot(dir) {
        search(&snapshot, 0, found);
        return;
    }
    if matches!(safetensors_reader::weight_files(dir), Ok(Some(_))) {
        let mlx =
            matches!(safetensors_reader::read_config(dir), Ok(Some(c)) if mlx::is_mlx_config(&c));
        let format = if mlx {
            Format::Mlx
        } else {
            Format::Safetensors
        };
        found.push(ModelCandidate {
            path: dir.to_path_buf(),
            format,
        });
        return;
    }
    found.extend(gguf_models_in(dir).into_iter().map(|p| ModelCandidate {
        path: p,
        format: Format::Gguf,
    }));
    if depth == 0 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut subdirs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    for sub in subdirs {
        search(&sub, depth - 1, found);
    }
}

/// Opens a model folder holding SafeTensors weights: MLX when config.json has an MLX
/// quantization block, SafeTensors otherwise.
fn open_folder(dir: &Path) -> Result<Checkpoint> {
    let weights = safetensors_reader::weight_files(dir)?.ok_or_else(|| {
        FormatError::not_a_model(
            dir,
            format!(
                "no {}, {} or model-XXXXX-of-XXXXX.safetensors",
                safetensors_reader::SINGLE_FILE,
                safetensors_reader::INDEX_FILE
            ),
        )
    })?;
    let config = safetensors_reader::read_config(dir)?;
    let set = safetensors_reader::ShardSet::read(dir, &weights.paths)?;
    if let Some(pairs) = &weights.index {
        set.check_index(&dir.join(safetensors_reader::INDEX_FILE), pairs)?;
    }
    let (format, entries) = match &config {
        Some(c) if mlx::is_mlx_config(c) => (
            Format::Mlx,
            mlx::entries(&set, c, &dir.join("config.json"))?,
        ),
        _ => (Format::Safetensors, set.plain_entries()?),
    };
    let safetensors_reader::ShardSet { files, maps, .. } = set;
    Checkpoint::from_parts(
        format,
        dir.to_path_buf(),
        files,
        maps,
        entries,
        Metadata::default(),
        config,
    )
}
