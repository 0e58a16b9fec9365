//! `minerva convert`: a model from any of the three formats into another, through canonical
//! tensor roles (names, RoPE row order, expert layouts, tokenizer and chat template carried).

use super::progress::bytes_bar;
use minerva_formats::write::from_checkpoint::model_from_checkpoint;
use minerva_formats::write::model::{parse_target, Target};
use minerva_formats::Checkpoint;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file or folder (GGUF, SafeTensors or MLX)
    pub input: PathBuf,
    /// Output format: gguf, safetensors or mlx
    #[arg(long)]
    pub to: String,
    /// gguf: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k_m q5_k_m q6_k mxfp4;
    /// mlx: 2 3 4 5 6 8 or mxfp4; safetensors: f32 f16 bf16
    #[arg(long)]
    pub quant: Option<String>,
    /// MLX group size (32, 64 or 128; 64 by default)
    #[arg(long)]
    pub group_size: Option<u16>,
    /// Output file (GGUF) or folder; by default beside the input, named after the target
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn default_out(input: &Path, target: &Target, quant: Option<&str>) -> PathBuf {
    let stem = input
        .file_stem()
        .map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
    let q = match target {
        Target::Mlx(m) => m.label(),
        _ => quant
            .unwrap_or(match target {
                Target::Gguf(_) => "f16",
                _ => "bf16",
            })
            .to_ascii_lowercase(),
    };
    let parent = input.parent().unwrap_or(Path::new("."));
    match target {
        Target::Gguf(_) => parent.join(format!("{stem}-{}.gguf", q.to_ascii_uppercase())),
        t => parent.join(format!("{stem}-{}-{q}", t.format())),
    }
}

pub fn run(args: Args) -> Result<(), String> {
    let ck = Checkpoint::open(&args.input).map_err(|e| e.to_string())?;
    let model = model_from_checkpoint(&ck).map_err(|e| e.to_string())?;
    let target = parse_target(&model, &args.to, args.quant.as_deref(), args.group_size)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_out(&args.input, &target, args.quant.as_deref()));
    let bar = bytes_bar(&format!("{} → {}", ck.format.name(), target.format()));
    let started = Instant::now();
    let path = model
        .write_sized(&target, &out, &|n| bar.inc(n), &|total| {
            bar.set_length(total)
        })
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    eprintln!(
        "wrote {} in {:.1} s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
