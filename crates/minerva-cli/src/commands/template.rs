//! `minerva template <model> --messages F.json`: the chat prompt the model would be given.
//! Harmony for gpt-oss, the model's chat template otherwise, the plain fallback (said on
//! stderr) when the model has none.

use minerva_formats::Checkpoint;
use minerva_text::{
    ChatTemplate, HarmonyOptions, Message, PromptBuilder, PromptKind, ReasoningEffort,
};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model file or folder (GGUF, SafeTensors or MLX).
    pub model: PathBuf,
    /// JSON file: [{"role": "...", "content": "..."}, ...] or {"messages": [...]}.
    #[arg(long)]
    pub messages: PathBuf,
    /// End after the last message instead of opening the assistant's reply.
    #[arg(long)]
    pub no_generation_prompt: bool,
    /// gpt-oss: reasoning effort written into the harmony system message (low, medium, high).
    #[arg(long, default_value = "medium")]
    pub reasoning_effort: String,
    /// gpt-oss: render the model's own Jinja template instead of the harmony renderer.
    #[arg(long)]
    pub jinja: bool,
}

fn read_messages(path: &PathBuf) -> Result<Vec<Message>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not valid JSON: {e}", path.display()))?;
    let list = value.get("messages").cloned().unwrap_or(value);
    serde_json::from_value(list).map_err(|e| {
        format!(
            "{}: expected a list of {{\"role\", \"content\"}} messages: {e}",
            path.display()
        )
    })
}

pub fn run(args: Args) -> Result<(), String> {
    let messages = read_messages(&args.messages)?;
    let ckpt = Checkpoint::open(&args.model).map_err(|e| e.to_string())?;
    let mut builder = PromptBuilder::from_checkpoint(&ckpt).map_err(|e| e.to_string())?;
    if let PromptBuilder::Harmony(options) = &mut builder {
        let effort = ReasoningEffort::parse(&args.reasoning_effort).ok_or_else(|| {
            format!(
                "--reasoning-effort '{}': expected low, medium or high",
                args.reasoning_effort
            )
        })?;
        *options = HarmonyOptions {
            reasoning_effort: effort,
            ..HarmonyOptions::default()
        };
        if args.jinja {
            builder = PromptBuilder::from_template(
                ChatTemplate::from_checkpoint(&ckpt).map_err(|e| e.to_string())?,
            );
        }
    }
    if builder.kind() == PromptKind::Plain {
        eprintln!(
            "note: {} has no chat template; using the plain fallback",
            args.model.display()
        );
    }
    let prompt = builder
        .render(&messages, !args.no_generation_prompt)
        .map_err(|e| e.to_string())?;
    // The prompt exactly as rendered; a newline only to keep a terminal tidy.
    print!("{prompt}");
    if std::io::stdout().is_terminal() && !prompt.ends_with('\n') {
        println!();
    }
    Ok(())
}
