//! `minerva info`: the model card of a file or folder, as text or one JSON object.

use minerva_formats::{Checkpoint, ModelSpec};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A .gguf file, or a SafeTensors / MLX model folder.
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
}

#[derive(Serialize)]
struct FileInfo {
    path: PathBuf,
    size: u64,
}

#[derive(Serialize)]
struct Memory {
    weights_bytes: u64,
    kv_bytes: u64,
    ctx: usize,
}

#[derive(Serialize)]
struct Card {
    format: &'static str,
    architecture: &'static str,
    parameters: u64,
    tensors: usize,
    dtypes: BTreeMap<String, usize>,
    spec: ModelSpec,
    files: Vec<FileInfo>,
    tokenizer: bool,
    chat_template: bool,
    memory: Memory,
}

/// Whether the model carries a tokenizer: tokenizer.json beside it, or a GGUF vocabulary.
fn has_tokenizer(ckpt: &Checkpoint) -> bool {
    ckpt.companion("tokenizer.json").is_some()
        || ckpt.metadata.get("tokenizer.ggml.tokens").is_some()
}

/// Whether the model carries a chat template in any of the places templates live.
fn has_chat_template(ckpt: &Checkpoint) -> bool {
    if ckpt.metadata.get_str("tokenizer.chat_template").is_some()
        || ckpt.companion("chat_template.jinja").is_some()
    {
        return true;
    }
    ckpt.companion("tokenizer_config.json")
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v.get("chat_template").is_some_and(|t| !t.is_null()))
}

fn card(ckpt: &Checkpoint, ctx: Option<usize>) -> Result<Card, String> {
    let spec = ckpt.spec().map_err(|e| e.to_string())?;
    let mut dtypes = BTreeMap::new();
    for t in ckpt.tensors() {
        *dtypes.entry(t.dtype.name()).or_insert(0) += 1;
    }
    let ctx = ctx.unwrap_or(spec.context_length.min(4096));
    Ok(Card {
        format: ckpt.format.name(),
        architecture: spec.architecture.name(),
        parameters: ckpt.parameters(),
        tensors: ckpt.tensor_count(),
        dtypes,
        files: ckpt
            .files
            .iter()
            .map(|f| FileInfo {
                path: f.path.clone(),
                size: f.size,
            })
            .collect(),
        tokenizer: has_tokenizer(ckpt),
        chat_template: has_chat_template(ckpt),
        memory: Memory {
            weights_bytes: ckpt.weights_bytes(),
            kv_bytes: spec.kv_cache_bytes(ctx, 2),
            ctx,
        },
        spec,
    })
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

fn print_text(c: &Card) {
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
}

pub fn run(args: Args) -> Result<(), String> {
    let Some(path) = args.path.as_ref().filter(|_| !args.adapters) else {
        return super::backend::print_adapters(args.json);
    };
    let ckpt = Checkpoint::open(path).map_err(|e| e.to_string())?;
    let card = card(&ckpt, args.ctx)?;
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
