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
/// [`devices::choose`] first); a GPU one on the best adapter whose name contains `adapter`.
pub fn make_backend(kind: BackendKind, adapter: Option<&str>) -> Result<Box<dyn Backend>> {
    match kind {
        BackendKind::Auto | BackendKind::Cpu => Ok(Box::new(CpuBackend::new())),
        BackendKind::Gpu => Ok(Box::new(crate::gpu::GpuBackend::new(&gpu_options(
            adapter,
        ))?)),
    }
}

/// The options a GPU backend of `make_backend` is made with.
fn gpu_options(adapter: Option<&str>) -> crate::gpu::GpuOptions {
    crate::gpu::GpuOptions {
        adapter_name: adapter.map(str::to_string),
        ..Default::default()
    }
}

/// For a process that loads models one after another (the app, the server): makes the GPU
/// device that loads of `kind` on `adapter` will take, on a thread of its own, and from now on
/// keeps the device of a model that unloads for the next load (`gpu::device_pool`). A load then
/// skips making a device (70–100 ms on an H200). Nothing where `kind` resolves to the CPU.
pub fn prepare(kind: BackendKind, adapter: Option<&str>) {
    if kind == BackendKind::Cpu {
        return;
    }
    let adapter = adapter.map(str::to_string);
    // Listing the adapters to resolve `kind` takes tens of milliseconds as well: on that thread,
    // not the caller's (the app's, while its window opens).
    crate::gpu::device_pool::make_ahead(move || {
        let choice = devices::choose_named(kind, adapter.as_deref());
        (choice.kind == BackendKind::Gpu).then(|| gpu_options(adapter.as_deref()))
    });
}

/// Waits until the device `prepare` makes is made: how long making it took, if it was asked.
pub fn prepared() -> Option<std::time::Duration> {
    crate::gpu::device_pool::wait_ahead()
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
    load_observed(path, kind, None, &mut |_, _| true)
}

/// As [`load`], on a GPU adapter whose name contains `adapter` when `kind` is `Gpu`, telling
/// `progress` the bytes uploaded so far and the checkpoint's total after each tensor;
/// `progress` returning false stops the load with [`EngineError::Cancelled`].
pub fn load_observed(
    path: &Path,
    kind: BackendKind,
    adapter: Option<&str>,
    progress: &mut dyn FnMut(u64, u64) -> bool,
) -> Result<Loaded> {
    let mut choice = devices::choose_named(kind, adapter);
    let start = Instant::now();
    // The GPU's device is made while the checkpoint opens: each takes tens of milliseconds
    // (a device 70–100 ms on an H200), and neither needs the other.
    let (made, opened) = std::thread::scope(|s| {
        let made = s.spawn(|| {
            let t = Instant::now();
            (make_backend(choice.kind, adapter), t.elapsed())
        });
        let opened = Checkpoint::open(path);
        let open_ms = start.elapsed();
        let (made, made_ms) = made.join().unwrap_or_else(|_| {
            (
                Err(EngineError::Backend("making the backend panicked".into())),
                Default::default(),
            )
        });
        if crate::gpu::profile::timing_asked() {
            eprintln!(
                "load: checkpoint opened in {:.1} ms, backend made in {:.1} ms",
                open_ms.as_secs_f64() * 1e3,
                made_ms.as_secs_f64() * 1e3
            );
        }
        (made, opened)
    });
    let checkpoint = opened?;
    let spec = checkpoint.spec()?;
    let total: u64 = checkpoint.tensors().map(|t| t.stored_bytes() as u64).sum();
    if crate::gpu::profile::timing_asked() {
        eprintln!(
            "load: spec read {:.1} ms into the load",
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    let mut upload = |backend: Box<dyn Backend>| {
        let mut done = 0u64;
        let mut told = |n: u64| {
            done += n;
            progress(done.min(total), total)
        };
        Model::load_observed(
            &checkpoint,
            spec.clone(),
            backend,
            DEFAULT_MAX_BATCH,
            &mut told,
        )
    };
    let model = match made.and_then(&mut upload) {
        Err(EngineError::Backend(why)) if kind == BackendKind::Auto => {
            choice = BackendChoice::cpu(Some(format!("the GPU could not take the model: {why}")));
            upload(make_backend(choice.kind, None)?)?
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
