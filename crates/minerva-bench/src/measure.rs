//! One measurement, as a bench child process runs it: load the model, prefill a prompt of
//! exactly N tokens of the bench text, generate exactly G tokens greedily (end-of-sequence does
//! not stop it), and print one JSON line with the figures. `minerva bench-child` and the app's
//! own `minerva-app bench-child` both run [`child_main`], so the app needs no second binary.

use crate::BENCH_TEXT;
use minerva_engine::session::NoText;
use minerva_engine::{BackendKind, Request, SamplerConfig, Session};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

/// The first argument that makes a binary a bench child.
pub const CHILD_ARG: &str = "bench-child";

/// What one child measures.
#[derive(Debug, Clone, PartialEq)]
pub struct Once {
    pub model: PathBuf,
    pub backend: String,
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
}

impl Once {
    /// The arguments after [`CHILD_ARG`]: `MODEL --backend B --prompt-tokens N --gen-tokens G`.
    pub fn args(&self) -> Vec<String> {
        vec![
            self.model.display().to_string(),
            "--backend".into(),
            self.backend.clone(),
            "--prompt-tokens".into(),
            self.prompt_tokens.to_string(),
            "--gen-tokens".into(),
            self.gen_tokens.to_string(),
        ]
    }

    /// Reads what [`Once::args`] wrote.
    pub fn parse(args: &[String]) -> Result<Once, String> {
        let [model, rest @ ..] = args else {
            return Err("bench-child: no model given".into());
        };
        let mut once = Once {
            model: PathBuf::from(model),
            backend: "auto".into(),
            prompt_tokens: 128,
            gen_tokens: 128,
        };
        for pair in rest.chunks(2) {
            let [key, value] = pair else {
                return Err(format!("bench-child: '{}' needs a value", pair[0]));
            };
            let number = || {
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bench-child: {key} {value} is not a count"))
            };
            match key.as_str() {
                "--backend" => once.backend = value.clone(),
                "--prompt-tokens" => once.prompt_tokens = number()?,
                "--gen-tokens" => once.gen_tokens = number()?,
                _ => return Err(format!("bench-child: unknown option {key}")),
            }
        }
        Ok(once)
    }
}

/// Runs one measurement and returns its JSON figures.
pub fn measure(once: &Once) -> Result<serde_json::Value, String> {
    let kind: BackendKind = once.backend.parse().map_err(|e| format!("{e}"))?;
    // The device is made first, as the app and the server make it at their start: the load's
    // figure is then the model's own, the same for every format (benches/GPU.md, entry 104).
    minerva_engine::load::prepare(kind, None);
    let device_ms = minerva_engine::load::prepared().map(|d| d.as_secs_f64() * 1e3);
    let loaded = minerva_engine::load(&once.model, kind).map_err(|e| e.to_string())?;
    let tokenizer =
        minerva_text::Tokenizer::from_checkpoint(&loaded.checkpoint).map_err(|e| e.to_string())?;
    let text_ids = tokenizer
        .encode(BENCH_TEXT, false)
        .map_err(|e| e.to_string())?;
    if text_ids.is_empty() {
        return Err(format!(
            "{}: the bench text has no tokens",
            once.model.display()
        ));
    }
    let prompt: Vec<u32> = text_ids
        .iter()
        .copied()
        .cycle()
        .take(once.prompt_tokens.max(1))
        .collect();
    let backend = loaded.model.backend_name();
    let ctx = prompt.len() + once.gen_tokens + 1;
    let mut session = Session::new(loaded.model, ctx, loaded.load_ms).map_err(|e| e.to_string())?;
    let request = Request {
        prompt,
        max_tokens: once.gen_tokens,
        sampler: SamplerConfig::default(),
        stop: Vec::new(),
        logprobs: None,
    };
    let stats = session
        .generate(&request, &AtomicBool::new(false), &mut NoText, &mut |_| {})
        .map_err(|e| e.to_string())?;
    Ok(json!({
        "load_ms": stats.load_ms,
        "device_ms": device_ms,
        "prompt_tokens": stats.prompt_tokens,
        "generated_tokens": stats.generated_tokens,
        "time_to_first_token_ms": stats.time_to_first_token_ms,
        "prefill_tokens_per_s": stats.prefill_tokens_per_s,
        "decode_tokens_per_s": stats.decode_tokens_per_s,
        "gpu_allocated_bytes": stats.device_memory.map(|m| m.allocated_bytes),
        "gpu_reserved_bytes": stats.device_memory.map(|m| m.reserved_bytes),
        "backend": backend,
        "peak_rss_bytes": peak_rss(),
    }))
}

/// This process's peak resident memory (VmHWM). The parent's `wait4` figure is no substitute:
/// a forked child's high-water mark starts at the parent's resident size, which for the bench
/// holds the quality pass's models.
fn peak_rss() -> Option<u64> {
    memory_status("VmHWM")
}

/// A memory figure of this process from `/proc/self/status` (`VmRSS`, `VmHWM`), in bytes, where
/// the system reports it (Linux).
pub fn memory_status(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The whole child: parse, measure, print the JSON line; the exit status says how it went.
pub fn child_main(args: &[String]) -> i32 {
    match Once::parse(args).and_then(|once| measure(&once)) {
        Ok(figures) => {
            println!("{figures}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

/// The command that runs a child: this very binary with [`CHILD_ARG`].
pub fn this_binary() -> Result<Vec<std::ffi::OsString>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    Ok(vec![exe.into_os_string(), CHILD_ARG.into()])
}
