//! Runs a comparison: each format's speed in fresh `minerva run` processes (the first of each
//! run after its files' pages were dropped, so its load is cold), peak memory from the
//! child's rusage, and each format's quality against the most precise one, in this process.

use crate::quality::{compare, logits_over, Quality};
use crate::report::{FormatResult, Machine, Report, RunFigures, Settings, Summary, SCHEMA_VERSION};
use crate::BENCH_TEXT;
use minerva_formats::Checkpoint;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to compare and how.
pub struct Plan {
    /// The `minerva` binary whose `run` measures a format.
    pub minerva: PathBuf,
    pub model: String,
    pub paths: Vec<PathBuf>,
    pub backend: String,
    pub prompt_tokens: Vec<usize>,
    pub gen_tokens: usize,
    pub runs: usize,
    /// Tokens of the bench text the quality is measured on.
    pub quality_tokens: usize,
}

/// `format dtype`, the dtype that holds most of the bytes (`gguf Q4_0`, `mlx U32`→`mlx 4-bit`).
pub fn label(ckpt: &Checkpoint) -> String {
    if ckpt.format == minerva_formats::Format::Mlx {
        if let Some(bits) = ckpt
            .config
            .as_ref()
            .and_then(|c| c["quantization"]["bits"].as_u64())
        {
            return format!("mlx {bits}-bit");
        }
    }
    let mut bytes: BTreeMap<String, usize> = BTreeMap::new();
    for t in ckpt.tensors() {
        *bytes.entry(t.dtype.name()).or_default() += t.stored_bytes();
    }
    let main = bytes
        .into_iter()
        .max_by_key(|(_, b)| *b)
        .map(|(d, _)| d)
        .unwrap_or_default();
    format!("{} {main}", ckpt.format.name())
}

/// Drops the page cache of every file of a model (no root needed), so the next load reads
/// from the disk.
fn drop_pages(files: &[PathBuf]) {
    use std::os::unix::io::AsRawFd;
    for f in files {
        if let Ok(file) = std::fs::File::open(f) {
            // SAFETY: a valid open descriptor; the call only advises the kernel.
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }
}

/// One `minerva run` child: its JSON line and its peak resident memory.
fn child(plan: &Plan, path: &Path, prompt: usize) -> Result<(serde_json::Value, u64), String> {
    use std::os::unix::process::ExitStatusExt;
    let mut cmd = Command::new(&plan.minerva);
    cmd.arg("run").arg(path);
    cmd.args([
        "--prompt-tokens",
        &prompt.to_string(),
        "--max-tokens",
        &plan.gen_tokens.to_string(),
    ]);
    cmd.args(["--ignore-eos", "--json", "--backend", &plan.backend]);
    let out_file = tempfile_path();
    cmd.stdout(std::fs::File::create(&out_file).map_err(|e| e.to_string())?);
    cmd.stderr(std::process::Stdio::piped());
    let child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", plan.minerva.display()))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let stdout = std::fs::read_to_string(&out_file).unwrap_or_default();
    let _ = std::fs::remove_file(&out_file);
    let ok = waited == pid && std::process::ExitStatus::from_raw(status).success();
    if !ok {
        let mut err = String::new();
        if let Some(mut e) = child.stderr {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        return Err(format!(
            "{}: minerva run failed: {}",
            path.display(),
            err.trim()
        ));
    }
    let json = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| format!("{}: minerva run printed no JSON", path.display()))?;
    Ok((json, usage.ru_maxrss as u64 * 1024))
}

fn tempfile_path() -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("minerva-bench-{}-{n}.json", std::process::id()))
}

