//! Loading a model for running: open the checkpoint, pick the backend, upload, time it.

use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::error::Result;
use crate::model::{Model, DEFAULT_MAX_BATCH};
use minerva_formats::Checkpoint;
use std::path::Path;
use std::str::FromStr;
use std::time::Instant;

/// Which backend runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendKind {
    #[default]
    Cpu,
    Gpu,
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cpu" => Ok(BackendKind::Cpu),
            "gpu" => Ok(BackendKind::Gpu),
            other => Err(format!("unknown backend '{other}' (expected cpu or gpu)")),
        }
    }
}

/// A fresh backend of this kind.
pub fn make_backend(kind: BackendKind) -> Result<Box<dyn Backend>> {
    match kind {
        BackendKind::Cpu => Ok(Box::new(CpuBackend::new())),
        BackendKind::Gpu => Ok(Box::new(crate::gpu::GpuBackend::new(&Default::default())?)),
    }
}

/// An opened checkpoint and its model, ready to run.
pub struct Loaded {
    pub checkpoint: Checkpoint,
    pub model: Model,
    /// Opening, mapping the weights to roles, uploading, allocating.
    pub load_ms: f64,
}

/// Opens `path`, builds the spec and uploads the weights to a `kind` backend.
pub fn load(path: &Path, kind: BackendKind) -> Result<Loaded> {
    let start = Instant::now();
    let checkpoint = Checkpoint::open(path)?;
    let spec = checkpoint.spec()?;
    let model = Model::load_with_spec(&checkpoint, spec, make_backend(kind)?, DEFAULT_MAX_BATCH)?;
    Ok(Loaded {
        checkpoint,
        model,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}
