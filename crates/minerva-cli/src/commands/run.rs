//! `minerva run`: one generation from a prompt, streamed to stdout; with `--json`, one object
//! with the ids, the text and the speeds instead.

use super::backend::AdapterJson;
use minerva_engine::session::TextStream;
use minerva_engine::{Event, Request, SamplerConfig, Session, Stats};
use minerva_service::models::ChatPrep;
use minerva_text::Message;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A .gguf file, or a SafeTensors / MLX model folder.
    pub model: PathBuf,
    #[arg(long, required_unless_present = "prompt_tokens")]
    pub prompt: Option<String>,
    /// Benchmark prompts: exactly N prompt tokens (the prompt's tokens, repeated as needed).
    #[arg(long)]
    pub prompt_tokens: Option<usize>,
    /// Generate exactly --max-tokens tokens: end-of-sequence tokens do not stop generation.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temp: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling threshold (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Drop tokens below min_p times the best one's probability (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Repetition penalty over the last 64 tokens (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub backend: super::backend::BackendArg,
    /// Context length of the KV cache (default: the model's, at most 4096).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Print one JSON object at the end instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// Instead of generating: run the prompt and one decode step, and print the kernels each
    /// ran as on the GPU (the ops each fuses, its dispatches, the bytes it reads, its floor).
    #[arg(long)]
    pub explain_plan: bool,
    /// The memory bandwidth `--explain-plan` computes each kernel's floor at, in GB/s.
    #[arg(long, default_value_t = 1000.0)]
    pub bandwidth: f64,
}

#[derive(Serialize)]
struct Output<'a> {
    ids: &'a [u32],
    text: &'a str,
    load_ms: f64,
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    prompt_tokens: usize,
    generated_tokens: usize,
    time_to_first_token_ms: f64,
    stop_reason: &'static str,
    /// `gpu: <adapter>` or `cpu`.
    backend: String,
    /// The GPU adapter it ran on (null on the CPU).
    adapter: Option<AdapterJson<'a>>,
    /// The engine's GPU buffers at the end, and the device memory reserved for them (null on
    /// the CPU).
    gpu_allocated_bytes: Option<u64>,
    gpu_reserved_bytes: Option<u64>,
}

/// The text behind `--prompt-tokens` when no prompt is given.
const BENCH_PASSAGE: &str = "The history of computing is a story of machines that learned to \
    read their own instructions. Early engineers wired each program by hand; later ones stored \
    programs in memory beside the data they worked on, and every machine since has followed.";

pub fn run(args: Args) -> Result<(), String> {
    let loaded = super::backend::load(&args.model, args.backend.kind)?;
    let p = ChatPrep::new(&loaded).map_err(|e| e.to_string())?;
    let text = args.prompt.as_deref().unwrap_or(BENCH_PASSAGE);
    let mut prompt = if args.chat {
        let text = p
            .builder
            .render(&[Message::user(text.to_string())], true)
            .map_err(|e| e.to_string())?;
        p.builder.encode(&p.tokenizer, &text)
    } else {
        p.tokenizer.encode(text, true)
    }
    .map_err(|e| e.to_string())?;
    if let Some(n) = args.prompt_tokens {
        if prompt.is_empty() {
            return Err("the prompt has no tokens to repeat".into());
        }
        prompt = prompt.iter().copied().cycle().take(n).collect();
    }
    let ctx = args
        .ctx
        .unwrap_or_else(|| minerva_service::card::default_ctx(&loaded.model.spec));
    if args.explain_plan {
        return explain_plan(loaded.model, &prompt, ctx, args.bandwidth);
    }
    let backend = loaded.model.backend_name();
    let adapter = loaded.backend.adapter.clone();
    let handle = Session::new(loaded.model, ctx, loaded.load_ms)
        .map_err(|e| e.to_string())?
        .spawn();
    let sampler = SamplerConfig {
        temperature: args.temp,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        seed: args.seed,
        ..SamplerConfig::default()
    };
    let req = Request {
        prompt,
        max_tokens: args.max_tokens,
        sampler,
        stop: if args.ignore_eos {
            Vec::new()
        } else {
            p.stop.clone()
        },
        logprobs: None,
    };
    let (mut events, _cancel) =
        handle.generate(req, Box::new(TextStream::new(p.tokenizer.clone(), true)));
    let (mut ids, mut text) = (Vec::new(), String::new());
    let mut out = std::io::stdout().lock();
    let stats: Stats = loop {
        match events.blocking_recv() {
            Some(Event::Token { id, text: piece }) => {
                ids.push(id);
                show(&mut out, &mut text, &piece, args.json);
            }
            Some(Event::Text(piece)) => show(&mut out, &mut text, &piece, args.json),
            Some(Event::Done { stats }) => break stats,
            Some(Event::Logprobs(_)) => {}
            Some(Event::Error(e)) => return Err(e),
            None => return Err("generation ended without a result".into()),
        }
    };
    if args.json {
        let o = Output {
            ids: &ids,
            text: &text,
            load_ms: stats.load_ms,
            prefill_tokens_per_s: stats.prefill_tokens_per_s,
            decode_tokens_per_s: stats.decode_tokens_per_s,
            prompt_tokens: stats.prompt_tokens,
            generated_tokens: stats.generated_tokens,
            time_to_first_token_ms: stats.time_to_first_token_ms,
            stop_reason: stats.stop_reason.name(),
            backend,
            adapter: adapter.as_ref().map(AdapterJson::from),
            gpu_allocated_bytes: stats.device_memory.map(|m| m.allocated_bytes),
            gpu_reserved_bytes: stats.device_memory.map(|m| m.reserved_bytes),
        };
        let line = serde_json::to_string(&o).map_err(|e| e.to_string())?;
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
    } else {
        writeln!(out).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Runs the prompt, then one decode step, printing the plan of each.
fn explain_plan(
    mut model: minerva_engine::Model,
    prompt: &[u32],
    ctx: usize,
    bandwidth_gbs: f64,
) -> Result<(), String> {
    let e = |e: minerva_engine::EngineError| e.to_string();
    // A first run builds the kernels and grows the scratch buffers (which cuts its steps
    // short); the second shows the steps as every later prompt runs them.
    let mut cache = model.new_cache(ctx).map_err(e)?;
    model.prefill(&mut cache, prompt).map_err(e)?;
    model.argmax().map_err(e)?;
    model.free_cache(cache);
    let mut cache = model.new_cache(ctx).map_err(e)?;
    model.prefill(&mut cache, prompt).map_err(e)?;
    let next = model.argmax().map_err(e)?;
    let bw = bandwidth_gbs * 1e9;
    let Some(prefill) = model.explain_plan(bw) else {
        return Err(format!(
            "{} runs ops one by one: it has no step plan (use --backend gpu)",
            model.backend_name()
        ));
    };
    model.prefill(&mut cache, &[next]).map_err(e)?;
    model.argmax().map_err(e)?;
    let decode = model.explain_plan(bw).unwrap_or_default();
    println!(
        "{}\n\nlast step of the prompt ({} tokens):\n{prefill}\none decode step at position {}:\n{decode}",
        model.backend_name(),
        prompt.len(),
        prompt.len()
    );
    Ok(())
}

fn show(out: &mut impl Write, all: &mut String, piece: &str, quiet: bool) {
    all.push_str(piece);
    if !quiet {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    }
}
