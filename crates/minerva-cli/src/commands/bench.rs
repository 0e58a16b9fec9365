//! `minerva bench`: one model in several formats side by side — load, time to first token,
//! prefill and decode speed, peak memory, and each format's drift from the most precise one —
//! written as JSON (benches/report.schema.json), Markdown and CSV.

use minerva_bench::compare::{run as compare, Plan};
use minerva_bench::report;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A catalogue id (every format of it found on disk), or the model files and folders.
    #[arg(required = true)]
    pub models: Vec<String>,
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

pub fn run(args: Args) -> Result<(), String> {
    if args.prompt_tokens.is_empty() || args.runs == 0 {
        return Err("--prompt-tokens and --runs need at least one value".into());
    }
    let plan = Plan {
        minerva: std::env::current_exe().map_err(|e| e.to_string())?,
        model: args.models.join(" "),
        paths: paths(&args.models)?,
        backend: args.backend.clone(),
        prompt_tokens: args.prompt_tokens.clone(),
        gen_tokens: args.gen_tokens,
        runs: args.runs,
        quality_tokens: args.quality_tokens,
    };
    let report = compare(&plan, &mut |m| eprintln!("bench: {m}"))?;
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
    write(&args.csv, report::csv(&report))?;
    let md = report::markdown(&report);
    write(&args.markdown, md.clone())?;
    println!("{md}");
    Ok(())
}
