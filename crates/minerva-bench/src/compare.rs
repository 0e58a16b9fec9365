//! Runs a comparison: each format's quality against the most precise one, in this process,
//! then its speed and memory in fresh `minerva run` processes (the first of each run after its
//! files' pages were dropped, so its load is cold); then each remote engine's speed, and its
//! top-1 agreement with that reference, from this process. A stop keeps what was measured.

use crate::agreement::agreement;
use crate::child::{self, drop_pages, Stop};
use crate::driver_memory::Driver;
use crate::measure::Once;
use crate::quality::{compare, logits_over, Quality};
use crate::remote::{self, Target};
use crate::report::{FormatResult, Machine, Report, RunFigures, Settings, Summary, SCHEMA_VERSION};
use crate::BENCH_TEXT;
use minerva_formats::Checkpoint;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What to compare and how.
pub struct Plan {
    /// The program (and first arguments) that measures a format in a child process: a binary
    /// that runs [`crate::measure::child_main`], see [`crate::measure::this_binary`].
    pub child: Vec<std::ffi::OsString>,
    pub model: String,
    pub paths: Vec<PathBuf>,
    pub backend: String,
    pub prompt_tokens: Vec<usize>,
    pub gen_tokens: usize,
    pub runs: usize,
    /// Tokens of the bench text the quality is measured on.
    pub quality_tokens: usize,
    /// Keep only formats matching one of these (see [`selected`]); empty keeps all.
    pub formats: Vec<String>,
    /// Remote engines' models measured beside the formats (never left out by `formats`).
    pub remotes: Vec<Target>,
    pub stop: std::sync::Arc<Stop>,
}

/// Where a comparison is: format `format` (of `formats`) is at step `done` of `total`, doing
/// `phase`.
pub struct Progress<'a> {
    pub format: usize,
    pub label: &'a str,
    pub done: usize,
    pub total: usize,
    pub phase: &'a str,
}

/// Whether a format's label matches a `--formats` item: `gguf`, `gguf:q8_0`, `mlx:4-bit`
/// (the label's words joined by `:`, compared without case, as a prefix).
pub fn selected(label: &str, wanted: &[String]) -> bool {
    let key = label.to_lowercase().replace(' ', ":");
    wanted.is_empty()
        || wanted
            .iter()
            .any(|w| key == w.to_lowercase() || key.starts_with(&format!("{}:", w.to_lowercase())))
}

/// `format quantization`: the quantized dtype that holds the most bytes, or the dtype holding
/// the most where nothing is quantized (`gguf Q4_0`, `safetensors BF16`, `mlx 4-bit`,
/// `mlx mxfp4`, `safetensors MXFP4`).
pub fn label(ckpt: &Checkpoint) -> String {
    if ckpt.format == minerva_formats::Format::Mlx {
        let q = ckpt.config.as_ref().map(|c| &c["quantization"]);
        if let Some(q) = q.filter(|q| q.is_object()) {
            if q["mode"].as_str() == Some("mxfp4") {
                return "mlx mxfp4".into();
            }
            if let Some(bits) = q["bits"].as_u64() {
                return format!("mlx {bits}-bit");
            }
        }
    }
    let mut bytes: BTreeMap<(bool, String), usize> = BTreeMap::new();
    for t in ckpt.tensors() {
        *bytes
            .entry((t.dtype.is_quantized(), t.dtype.name()))
            .or_default() += t.stored_bytes();
    }
    // Quantized before plain, then by bytes.
    let main = bytes
        .into_iter()
        .max_by_key(|((quantized, _), b)| (*quantized, *b))
        .map(|((_, d), _)| d)
        .unwrap_or_default();
    // OpenAI's gpt-oss packing is MXFP4 under another layout.
    let main = if main == "hf-mxfp4" {
        "MXFP4".into()
    } else {
        main
    };
    format!("{} {main}", ckpt.format.name())
}

/// Labels made unique: a second `gguf Q4_0` becomes `gguf Q4_0 #2`.
fn unique(labels: Vec<String>) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    labels
        .into_iter()
        .map(|l| {
            let n = seen.entry(l.clone()).or_default();
            *n += 1;
            if *n == 1 {
                l
            } else {
                format!("{l} #{n}")
            }
        })
        .collect()
}

