//! `minerva synth`: a random-weight model at a real model's shape, written in several formats
//! from the same weights.

use super::progress::bytes_bar;
use minerva_formats::synth::{self, shapes};
use minerva_formats::write::model::{parse_target, Target};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Shape to generate: tinyllama-1.1b, llama-3.2-1b, qwen3-0.6b, mixtral-small, gpt-oss-20b,
    /// tiny-llama, tiny-qwen3, tiny-gpt-oss
    pub shape: String,
    /// Output folder; each format goes into a subfolder (gguf-q4_0/, safetensors-bf16/, mlx-4bit/)
    #[arg(long)]
    pub out: PathBuf,
    /// Comma-separated format:quant list, e.g. gguf:q4_0,gguf:mxfp4,safetensors:bf16,mlx:4
    #[arg(long, default_value = "safetensors:bf16")]
    pub formats: String,
    /// Seed of the random weights (same seed, same weights in every format)
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// MLX group size
    #[arg(long)]
    pub group_size: Option<u16>,
}

pub fn run(args: Args) -> Result<(), String> {
    let shape = shapes::shape(&args.shape).ok_or_else(|| {
        format!(
            "unknown shape '{}' (one of: {})",
            args.shape,
            shapes::NAMES.join(", ")
        )
    })?;
    let model = synth::model(&shape, args.seed);
    let mut jobs = Vec::new();
    for spec in args
        .formats
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let (format, quant) = spec
            .split_once(':')
            .map_or((spec, None), |(f, q)| (f, Some(q)));
        let target = parse_target(&model, format, quant, args.group_size)?;
        let sub = match (&target, quant) {
            (Target::Mlx(q), _) => format!("mlx-{}", q.label()),
            (t, Some(q)) => format!("{}-{}", t.format(), q.to_ascii_lowercase()),
            (t, None) => t.format().to_string(),
        };
        let out = if target.format() == "gguf" {
            args.out.join(&sub).join(format!(
                "{}-{}.gguf",
                shape.name,
                quant.unwrap_or("f16").to_ascii_uppercase()
            ))
        } else {
            args.out.join(&sub)
        };
        jobs.push((spec.to_string(), target, out));
    }
    if jobs.is_empty() {
        return Err("--formats lists no format".into());
    }
    for (spec, target, out) in jobs {
        let bar = bytes_bar(&spec);
        let started = Instant::now();
        let path = model
            .write_sized(&target, &out, &|n| bar.inc(n), &|total| {
                bar.set_length(total)
            })
            .map_err(|e| e.to_string())?;
        bar.finish_and_clear();
        eprintln!(
            "{spec}: wrote {} in {:.1} s",
            path.display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
