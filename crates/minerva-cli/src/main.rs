//! The `minerva` command line.

mod commands;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "minerva", version, about = "Run, inspect, convert and benchmark LLMs in GGUF, SafeTensors and MLX form")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a model between GGUF, SafeTensors and MLX
    Convert(commands::convert::Args),
    /// Write a random-weight model at a real model's shape
    Synth(commands::synth::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Convert(a) => commands::convert::run(a),
        Command::Synth(a) => commands::synth::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
