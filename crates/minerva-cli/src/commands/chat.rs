//! `minerva chat`: an interactive chat in the terminal. Each turn renders the whole
//! conversation with the model's template; the session's cache already holds all but the new
//! message, so only that is computed. Reasoning (harmony analysis, `<think>`) is shown dimmed.

use super::run::{default_ctx, prepare};
use minerva_engine::session::TextStream;
use minerva_engine::{Event, Request, SamplerConfig, Session};
use minerva_text::{Message, OutputPiece};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The cancel flag of the reply being streamed, if one is.
type Streaming = Arc<Mutex<Option<Arc<AtomicBool>>>>;

/// Ctrl-C stops the reply being streamed (the conversation goes on with what was said); at the
/// prompt it ends the chat, with the shell's status for an interrupt.
fn handle_ctrl_c() -> Result<Streaming, String> {
    let streaming: Streaming = Arc::default();
    let current = streaming.clone();
    ctrlc::set_handler(
        move || match current.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(cancel) => cancel.store(true, Ordering::Relaxed),
            None => {
                println!();
                std::process::exit(130);
            }
        },
    )
    .map_err(|e| format!("cannot watch for Ctrl-C: {e}"))?;
    Ok(streaming)
}

#[derive(clap::Args)]
pub struct Args {
    /// A .gguf file, or a SafeTensors / MLX model folder.
    pub model: PathBuf,
    /// A system message to start the conversation with.
    #[arg(long)]
    pub system: Option<String>,
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.7)]
    pub temp: f32,
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub backend: super::backend::BackendArg,
    /// Context length of the KV cache (default: the model's, at most 4096).
    #[arg(long)]
    pub ctx: Option<usize>,
}

pub fn run(args: Args) -> Result<(), String> {
    let loaded = super::backend::load(&args.model, args.backend.kind)?;
    let p = prepare(&loaded)?;
    let ctx = args.ctx.unwrap_or_else(|| default_ctx(&loaded.model.spec));
    eprintln!(
        "loaded {} in {:.0} ms; context {ctx}; Ctrl-C stops a reply; empty line, Ctrl-D or Ctrl-C ends",
        args.model.display(),
        loaded.load_ms,
    );
    let streaming = handle_ctrl_c()?;
    let handle = Session::new(loaded.model, ctx, loaded.load_ms)
        .map_err(|e| e.to_string())?
        .spawn();
    let mut messages: Vec<Message> = args
        .system
        .iter()
        .map(|s| Message::system(s.clone()))
        .collect();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout();
    for turn in 0u64.. {
        print!("> ");
        let _ = out.flush();
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        if line.trim().is_empty() {
            break;
        }
        messages.push(Message::user(line));
        let text = p
            .builder
            .render(&messages, true)
            .map_err(|e| e.to_string())?;
        let prompt = p
            .builder
            .encode(&p.tokenizer, &text)
            .map_err(|e| e.to_string())?;
        let sampler = SamplerConfig {
            temperature: args.temp,
            top_k: args.top_k,
            top_p: args.top_p,
            seed: args.seed.wrapping_add(turn),
            ..SamplerConfig::default()
        };
        let req = Request {
            prompt,
            max_tokens: args.max_tokens,
            sampler,
            stop: p.stop.clone(),
        };
        // Special tokens stay in the text: the splitter reads harmony channels from them.
        let (mut events, cancel) =
            handle.generate(req, Box::new(TextStream::new(p.tokenizer.clone(), false)));
        *streaming.lock().unwrap_or_else(|p| p.into_inner()) = Some(cancel);
        let mut splitter = p.builder.output_splitter();
        let mut answer = String::new();
        let print = |pieces: Vec<OutputPiece>, answer: &mut String| {
            for piece in pieces {
                match piece {
                    OutputPiece::Answer(t) => {
                        answer.push_str(&t);
                        print!("{t}");
                    }
                    OutputPiece::Reasoning(t) => print!("\x1b[2m{t}\x1b[0m"),
                }
            }
            let _ = std::io::stdout().flush();
        };
        loop {
            match events.blocking_recv() {
                // A stop token ends the turn; its text (an end-of-turn marker) is not the answer's.
                Some(Event::Token { id, .. }) if p.stop.contains(&id) => {}
                Some(Event::Token { text, .. }) | Some(Event::Text(text)) => {
                    print(splitter.push(&text), &mut answer)
                }
                Some(Event::Done { stats }) => {
                    *streaming.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    print(splitter.finish(), &mut answer);
                    println!();
                    eprintln!(
                        "[{} tokens, prefill {} at {:.0} tok/s, decode {:.1} tok/s, {}]",
                        stats.generated_tokens,
                        stats.prefill_tokens,
                        stats.prefill_tokens_per_s,
                        stats.decode_tokens_per_s,
                        stats.stop_reason.name()
                    );
                    break;
                }
                Some(Event::Error(e)) => return Err(e),
                None => return Err("generation ended without a result".into()),
            }
        }
        messages.push(Message::assistant(answer.trim_end()));
    }
    Ok(())
}
