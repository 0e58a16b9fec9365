//! `minerva bench`: one model in several formats side by side — load, time to first token,
//! prefill and decode speed, peak memory, and each format's drift from the most precise one —
//! with remote engines serving it beside them (`--remote URL#MODEL`), written as JSON
//! (benches/report.schema.json), Markdown, CSV and an HTML page of charts. A bar per format
//! shows where it is; Ctrl-C stops and keeps what was measured.

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use minerva_bench::child::Stop;
use minerva_bench::compare::{run as compare, Plan, Progress};
use minerva_bench::remote::Target;
use minerva_bench::{html, tables};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// A catalogue id (every format of it found on disk), or the model files and folders.
    #[arg(required_unless_present = "remotes")]
    pub models: Vec<String>,
    /// A model of an OpenAI-compatible engine to measure beside the formats, as URL#MODEL
    /// (`http://127.0.0.1:8080/v1#qwen3-4b`); repeat for several.
    #[arg(long = "remote", value_name = "URL#MODEL")]
    pub remotes: Vec<String>,
    /// The API key the remote engines want.
    #[arg(long, env = "MINERVA_REMOTE_KEY", hide_env_values = true)]
    pub remote_key: Option<String>,
    /// Only these formats: `gguf`, `safetensors`, `mlx`, or one quantization of a format
    /// (`gguf:q8_0`, `mlx:4-bit`), comma separated.
    #[arg(long, value_delimiter = ',')]
    pub formats: Vec<String>,
    /// auto, gpu or cpu.
    #[arg(long, default_value = "auto", value_parser = ["auto", "gpu", "cpu"])]
    pub backend: String,
    /// Prompt lengths, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    pub prompt_tokens: Vec<usize>,
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Tokens of the bench text that quality is measured on.
    #[arg(long, default_value_t = 512)]
    pub quality_tokens: usize,
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// A self-contained page with a bar chart per figure.
    #[arg(long)]
    pub html: Option<PathBuf>,
}

/// One progress bar per format on a terminal; a line per phase elsewhere (logs, CI).
struct Bars {
    all: MultiProgress,
    bars: Vec<ProgressBar>,
    terminal: bool,
}

impl Bars {
    fn new() -> Bars {
        Bars {
            all: MultiProgress::new(),
            bars: Vec::new(),
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, p: Progress) {
        if !self.terminal {
            if p.phase != "waiting" {
                eprintln!("bench: {}: {}", p.label, p.phase);
            }
            return;
        }
        while self.bars.len() <= p.format {
            let bar = self.all.add(ProgressBar::new(p.total as u64));
            bar.set_style(
                ProgressStyle::with_template("{prefix:>20} [{bar:24}] {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            self.bars.push(bar);
        }
        let bar = &self.bars[p.format];
        bar.set_prefix(p.label.to_string());
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(p.phase.to_string());
        if p.done == p.total {
            bar.finish();
        }
    }
}

/// The paths behind the arguments: a catalogue id gives every file of it found on disk.
fn paths(models: &[String]) -> Result<Vec<PathBuf>, String> {
    use minerva_service::catalogue;
    if let [one] = models {
        let path = std::path::Path::new(one);
        let known = catalogue::Catalogue::load(minerva_service::user_catalogue_path().as_deref());
        if let Some(entry) = known.get(one).filter(|_| !path.exists()) {
            let found = entry.files(std::env::home_dir().as_deref());
            if found.is_empty() {
                // resolve says which synth shape makes one.
                return Err(catalogue::resolve(path)
                    .err()
                    .map_or_else(String::new, |e| e.to_string()));
            }
            return Ok(found);
        }
    }
    Ok(models.iter().map(PathBuf::from).collect())
}

/// The model's name in the report: the catalogue id, or the folder all the paths share
/// (`minerva bench models/tinyllama/*` → `tinyllama`), or the paths; with no path, the remote
/// models' names.
fn model_name(models: &[String], remotes: &[Target]) -> String {
    if models.is_empty() {
        let names: Vec<&str> = remotes.iter().map(|t| t.model.as_str()).collect();
        return names.join(" ");
    }
    let parents: Vec<Option<&std::path::Path>> = models
        .iter()
        .map(|m| std::path::Path::new(m).parent())
        .collect();
    match (models, parents.first()) {
        ([one], _) => one.clone(),
        (_, Some(Some(first))) if parents.iter().all(|p| p == &Some(*first)) => first
            .file_name()
            .map_or_else(|| models.join(" "), |n| n.to_string_lossy().into_owned()),
        _ => models.join(" "),
    }
}

pub fn run(args: Args) -> Result<(), String> {
    if args.prompt_tokens.is_empty() || args.runs == 0 {
        return Err("--prompt-tokens and --runs need at least one value".into());
    }
    let stop = Arc::new(Stop::default());
    let on_signal = stop.clone();
    // Ctrl-C ends the running measurement; the report of what was measured is still written.
    ctrlc::set_handler(move || on_signal.request()).map_err(|e| e.to_string())?;
    let remotes = args
        .remotes
        .iter()
        .map(|spec| Target::parse(spec, args.remote_key.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let plan = Plan {
        child: minerva_bench::measure::this_binary()?,
        model: model_name(&args.models, &remotes),
        paths: paths(&args.models)?,
        backend: args.backend.clone(),
        prompt_tokens: args.prompt_tokens.clone(),
        gen_tokens: args.gen_tokens,
        runs: args.runs,
        quality_tokens: args.quality_tokens,
        formats: args.formats.clone(),
        remotes,
        stop: stop.clone(),
    };
    let mut bars = Bars::new();
    let report = compare(&plan, &mut |p| bars.show(p))?;
    drop(bars);
    if report.interrupted {
        eprintln!("bench: stopped; writing what was measured");
    }
    let write = |path: &Option<PathBuf>, text: String| -> Result<(), String> {
        match path {
            Some(p) => std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display())),
            None => Ok(()),
        }
    };
    write(
        &args.json,
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )?;
    write(&args.csv, tables::csv(&report))?;
    write(&args.html, html::page(&report))?;
    let md = tables::markdown(&report);
    write(&args.markdown, md.clone())?;
    println!("{md}");
    Ok(())
}
