//! The format comparison as front ends run it: one run at a time on its own thread, each
//! measurement in a child process (remote engines' from the run's thread), progress as events,
//! a cancel that keeps what was measured, and the report stored with the other runs when it
//! ends.

use crate::bench_runs::BenchRunSummary;
use crate::error::{Result, ServiceError};
use crate::events::ServiceEvent;
use crate::Service;
use minerva_bench::child::Stop;
use minerva_bench::compare::{self, Plan};
use minerva_bench::remote::Target;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What to compare, as a front end asks for it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchRequest {
    /// The name the report carries (a catalogue id, a model's name).
    pub model: String,
    pub paths: Vec<PathBuf>,
    /// `auto`, `gpu` or `cpu`.
    pub backend: String,
    pub prompt_tokens: Vec<usize>,
    pub gen_tokens: usize,
    pub runs: usize,
    pub quality_tokens: usize,
    /// Models of remote engines to measure beside the formats, as `URL#MODEL` (the path their
    /// models go by); each engine must be among those added, whose key it uses.
    #[serde(default)]
    pub remotes: Vec<String>,
}

/// One format of the files a user picked, to choose from before a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchFormat {
    pub path: PathBuf,
    pub label: String,
    /// `gguf`, `safetensors` or `mlx`.
    pub format: &'static str,
    pub bytes: u64,
}

/// The run in progress, if any.
#[derive(Default)]
pub struct Runner {
    running: Mutex<Option<(u64, Arc<Stop>)>>,
}

impl BenchRequest {
    fn check(&self) -> Result<()> {
        let bad = |what: &str| Err(ServiceError::Invalid(what.into()));
        if self.paths.is_empty() && self.remotes.is_empty() {
            return bad("pick at least one format or remote model to compare");
        }
        if self.prompt_tokens.is_empty()
            || self.prompt_tokens.iter().any(|&n| n == 0 || n > 1 << 16)
        {
            return bad("prompt lengths must be between 1 and 65,536 tokens");
        }
        if self.runs == 0 || self.runs > 100 {
            return bad("runs must be between 1 and 100");
        }
        if self.gen_tokens == 0 || self.gen_tokens > 1 << 16 {
            return bad("generated tokens must be between 1 and 65,536");
        }
        if !["auto", "gpu", "cpu"].contains(&self.backend.as_str()) {
            return bad("the backend is auto, gpu or cpu");
        }
        Ok(())
    }
}

impl Service {
    /// The format of each file or folder, labelled as the report will label it.
    pub fn bench_formats(&self, paths: &[PathBuf]) -> Result<Vec<BenchFormat>> {
        paths
            .iter()
            .map(|p| {
                let ckpt = minerva_formats::Checkpoint::open(p)?;
                Ok(BenchFormat {
                    path: p.clone(),
                    label: compare::label(&ckpt),
                    format: ckpt.format.name(),
                    bytes: ckpt.files.iter().map(|f| f.size).sum(),
                })
            })
            .collect()
    }

    /// The remote models asked for, each with its engine's key from the app's settings. Only
    /// engines that were added: a request cannot make this machine reach any URL.
    fn bench_targets(&self, remotes: &[String]) -> Result<Vec<Target>> {
        remotes
            .iter()
            .map(|spec| {
                let mut target = Target::parse(spec, None).map_err(ServiceError::Invalid)?;
                target.key = self.added_engine(&target.url)?.api_key;
                Ok(target)
            })
            .collect()
    }

    /// Starts a run on its own thread; `child` is the command that measures one format (see
    /// `minerva_bench::measure::this_binary`). Events: `bench-progress` as it goes, then
    /// `bench-done` with the stored run (after a cancel too) or `bench-error`.
    pub fn start_bench(self: &Arc<Self>, req: BenchRequest, child: Vec<OsString>) -> Result<u64> {
        req.check()?;
        let remotes = self.bench_targets(&req.remotes)?;
        let mut running = crate::lock(&self.bench.running);
        if running.is_some() {
            return Err(ServiceError::Invalid(
                "a benchmark is already running: cancel it or wait for it".into(),
            ));
        }
        let job = self.id();
        let stop = Arc::new(Stop::default());
        *running = Some((job, stop.clone()));
        drop(running);
        let service = self.clone();
        std::thread::spawn(move || {
            let plan = Plan {
                child,
                model: req.model,
                paths: req.paths,
                backend: req.backend,
                prompt_tokens: req.prompt_tokens,
                gen_tokens: req.gen_tokens,
                runs: req.runs,
                quality_tokens: req.quality_tokens,
                formats: Vec::new(),
                remotes,
                stop,
            };
            let sink = service.sink.clone();
            let result = compare::run(&plan, &mut |p| {
                sink(ServiceEvent::BenchProgress {
                    job,
                    format: p.format,
                    label: p.label.to_string(),
                    done: p.done,
                    total: p.total,
                    phase: p.phase.to_string(),
                })
            })
            .map_err(ServiceError::Invalid)
            .and_then(|report| service.store.add_bench_run(&report, false));
            *crate::lock(&service.bench.running) = None;
            sink(match result {
                Ok(run) => ServiceEvent::BenchDone { job, run },
                Err(e) => ServiceEvent::BenchError {
                    job,
                    message: e.to_string(),
                },
            });
        });
        Ok(job)
    }

    /// Stops the run in progress; it ends with what was measured.
    pub fn cancel_bench(&self) {
        if let Some((_, stop)) = crate::lock(&self.bench.running).as_ref() {
            stop.request();
        }
    }

    /// Stores a report made elsewhere (`minerva bench --json`).
    pub fn import_bench_report(&self, path: &std::path::Path) -> Result<BenchRunSummary> {
        let report = crate::bench_runs::read_report(path)?;
        self.store.add_bench_run(&report, true)
    }
}