fn number(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

/// The runs of one format: per run, a cold child at the first prompt length, then a warm
/// child at every length (so each length's figures come from a warm process).
pub fn measure(
    plan: &Plan,
    ckpt: &Checkpoint,
    path: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<RunFigures>, String> {
    let files: Vec<PathBuf> = ckpt.files.iter().map(|f| f.path.clone()).collect();
    let mut runs = Vec::new();
    for r in 0..plan.runs {
        progress(&format!("run {}/{}: cold load", r + 1, plan.runs));
        drop_pages(&files);
        let (cold, cold_rss) = child(plan, path, plan.prompt_tokens[0])?;
        let mut fig = RunFigures {
            load_cold_ms: number(&cold, "load_ms"),
            load_warm_ms: f64::NAN,
            ttft_ms: Vec::new(),
            prefill_tokens_per_s: Vec::new(),
            decode_tokens_per_s: f64::NAN,
            peak_rss_bytes: cold_rss,
            gpu_bytes: None,
        };
        let mut warm_loads = Vec::new();
        let mut decodes = Vec::new();
        for &n in &plan.prompt_tokens {
            progress(&format!("run {}/{}: prompt {n}", r + 1, plan.runs));
            let (w, rss) = child(plan, path, n)?;
            warm_loads.push(number(&w, "load_ms"));
            decodes.push(number(&w, "decode_tokens_per_s"));
            fig.ttft_ms.push(number(&w, "time_to_first_token_ms"));
            fig.prefill_tokens_per_s
                .push(number(&w, "prefill_tokens_per_s"));
            fig.peak_rss_bytes = fig.peak_rss_bytes.max(rss);
        }
        fig.load_warm_ms = crate::report::Stat::of(&warm_loads).map_or(f64::NAN, |s| s.median);
        fig.decode_tokens_per_s = crate::report::Stat::of(&decodes).map_or(f64::NAN, |s| s.median);
        runs.push(fig);
    }
    Ok(runs)
}

/// Quality of every format against the one with the most bytes per parameter (the most
/// precise), over the first `plan.quality_tokens` tokens of the bench text.
fn quality(plan: &Plan, ckpts: &[Checkpoint]) -> Result<(usize, Vec<Quality>), String> {
    let precision = |c: &Checkpoint| c.weights_bytes() as f64 / c.parameters().max(1) as f64;
    let reference = (0..ckpts.len())
        .max_by(|&a, &b| precision(&ckpts[a]).total_cmp(&precision(&ckpts[b])))
        .ok_or("no model to compare")?;
    let kind = plan
        .backend
        .parse::<minerva_engine::BackendKind>()
        .unwrap_or_default();
    let mut all = Vec::new();
    let mut ids_ref: Option<Vec<u32>> = None;
    for i in std::iter::once(reference).chain((0..ckpts.len()).filter(|&i| i != reference)) {
        let c = &ckpts[i];
        let tokenizer = minerva_text::Tokenizer::from_checkpoint(c).map_err(|e| e.to_string())?;
        let mut ids = tokenizer
            .encode(BENCH_TEXT, false)
            .map_err(|e| e.to_string())?;
        let loaded = minerva_engine::load(&plan.paths[i], kind).map_err(|e| e.to_string())?;
        let mut model = loaded.model;
        ids.truncate(plan.quality_tokens.min(model.spec.context_length));
        if let Some(r) = &ids_ref {
            if *r != ids {
                return Err(format!(
                    "{}: tokenizes the bench text unlike the reference",
                    c.main_path().display()
                ));
            }
        }
        let logits = logits_over(&mut model, &ids, 128).map_err(|e| e.to_string())?;
        all.push((i, logits, model.spec.vocab_size));
        ids_ref.get_or_insert(ids);
    }
    let ids = ids_ref.unwrap_or_default();
    let (_, reference_logits, vocab) = &all[0];
    let mut out = vec![None; ckpts.len()];
    for (i, l, _) in &all {
        out[*i] = Some(compare(reference_logits, l, &ids, *vocab));
    }
    Ok((
        reference,
        out.into_iter()
            .map(|q| q.expect("every format compared"))
            .collect(),
    ))
}

fn machine(backend: &str) -> Machine {
    let sys = sysinfo::System::new_with_specifics(
        sysinfo::RefreshKind::nothing()
            .with_cpu(sysinfo::CpuRefreshKind::nothing())
            .with_memory(sysinfo::MemoryRefreshKind::nothing().with_ram()),
    )
    .ok();
    let cpus = sys.as_ref().map_or(&[][..], |s| s.cpus());
    let kind = backend
        .parse::<minerva_engine::BackendKind>()
        .unwrap_or_default();
    Machine {
        cpu: cpus
            .first()
            .map(|c| c.brand().trim().to_string())
            .unwrap_or_default(),
        cores: cpus.len(),
        ram_bytes: sys.as_ref().map_or(0, |s| s.total_memory()),
        device: minerva_engine::devices::choose(kind).to_string(),
    }
}

/// The whole comparison.
pub fn run(plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Report, String> {
    let ckpts: Vec<Checkpoint> = plan
        .paths
        .iter()
        .map(|p| Checkpoint::open(p).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    progress("quality over the bench text");
    let (reference, qualities) = quality(plan, &ckpts)?;
    let mut formats = Vec::new();
    for ((ckpt, path), q) in ckpts.iter().zip(&plan.paths).zip(qualities) {
        let label = label(ckpt);
        let runs = measure(plan, ckpt, path, &mut |m| {
            progress(&format!("{label}: {m}"))
        })?;
        formats.push(FormatResult {
            bytes_on_disk: ckpt.files.iter().map(|f| f.size).sum(),
            path: path.display().to_string(),
            summary: Summary::of(&runs, plan.prompt_tokens.len()),
            runs,
            quality: Some(q),
            label,
        });
    }
    Ok(Report {
        schema_version: SCHEMA_VERSION,
        engine_version: env!("CARGO_PKG_VERSION").to_string(),
        started: String::new(),
        machine: machine(&plan.backend),
        settings: Settings {
            model: plan.model.clone(),
            backend: plan.backend.clone(),
            prompt_tokens: plan.prompt_tokens.clone(),
            gen_tokens: plan.gen_tokens,
            runs: plan.runs,
            reference: formats[reference].label.clone(),
        },
        formats,
    })
}
