//! `minerva tokenize <model> --text T [--json]`: the ids the model's tokenizer gives for a text.

use minerva_formats::Checkpoint;
use minerva_text::Tokenizer;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model file or folder (GGUF, SafeTensors or MLX).
    pub model: PathBuf,
    /// Text to tokenize.
    #[arg(long)]
    pub text: String,
    /// Print {"ids": [...], "tokens": [...]} instead of comma-separated ids.
    #[arg(long)]
    pub json: bool,
    /// Leave out what the tokenizer adds around a sequence (BOS for llama-style models).
    #[arg(long)]
    pub no_special: bool,
}

pub fn run(args: Args) -> Result<(), String> {
    let ckpt = Checkpoint::open(&args.model).map_err(|e| e.to_string())?;
    let tokenizer = Tokenizer::from_checkpoint(&ckpt).map_err(|e| e.to_string())?;
    let (ids, tokens) = tokenizer
        .encode_with_tokens(&args.text, !args.no_special)
        .map_err(|e| e.to_string())?;
    if args.json {
        let out = serde_json::json!({ "ids": ids, "tokens": tokens });
        println!("{out}");
    } else {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        println!("{}", list.join(","));
    }
    Ok(())
}
