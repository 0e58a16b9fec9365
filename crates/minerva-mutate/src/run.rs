//! One case through every stage a user's drop reaches: open, spec, card (as `info --json`
//! writes it), tokenizer, chat template, load on the CPU and a first forward step. Each stage
//! runs behind a panic guard; an error must name a path inside the case.

use crate::alloc;
use minerva_engine::cpu::CpuBackend;
use minerva_engine::devices::BackendChoice;
use minerva_engine::Model;
use minerva_formats::guard;
use minerva_formats::Checkpoint;
use minerva_text::prompt::PromptBuilder;
use minerva_text::template::Message;
use minerva_text::tokenizer::Tokenizer;
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Open,
    Spec,
    Card,
    Tokenizer,
    Template,
    Load,
    Forward,
}

/// How a case ended. Everything but `Ran` and `Refused` is a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every stage passed: the damage was harmless (bits of weights, say).
    Ran,
    /// A stage refused the input with an error naming the file.
    Refused(Stage, String),
    /// A stage refused it with an error that names no file of the case.
    Unnamed(Stage, String),
    Panic(Stage, String),
    /// A single allocation over the limit was asked for (and refused).
    BigAllocation(Stage, usize),
    /// Live memory went past the limit.
    Memory(Stage, usize),
}

impl Outcome {
    pub fn is_failure(&self) -> bool {
        !matches!(self, Outcome::Ran | Outcome::Refused(..))
    }

    /// A short word for counts and file names.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Ran => "ran",
            Outcome::Refused(..) => "refused",
            Outcome::Unnamed(..) => "unnamed",
            Outcome::Panic(..) => "panic",
            Outcome::BigAllocation(..) => "big-allocation",
            Outcome::Memory(..) => "memory",
        }
    }
}

/// Live bytes a case may reach: the fixtures load in well under 100 MB.
pub const MEMORY_LIMIT: usize = 2 << 30;
/// Context for the forward step: enough for the prompt, small enough to stay quick.
const FORWARD_CTX: usize = 64;

struct Failed(Outcome);

/// Runs one stage: a panic, a refused allocation, runaway memory or an error without the
/// case's path all end the case as a failure.
fn stage<T, E: std::fmt::Display>(
    s: Stage,
    case_path: &str,
    f: impl FnOnce() -> Result<T, E>,
) -> Result<T, Failed> {
    let result = guard::catch(f);
    let watch = alloc::read();
    if watch.refused > 0 {
        return Err(Failed(Outcome::BigAllocation(s, watch.refused)));
    }
    if watch.peak > MEMORY_LIMIT {
        return Err(Failed(Outcome::Memory(s, watch.peak)));
    }
    match result {
        Err(panic) => Err(Failed(Outcome::Panic(s, panic))),
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            let msg = e.to_string();
            Err(Failed(if msg.contains(case_path) {
                Outcome::Refused(s, msg)
            } else {
                Outcome::Unnamed(s, msg)
            }))
        }
    }
}

/// Runs a case whose model is at `path` (a GGUF file or a folder).
pub fn run_case(path: &Path) -> Outcome {
    alloc::start();
    match stages(path) {
        Ok(()) => Outcome::Ran,
        Err(Failed(o)) => o,
    }
}

fn stages(path: &Path) -> Result<(), Failed> {
    let p = path.display().to_string();
    let ckpt = stage(Stage::Open, &p, || Checkpoint::open(path))?;
    let spec = stage(Stage::Spec, &p, || ckpt.spec())?;
    stage(Stage::Card, &p, || {
        let card = minerva_service::card(&ckpt, None, &BackendChoice::cpu(None))
            .map_err(|e| e.to_string())?;
        serde_json::to_vec(&card).map_err(|e| e.to_string())
    })?;
    let tokenizer = stage(Stage::Tokenizer, &p, || {
        let t = Tokenizer::from_checkpoint(&ckpt)?;
        t.check_fits(spec.vocab_size).map(|()| t)
    })?;
    let ids = stage(Stage::Template, &p, || {
        let builder = PromptBuilder::from_checkpoint(&ckpt)?;
        let text = builder.render(&[Message::new("user", "Hello, 12 + 3?")], true)?;
        builder.encode(&tokenizer, &text)
    })?;
    let mut model = stage(Stage::Load, &p, || {
        Model::load(&ckpt, Box::new(CpuBackend::new()))
    })?;
    stage(Stage::Forward, &p, || {
        let ctx = spec.context_length.min(FORWARD_CTX);
        let mut cache = model.new_cache(ctx)?;
        let n = ids.len().clamp(1, ctx / 2);
        let prompt = if ids.is_empty() {
            vec![0]
        } else {
            ids[..n].to_vec()
        };
        model.prefill(&mut cache, &prompt)?;
        model.argmax()
    })?;
    Ok(())
}
