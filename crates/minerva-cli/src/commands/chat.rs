//! `minerva chat`: an interactive chat in the terminal, through the service as the app chats:
//! a conversation (kept in memory) whose turns reuse the model's KV cache, so only each new
//! message is computed. Reasoning (harmony analysis, `<think>`) is shown dimmed.

use minerva_service::{ChatPiece, Service, ServiceEvent, Settings, Store};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

/// Ctrl-C stops the reply being streamed (the conversation goes on with what was said); at the
/// prompt it ends the chat, with the shell's status for an interrupt.
fn handle_ctrl_c(service: Arc<Service>, conversation: i64) -> Result<Arc<AtomicBool>, String> {
    let streaming = Arc::new(AtomicBool::new(false));
    let now = streaming.clone();
    ctrlc::set_handler(move || {
        if now.load(Ordering::Relaxed) {
            service.stop(conversation);
        } else {
            println!();
            std::process::exit(130);
        }
    })
    .map_err(|e| format!("cannot watch for Ctrl-C: {e}"))?;
    Ok(streaming)
}

#[derive(clap::Args)]
pub struct Args {
    /// A .gguf file, a SafeTensors / MLX model folder, or a remote engine's model as
    /// `URL#MODEL` (`http://gpu-box:8000/v1#Qwen/Qwen3-8B`).
    pub model: PathBuf,
    /// The remote engine's API key (also from MINERVA_REMOTE_KEY).
    #[arg(long, env = "MINERVA_REMOTE_KEY", hide_env_values = true)]
    pub remote_key: Option<String>,
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
    /// Keep the conversation in this SQLite file (the app's database, for one, so that it shows
    /// in the app); by default it lives in memory and ends with the chat.
    #[arg(long)]
    pub db: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<(), String> {
    let (tx, events) = channel();
    let tx = Mutex::new(tx);
    let sink = Arc::new(move |e: ServiceEvent| {
        let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(e);
    });
    let store = match &args.db {
        Some(path) => Store::open(path),
        None => Store::in_memory(),
    }
    .map_err(|e| e.to_string())?;
    let service = Service::new(store, sink);
    if let Some((url, _)) = minerva_service::sources::parse_remote_path(&args.model) {
        service
            .add_remote_engine(url, args.remote_key.as_deref())
            .map_err(|e| e.to_string())?;
    }
    let info =
        super::backend::load_with_service(&service, &args.model, &args.backend.name(), args.ctx)?;
    let settings = Settings {
        system_prompt: args.system.clone().unwrap_or_default(),
        temperature: args.temp,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: 0.0,
        seed: Some(args.seed),
        max_tokens: args.max_tokens,
        ctx: args.ctx,
        backend: args.backend.name(),
        ..Settings::default()
    };
    let conv = service
        .create_conversation(None, Some(settings))
        .map_err(|e| e.to_string())?;
    eprintln!(
        "loaded {} in {:.0} ms; context {}; Ctrl-C stops a reply; empty line, Ctrl-D or Ctrl-C ends",
        args.model.display(),
        info.load_ms,
        info.ctx,
    );
    let streaming = handle_ctrl_c(service.clone(), conv.id)?;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout();
    loop {
        print!("> ");
        let _ = out.flush();
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        if line.trim().is_empty() {
            break;
        }
        streaming.store(true, Ordering::Relaxed);
        let turn = service.send(conv.id, &line).map_err(|e| e.to_string())?;
        loop {
            let Ok(ServiceEvent::Chat(c)) = events.recv() else {
                continue;
            };
            if c.turn_id != turn {
                continue;
            }
            match c.piece {
                ChatPiece::Text { text } => print!("{text}"),
                ChatPiece::Reasoning { text } => print!("\x1b[2m{text}\x1b[0m"),
                ChatPiece::Done { message } => {
                    println!();
                    if let Some(s) = message.stats {
                        eprintln!(
                            "[{} tokens, prefill {} at {:.0} tok/s, decode {:.1} tok/s, {}]",
                            s.generated_tokens,
                            s.prefill_tokens,
                            s.prefill_tokens_per_s,
                            s.decode_tokens_per_s,
                            s.stop_reason
                        );
                    }
                    break;
                }
                ChatPiece::Error { message } => return Err(message),
            }
            let _ = out.flush();
        }
        streaming.store(false, Ordering::Relaxed);
    }
    Ok(())
}
