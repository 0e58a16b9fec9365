//! `minerva serve`: the OpenAI-compatible server (and, with `--ui`, the app in a browser).

use minerva_server::{ServeOptions, DEFAULT_BODY_LIMIT};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A model to load at start (a GGUF file, a model folder or a catalogue id); repeat for
    /// several. Requests name it by the id `GET /v1/models` lists.
    #[arg(long = "model")]
    pub models: Vec<PathBuf>,
    /// A folder whose models requests and the web UI may load on first use; repeat for several.
    #[arg(long = "allow-folder")]
    pub allow_folders: Vec<PathBuf>,
    /// The address to listen on (0.0.0.0 opens it to the network: set --api-key).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Context length of each model (default: the model's, at most 4096).
    #[arg(long)]
    pub ctx: Option<usize>,
    #[command(flatten)]
    pub backend: super::backend::BackendArg,
    /// Requests must send `Authorization: Bearer KEY` (or the MINERVA_API_KEY variable's).
    #[arg(long, env = "MINERVA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Also serve the app's web UI at `/`.
    #[arg(long)]
    pub ui: bool,
    /// A web origin allowed to call the API from a browser (CORS); repeat for several.
    #[arg(long = "allow-origin")]
    pub allow_origins: Vec<String>,
    /// The largest request body in bytes.
    #[arg(long, default_value_t = DEFAULT_BODY_LIMIT)]
    pub max_body: usize,
}

pub fn run(args: Args) -> Result<(), String> {
    // The web UI's conversations live where the app keeps its own (MINERVA_DB moves them).
    let db = std::env::var_os("MINERVA_DB")
        .map(PathBuf::from)
        .or_else(minerva_service::default_db_path);
    minerva_server::run(ServeOptions {
        models: args.models,
        allow_folders: args.allow_folders,
        host: args.host,
        port: args.port,
        ctx: args.ctx,
        backend: args.backend.name(),
        api_key: args.api_key.filter(|k| !k.is_empty()),
        ui: args.ui,
        allow_origins: args.allow_origins,
        body_limit: args.max_body,
        db,
    })
}
