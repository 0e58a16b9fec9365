//! `minerva score`: the logits of one forward pass over given ids, written as SafeTensors
//! (`logits`, f32 `[n_tokens, vocab]`) for comparison with other implementations.

use safetensors::tensor::{serialize_to_file, Dtype, TensorView};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A .gguf file, or a SafeTensors / MLX model folder.
    pub model: PathBuf,
    /// Token ids, comma separated (e.g. 1,330,223).
    #[arg(long, value_delimiter = ',', required = true)]
    pub ids: Vec<u32>,
    /// Output file.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub backend: super::backend::BackendArg,
}

pub fn run(args: Args) -> Result<(), String> {
    let mut loaded = super::backend::load(&args.model, args.backend.kind)?;
    let model = &mut loaded.model;
    let mut cache = model.new_cache(args.ids.len()).map_err(|e| e.to_string())?;
    let logits = model
        .score(&mut cache, &args.ids)
        .map_err(|e| e.to_string())?;
    let shape = vec![args.ids.len(), model.spec.vocab_size];
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = TensorView::new(Dtype::F32, shape, &bytes).map_err(|e| format!("logits: {e}"))?;
    serialize_to_file([("logits", view)], None, &args.out)
        .map_err(|e| format!("{}: {e}", args.out.display()))
}