fn number(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

/// Steps of one format: its quality, then per run a cold child and a warm child per length;
/// a remote engine has no cold child.
fn steps(plan: &Plan, remote: bool) -> usize {
    1 + plan.runs * (usize::from(!remote) + plan.prompt_tokens.len())
}

/// The runs of one format: per run, a cold child at the first prompt length, then a warm
/// child at every length (so each length's figures come from a warm process). A stop ends
/// it early with the runs completed.
fn measure(
    plan: &Plan,
    ckpt: &Checkpoint,
    path: &Path,
    driver: Option<&Driver>,
    progress: &mut dyn FnMut(usize, &str),
) -> Result<Vec<RunFigures>, String> {
    let files: Vec<PathBuf> = ckpt.files.iter().map(|f| f.path.clone()).collect();
    let args = |prompt_tokens| Once {
        model: path.to_path_buf(),
        backend: plan.backend.clone(),
        prompt_tokens,
        gen_tokens: plan.gen_tokens,
    };
    let mut step = 1;
    let mut runs = Vec::new();
    for r in 0..plan.runs {
        progress(step, &format!("run {}/{}: cold load", r + 1, plan.runs));
        drop_pages(&files);
        let Some(cold) = child::run(
            &plan.child,
            &args(plan.prompt_tokens[0]),
            driver,
            &plan.stop,
        )?
        else {
            return Ok(runs);
        };
        step += 1;
        let mut fig = RunFigures {
            load_cold_ms: Some(number(&cold.json, "load_ms")).filter(|v| v.is_finite()),
            load_warm_ms: None,
            device_ms: None,
            ttft_ms: Vec::new(),
            prefill_tokens_per_s: Vec::new(),
            prompt_tokens: Vec::new(),
            decode_tokens_per_s: f64::NAN,
            peak_rss_bytes: Some(cold.peak_rss_bytes),
            gpu_allocated_bytes: None,
            gpu_reserved_bytes: None,
            gpu_driver_bytes: None,
            gpu_driver_per_process: None,
        };
        let mut warm_loads = Vec::new();
        let mut devices = Vec::new();
        let mut decodes = Vec::new();
        for (i, &n) in plan.prompt_tokens.iter().enumerate() {
            progress(step, &format!("run {}/{}: prompt {n}", r + 1, plan.runs));
            let Some(w) = child::run(&plan.child, &args(n), driver, &plan.stop)? else {
                return Ok(runs);
            };
            step += 1;
            warm_loads.push(number(&w.json, "load_ms"));
            devices.push(number(&w.json, "device_ms"));
            decodes.push(number(&w.json, "decode_tokens_per_s"));
            fig.ttft_ms.push(number(&w.json, "time_to_first_token_ms"));
            fig.prefill_tokens_per_s
                .push(number(&w.json, "prefill_tokens_per_s"));
            let real = w.json["prompt_tokens"].as_u64().map(|t| t as usize);
            fig.prompt_tokens.push(real.unwrap_or(n));
            fig.peak_rss_bytes = fig.peak_rss_bytes.max(Some(w.peak_rss_bytes));
            // GPU memory of the longest prompt (the lengths run in the order given), whose
            // activations are the largest.
            if i + 1 == plan.prompt_tokens.len() {
                fig.gpu_allocated_bytes = w.json["gpu_allocated_bytes"].as_u64();
                fig.gpu_reserved_bytes = w.json["gpu_reserved_bytes"].as_u64();
            }
            for d in [cold.driver, w.driver].into_iter().flatten() {
                if fig.gpu_driver_bytes.is_none_or(|b| d.peak_bytes > b) {
                    fig.gpu_driver_bytes = Some(d.peak_bytes);
                    fig.gpu_driver_per_process = Some(d.per_process);
                }
            }
        }
        fig.load_warm_ms = crate::report::Stat::of(&warm_loads).map(|s| s.median);
        fig.device_ms = crate::report::Stat::of(&devices).map(|s| s.median);
        fig.decode_tokens_per_s = crate::report::Stat::of(&decodes).map_or(f64::NAN, |s| s.median);
        runs.push(fig);
    }
    Ok(runs)
}

/// What the quality pass found: the reference's index, each format's quality, and each
/// remote engine's (or the words saying why it has none).
struct Qualities {
    reference: Option<usize>,
    local: Vec<Option<Quality>>,
    remote: Vec<(Option<Quality>, Option<String>)>,
}

/// Quality of every format against the one with the most bytes per parameter (the most
/// precise), over the first `plan.quality_tokens` tokens of the bench text, and each remote
/// engine's top-1 agreement with it while it is loaded. `progress` hears of each format and
/// engine by its index (engines after the formats). After a stop the formats not yet compared
/// have none.
fn quality(
    plan: &Plan,
    models: &[(Checkpoint, PathBuf)],
    progress: &mut dyn FnMut(usize, &str),
) -> Result<Qualities, String> {
    let mut out = Qualities {
        reference: None,
        local: vec![None; models.len()],
        remote: vec![(None, None); plan.remotes.len()],
    };
    let precision = |c: &Checkpoint| c.weights_bytes() as f64 / c.parameters().max(1) as f64;
    let Some(reference) = (0..models.len())
        .max_by(|&a, &b| precision(&models[a].0).total_cmp(&precision(&models[b].0)))
    else {
        return Ok(out);
    };
    out.reference = Some(reference);
    let kind = plan
        .backend
        .parse::<minerva_engine::BackendKind>()
        .unwrap_or_default();
    let mut reference_run: Option<(Vec<u32>, Vec<f32>)> = None;
    for i in std::iter::once(reference).chain((0..models.len()).filter(|&i| i != reference)) {
        if plan.stop.requested() {
            break;
        }
        progress(i, "quality over the bench text");
        let (c, path) = &models[i];
        let tokenizer = minerva_text::Tokenizer::from_checkpoint(c).map_err(|e| e.to_string())?;
        let mut ids = tokenizer
            .encode(BENCH_TEXT, false)
            .map_err(|e| e.to_string())?;
        let mut model = minerva_engine::load(path, kind)
            .map_err(|e| e.to_string())?
            .model;
        ids.truncate(plan.quality_tokens.min(model.spec.context_length));
        let logits = logits_over(&mut model, &ids, 128).map_err(|e| e.to_string())?;
        let vocab = model.spec.vocab_size;
        if i == reference {
            for (r, target) in plan.remotes.iter().enumerate() {
                if plan.stop.requested() {
                    break;
                }
                progress(models.len() + r, "quality: top-1 against the reference");
                out.remote[r] = match agreement(&mut model, &tokenizer, &ids, target, &plan.stop) {
                    Ok(q) => (Some(q), None),
                    Err(_) if plan.stop.requested() => (None, None),
                    Err(note) => (None, Some(note)),
                };
            }
        }
        drop(model);
        let (ref_ids, ref_logits) =
            reference_run.get_or_insert_with(|| (ids.clone(), logits.clone()));
        if *ref_ids != ids {
            return Err(format!(
                "{}: tokenizes the bench text unlike the reference",
                c.main_path().display()
            ));
        }
        out.local[i] = Some(compare(ref_logits, &logits, &ids, vocab));
    }
    Ok(out)
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

/// The whole comparison. Formats are told apart by their labels; `progress` hears of every
/// step, and a stop ([`Plan::stop`]) returns the report of what was measured.
pub fn run(plan: &Plan, progress: &mut dyn FnMut(Progress)) -> Result<Report, String> {
    let started = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let mut models = Vec::new();
    for p in &plan.paths {
        let ckpt = Checkpoint::open(p).map_err(|e| e.to_string())?;
        if selected(&label(&ckpt), &plan.formats) {
            models.push((ckpt, p.clone()));
        }
    }
    if models.is_empty() && !plan.paths.is_empty() {
        return Err(format!(
            "no format of {} matches --formats {}",
            plan.model,
            plan.formats.join(",")
        ));
    }
    if models.is_empty() && plan.remotes.is_empty() {
        return Err("nothing to compare: give model files or remote engines".into());
    }
    // An engine that cannot be reached (or refuses the key) fails now, not after the formats.
    for target in &plan.remotes {
        target.engine()?.models().map_err(|e| e.to_string())?;
    }
    let mut labels: Vec<String> = models.iter().map(|(c, _)| label(c)).collect();
    labels.extend(plan.remotes.iter().map(Target::label));
    let labels = unique(labels);
    let total = |format: usize| steps(plan, format >= models.len());
    let mut tell = |format: usize, done: usize, phase: &str| {
        progress(Progress {
            format,
            label: &labels[format],
            done,
            total: total(format),
            phase,
        })
    };
    for format in 0..labels.len() {
        tell(format, 0, "waiting");
    }
    let qualities = quality(plan, &models, &mut |format, phase| tell(format, 0, phase))?;
    let driver = if plan.backend == "cpu" {
        None
    } else {
        Driver::open()
    };
    let mut formats = Vec::new();
    for (format, ((ckpt, path), q)) in models.iter().zip(qualities.local).enumerate() {
        // After a stop, the formats not yet measured keep their quality and no runs.
        let runs = if plan.stop.requested() {
            Vec::new()
        } else {
            measure(plan, ckpt, path, driver.as_ref(), &mut |done, phase| {
                tell(format, done, phase)
            })?
        };
        tell(format, total(format), "done");
        formats.push(FormatResult {
            label: labels[format].clone(),
            format: ckpt.format.name().to_string(),
            path: path.display().to_string(),
            bytes_on_disk: Some(ckpt.files.iter().map(|f| f.size).sum()),
            summary: Summary::of(&runs, plan.prompt_tokens.len()),
            runs,
            quality: q,
            note: None,
        });
    }
    let chars_per_token = remote::chars_per_token(models.first().map(|(c, _)| c));
    for (r, (target, (q, note))) in plan.remotes.iter().zip(qualities.remote).enumerate() {
        let format = models.len() + r;
        let runs = if plan.stop.requested() {
            Vec::new()
        } else {
            remote::measure(plan, target, chars_per_token, &mut |done, phase| {
                tell(format, done, phase)
            })?
        };
        tell(format, total(format), "done");
        formats.push(FormatResult {
            label: labels[format].clone(),
            format: "remote".into(),
            path: target.path(),
            bytes_on_disk: None,
            summary: Summary::of(&runs, plan.prompt_tokens.len()),
            runs,
            quality: q,
            note,
        });
    }
    Ok(Report {
        schema_version: SCHEMA_VERSION,
        engine_version: env!("CARGO_PKG_VERSION").to_string(),
        started,
        machine: machine(&plan.backend),
        settings: Settings {
            model: plan.model.clone(),
            backend: plan.backend.clone(),
            prompt_tokens: plan.prompt_tokens.clone(),
            gen_tokens: plan.gen_tokens,
            runs: plan.runs,
            reference: qualities
                .reference
                .map_or_else(String::new, |i| labels[i].clone()),
        },
        formats,
        interrupted: plan.stop.requested(),
    })
}
