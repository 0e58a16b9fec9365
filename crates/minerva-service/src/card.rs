//! A model's card: what a file or folder holds (format, architecture, parameters, dtype mix,
//! context, tokenizer and chat template) and the memory it needs at a context length, set
//! against what the device that would run it has ("unknown" rather than a guess).

use minerva_engine::{BackendChoice, BackendKind};
use minerva_formats::{Checkpoint, ModelSpec};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize)]
pub struct FileInfo {
    pub path: PathBuf,
    pub size: u64,
}

/// Whether the model fits the device's free memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fit {
    Yes,
    No,
    Unknown,
}

#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    pub weights_bytes: u64,
    /// The KV cache at `ctx` tokens (f16 keys and values).
    pub kv_bytes: u64,
    pub ctx: usize,
    /// `cpu`, or `gpu: <adapter>`: where `--backend auto` would run it.
    pub device: String,
    /// Free memory of that device, where the system reports it (RAM for the CPU; wgpu does
    /// not report GPU memory).
    pub available_bytes: Option<u64>,
    pub fits: Fit,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelCard {
    pub path: PathBuf,
    pub format: &'static str,
    pub architecture: &'static str,
    pub parameters: u64,
    pub tensors: usize,
    pub dtypes: BTreeMap<String, usize>,
    pub context_length: usize,
    pub spec: ModelSpec,
    pub files: Vec<FileInfo>,
    pub file_bytes: u64,
    pub tokenizer: bool,
    pub chat_template: bool,
    pub memory: Memory,
}

/// The default context: the model's trained length, at most 4096.
pub fn default_ctx(spec: &ModelSpec) -> usize {
    spec.context_length.clamp(1, 4096)
}

/// The card of an opened checkpoint, with memory at `ctx` (default: [`default_ctx`]) on the
/// device `backend` resolves to.
pub fn card(
    ckpt: &Checkpoint,
    ctx: Option<usize>,
    backend: &BackendChoice,
) -> crate::Result<ModelCard> {
    let spec = ckpt.spec()?;
    let mut dtypes = BTreeMap::new();
    for t in ckpt.tensors() {
        *dtypes.entry(t.dtype.name()).or_insert(0) += 1;
    }
    let ctx = ctx.unwrap_or_else(|| default_ctx(&spec));
    let files: Vec<FileInfo> = ckpt
        .files
        .iter()
        .map(|f| FileInfo {
            path: f.path.clone(),
            size: f.size,
        })
        .collect();
    let weights_bytes = ckpt.weights_bytes();
    let kv_bytes = spec.kv_cache_bytes(ctx, 2);
    let available_bytes = match backend.kind {
        BackendKind::Gpu => None,
        _ => free_ram(),
    };
    let fits = match available_bytes {
        Some(free) if weights_bytes + kv_bytes <= free => Fit::Yes,
        Some(_) => Fit::No,
        None => Fit::Unknown,
    };
    Ok(ModelCard {
        path: ckpt.main_path().to_path_buf(),
        format: ckpt.format.name(),
        architecture: spec.architecture.name(),
        parameters: ckpt.parameters(),
        tensors: ckpt.tensor_count(),
        dtypes,
        context_length: spec.context_length,
        file_bytes: files.iter().map(|f| f.size).sum(),
        files,
        tokenizer: has_tokenizer(ckpt),
        chat_template: has_chat_template(ckpt),
        memory: Memory {
            weights_bytes,
            kv_bytes,
            ctx,
            device: backend.to_string(),
            available_bytes,
            fits,
        },
        spec,
    })
}

/// RAM the system could give a new process now.
fn free_ram() -> Option<u64> {
    let mut sys = sysinfo::System::new().ok()?;
    sys.refresh_memory();
    let free = sys.available_memory();
    (free > 0).then_some(free)
}

/// Whether the model carries a tokenizer: tokenizer.json beside it, or a GGUF vocabulary.
fn has_tokenizer(ckpt: &Checkpoint) -> bool {
    ckpt.companion("tokenizer.json").is_some()
        || ckpt.metadata.get("tokenizer.ggml.tokens").is_some()
}

/// Whether the model carries a chat template in any of the places templates live.
fn has_chat_template(ckpt: &Checkpoint) -> bool {
    if ckpt.metadata.get_str("tokenizer.chat_template").is_some()
        || ckpt.companion("chat_template.jinja").is_some()
    {
        return true;
    }
    ckpt.companion("tokenizer_config.json")
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v.get("chat_template").is_some_and(|t| !t.is_null()))
}
