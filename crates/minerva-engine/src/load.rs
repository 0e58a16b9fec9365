//! Loading a model for running: open the checkpoint, pick the backend, upload, time it.

use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::devices::{self, BackendChoice, BackendKind};
use crate::error::{EngineError, Result};
use crate::model::{Model, DEFAULT_MAX_BATCH};
use minerva_formats::Checkpoint;
use std::path::Path;
use std::time::Instant;

/// A fresh backend of a resolved kind (`Auto` is taken as the CPU: resolve it with
/// [`devices::choose`] first).
pub fn make_backend(kind: BackendKind) -> Result<Box<dyn Backend>> {
    match kind {
        BackendKind::Auto | BackendKind::Cpu => Ok(Box::new(CpuBackend::new())),
        BackendKind::Gpu => Ok(Box::new(crate::gpu::GpuBackend::new(&Default::default())?)),
    }
}

/// An opened checkpoint and its model, ready to run.
pub struct Loaded {
    pub checkpoint: Checkpoint,
    pub model: Model,
    /// What the model runs on, and why.
    pub backend: BackendChoice,
    /// Opening, mapping the weights to roles, uploading, allocating.
    pub load_ms: f64,
}

/// Opens `path`, builds the spec and uploads the weights to the backend `kind` resolves to.
/// With `Auto`, a GPU that cannot take the model (no device, out of memory) leaves it on the
/// CPU, and the choice says why.
pub fn load(path: &Path, kind: BackendKind) -> Result<Loaded> {
    let mut choice = devices::choose(kind);
    let start = Instant::now();
    let checkpoint = Checkpoint::open(path)?;
    let spec = checkpoint.spec()?;
    let on_gpu = make_backend(choice.kind)
        .and_then(|b| Model::load_with_spec(&checkpoint, spec.clone(), b, DEFAULT_MAX_BATCH));
    let model = match on_gpu {
        Err(EngineError::Backend(why)) if kind == BackendKind::Auto => {
            choice = BackendChoice::cpu(Some(format!("the GPU could not take the model: {why}")));
            Model::load_with_spec(
                &checkpoint,
                spec,
                make_backend(choice.kind)?,
                DEFAULT_MAX_BATCH,
            )?
        }
        other => other?,
    };
    Ok(Loaded {
        checkpoint,
        model,
        backend: choice,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}
