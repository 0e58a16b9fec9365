//! The `minerva` command line: every thing the app does, from a terminal.

mod commands;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "minerva",
    version,
    about = "Run and compare local LLMs in GGUF, SafeTensors and MLX formats"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what a model file or folder holds: format, architecture, dtypes, memory.
    Info(commands::info::Args),
    /// Turn text into token ids with the model's own tokenizer.
    Tokenize(commands::tokenize::Args),
    /// Render a conversation with the model's chat template.
    Template(commands::template::Args),
    /// Write the logits of one forward pass over given token ids.
    Score(commands::score::Args),
    /// Generate from a prompt, streaming the text (or one JSON object with --json).
    Run(commands::run::Args),
    /// Chat with a model in the terminal.
    Chat(commands::chat::Args),
    /// Convert a model between GGUF, SafeTensors and MLX (optionally quantizing).
    Convert(commands::convert::Args),
    /// Write a random-weight model at a real model's shape, in several formats.
    Synth(commands::synth::Args),
    /// Compare one model's formats, and remote engines serving it: load, first token, prefill,
    /// decode, memory and drift.
    Bench(commands::bench::Args),
    /// Serve models over an OpenAI-compatible HTTP API (and the app in a browser with --ui).
    Serve(commands::serve::Args),
}

fn main() -> ExitCode {
    // A measurement of `minerva bench`, in its own process (not a command people type).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(minerva_bench::measure::CHILD_ARG) {
        return ExitCode::from(minerva_bench::measure::child_main(&args[1..]) as u8);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(args) => commands::info::run(args),
        Command::Tokenize(args) => commands::tokenize::run(args),
        Command::Template(args) => commands::template::run(args),
        Command::Score(args) => commands::score::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Chat(args) => commands::chat::run(args),
        Command::Convert(args) => commands::convert::run(args),
        Command::Synth(args) => commands::synth::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Serve(args) => commands::serve::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
