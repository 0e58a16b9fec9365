//! Loaded models: loading with progress in bytes and a cancel, each model then running on a
//! session thread of its own (its KV cache kept between turns), with what its chats need to
//! turn messages into tokens and tokens into text.

use crate::error::{Result, ServiceError};
use minerva_engine::session::SessionHandle;
use minerva_engine::{BackendChoice, BackendKind, Loaded, Session};
use minerva_text::{PromptBuilder, PromptKind, Tokenizer};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a model should run: `auto`, `cpu`, `gpu`, or (part of) a GPU adapter's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendRequest {
    pub kind: BackendKind,
    pub adapter: Option<String>,
}

impl BackendRequest {
    pub fn parse(s: &str) -> BackendRequest {
        match s.trim().parse::<BackendKind>() {
            Ok(kind) => BackendRequest {
                kind,
                adapter: None,
            },
            Err(_) if s.trim().is_empty() => BackendRequest {
                kind: BackendKind::Auto,
                adapter: None,
            },
            Err(_) => BackendRequest {
                kind: BackendKind::Gpu,
                adapter: Some(s.trim().to_string()),
            },
        }
    }
}

/// Tokenizer, chat prompt builder and stop ids of a checkpoint.
pub struct ChatPrep {
    pub tokenizer: Arc<Tokenizer>,
    pub builder: PromptBuilder,
    pub stop: Vec<u32>,
}

impl ChatPrep {
    pub fn new(loaded: &Loaded) -> Result<ChatPrep> {
        let ckpt = &loaded.checkpoint;
        let tokenizer = Arc::new(Tokenizer::from_checkpoint(ckpt)?);
        tokenizer.check_fits(loaded.model.spec.vocab_size)?;
        let builder = PromptBuilder::from_checkpoint(ckpt)?;
        let mut stop: Vec<u32> = loaded.model.spec.eos_token_ids.clone();
        stop.extend(tokenizer.eos_ids());
        if builder.kind() == PromptKind::Harmony {
            stop.extend(minerva_text::harmony::stop_token_ids(&tokenizer));
        }
        stop.sort_unstable();
        stop.dedup();
        Ok(ChatPrep {
            tokenizer,
            builder,
            stop,
        })
    }
}

/// What front ends are told of a loaded model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    pub id: u64,
    pub path: PathBuf,
    pub name: String,
    /// `cpu` or `gpu`.
    pub backend: &'static str,
    /// The GPU adapter, as `name (API, driver …)`.
    pub adapter: Option<String>,
    /// Why `auto` stayed on the CPU.
    pub backend_reason: Option<String>,
    pub load_ms: f64,
    pub ctx: usize,
}

/// A model ready to chat: one of this machine's, or one of a remote engine's.
pub struct LoadedModel {
    pub info: ModelInfo,
    pub engine: Engine,
}

pub enum Engine {
    Local(LocalModel),
    /// A model of an OpenAI-compatible engine elsewhere (see [`crate::sources`]).
    Remote {
        engine: crate::remote::RemoteEngine,
        model: String,
    },
}

/// A model of this machine: its session thread and its text side.
pub struct LocalModel {
    pub prep: ChatPrep,
    pub session: SessionHandle,
}

impl LoadedModel {
    /// The local model, or an error saying this one runs elsewhere.
    pub fn local(&self) -> Result<&LocalModel> {
        match &self.engine {
            Engine::Local(m) => Ok(m),
            Engine::Remote { engine, .. } => Err(ServiceError::Invalid(format!(
                "{} runs on the engine at {}: it cannot be served or scored from here",
                self.info.name,
                engine.url()
            ))),
        }
    }
}

/// A short name for a model: a GGUF file's stem; for a folder (or a SafeTensors file in one)
/// the folder's name, or the repository's name for a Hugging Face cache snapshot
/// (`models--ORG--REPO/snapshots/<hash>` → `REPO`).
pub fn display_name(path: &Path) -> String {
    let is_weights = path.extension().is_some_and(|e| e == "safetensors");
    let folder = if is_weights {
        path.parent().unwrap_or(path)
    } else {
        path
    };
    if path.is_file() && !is_weights {
        if let Some(stem) = path.file_stem() {
            return stem.to_string_lossy().into_owned();
        }
    }
    let snapshot_repo = folder
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "snapshots"))
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("models--"))
        .and_then(|n| n.rsplit("--").next());
    match (snapshot_repo, folder.file_name()) {
        (Some(repo), _) => repo.to_string(),
        (None, Some(n)) => n.to_string_lossy().into_owned(),
        (None, None) => path.display().to_string(),
    }
}

#[cfg(test)]
#[test]
fn display_names_say_which_model() {
    let dir = tempfile::tempdir().unwrap();
    let file = |rel: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"x").unwrap();
        p
    };
    assert_eq!(
        display_name(&file("a/Qwen3-0.6B-Q8_0.gguf")),
        "Qwen3-0.6B-Q8_0"
    );
    assert_eq!(
        display_name(&file("thinking/model.safetensors")),
        "thinking"
    );
    let snap = file("hub/models--Qwen--Qwen3-0.6B/snapshots/ab12/config.json");
    assert_eq!(display_name(snap.parent().unwrap()), "Qwen3-0.6B");
    assert_eq!(
        display_name(
            &dir.path()
                .join("hub/models--Qwen--Qwen3-0.6B/snapshots/ab12/model.safetensors")
        ),
        "Qwen3-0.6B"
    );
}

/// Loads `path` (reporting `progress(bytes, total)`, which returns false to cancel), starts
/// its session with a cache of `ctx` tokens (default: the model's, at most 4096).
pub fn load(
    id: u64,
    path: &Path,
    backend: &BackendRequest,
    ctx: Option<usize>,
    progress: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<LoadedModel> {
    let path = &crate::catalogue::resolve(path)?;
    let loaded =
        minerva_engine::load_observed(path, backend.kind, backend.adapter.as_deref(), progress)?;
    let prep = ChatPrep::new(&loaded)?;
    let ctx = ctx.unwrap_or_else(|| crate::card::default_ctx(&loaded.model.spec));
    let choice: BackendChoice = loaded.backend.clone();
    let info = ModelInfo {
        id,
        path: path.to_path_buf(),
        name: display_name(path),
        backend: choice.name(),
        adapter: choice.adapter.as_ref().map(|a| a.to_string()),
        backend_reason: choice.reason.clone(),
        load_ms: loaded.load_ms,
        ctx,
    };
    let session = Session::new(loaded.model, ctx, loaded.load_ms)
        .map_err(|e| ServiceError::Engine(e.to_string()))?
        .spawn();
    Ok(LoadedModel {
        info,
        engine: Engine::Local(LocalModel { prep, session }),
    })
}
