//! `minerva info`: the model card of a file or folder, as text or one JSON object.

use minerva_formats::Checkpoint;
use minerva_service::card::{Fit, ModelCard};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A .gguf file, a SafeTensors / MLX model folder, or a catalogue id (models.toml).
    #[arg(required_unless_present = "adapters")]
    pub path: Option<PathBuf>,
    /// List the GPU adapters (best first) and what `--backend auto` picks, instead of a model.
    #[arg(long)]
    pub adapters: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Context length for the KV cache estimate (default: the model's, at most 4096).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// The device whose free memory the estimate is set against.
    #[command(flatten)]
    pub backend: super::backend::BackendArg,
}

/// Bytes as a short human figure (binary units).
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

fn print_text(c: &ModelCard) {
    let s = &c.spec;
    println!("format        {}", c.format);
    println!("architecture  {}", c.architecture);
    println!(
        "parameters    {} ({:.2} M)",
        c.parameters,
        c.parameters as f64 / 1e6
    );
    let dtypes: Vec<String> = c.dtypes.iter().map(|(k, v)| format!("{k}×{v}")).collect();
    println!("tensors       {} ({})", c.tensors, dtypes.join(", "));
    println!(
        "layers        {}  hidden {}  heads {} (kv {})  head_dim {}",
        s.n_layers, s.hidden_size, s.n_heads, s.n_kv_heads, s.head_dim
    );
    println!(
        "vocab         {}  ffn {}  context {}",
        s.vocab_size, s.ffn, s.context_length
    );
    if let Some(m) = &s.moe {
        println!(
            "experts       {} (top {}), expert ffn {}",
            m.n_experts, m.experts_per_token, m.expert_ffn
        );
    }
    println!(
        "rope          theta {}  {:?}  {:?}",
        s.rope.theta, s.rope.style, s.rope.scaling
    );
    if let Some(w) = s.sliding_window {
        let n = s.sliding_layers.iter().filter(|&&b| b).count();
        println!("sliding       window {w} on {n} of {} layers", s.n_layers);
    }
    println!("tokenizer     {}", if c.tokenizer { "yes" } else { "no" });
    println!(
        "chat template {}",
        if c.chat_template {
            "yes"
        } else {
            "no (a plain fallback will be used)"
        }
    );
    for f in &c.files {
        println!("file          {} ({})", f.path.display(), human(f.size));
    }
    println!(
        "memory        weights {} + KV cache {} at ctx {} = {}",
        human(c.memory.weights_bytes),
        human(c.memory.kv_bytes),
        c.memory.ctx,
        human(c.memory.weights_bytes + c.memory.kv_bytes)
    );
    let free = c
        .memory
        .available_bytes
        .map_or_else(|| "unknown".to_string(), human);
    let fits = match c.memory.fits {
        Fit::Yes => "fits",
        Fit::No => "does not fit",
        Fit::Unknown => "fit unknown",
    };
    println!("device        {}: {free} free, {fits}", c.memory.device);
}

pub fn run(args: Args) -> Result<(), String> {
    let Some(path) = args.path.as_ref().filter(|_| !args.adapters) else {
        return super::backend::print_adapters(args.json);
    };
    let path = minerva_service::catalogue::resolve(path).map_err(|e| e.to_string())?;
    let ckpt = Checkpoint::open(&path).map_err(|e| e.to_string())?;
    let device = minerva_engine::devices::choose(args.backend.kind);
    let card = minerva_service::card(&ckpt, args.ctx, &device).map_err(|e| e.to_string())?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&card).map_err(|e| e.to_string())?
        );
    } else {
        print_text(&card);
    }
    Ok(())
}
