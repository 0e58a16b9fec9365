//! `minerva serve`: an OpenAI-compatible HTTP server over the service layer (models, chat
//! completions and completions, streamed or whole), `/health` and `/metrics`, and with `--ui`
//! the app's web UI for a browser on the same port. Bound to 127.0.0.1 unless told otherwise;
//! an optional API key; a body size limit; CORS off unless origins are allowed; no file of the
//! machine reachable but the models and folders it was started with.

pub mod error;
mod generate;
mod metrics;
mod openai;
mod pool;
mod ui;

use axum::extract::{MatchedPath, Path as UrlPath, Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use error::ApiError;
use minerva_service::commands::{Access, Caller};
use minerva_service::{Service, ServiceEvent, Store};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::future::IntoFuture;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::sync::{broadcast, watch};

/// What `minerva serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Loaded at start; requests may also name them.
    pub models: Vec<PathBuf>,
    /// Folders whose models requests (and the UI) may load.
    pub allow_folders: Vec<PathBuf>,
    pub host: String,
    pub port: u16,
    pub ctx: Option<usize>,
    pub backend: String,
    pub api_key: Option<String>,
    pub ui: bool,
    /// Origins allowed by CORS (none: CORS off).
    pub allow_origins: Vec<String>,
    pub body_limit: usize,
    /// The SQLite file the UI's conversations live in (None: in memory).
    pub db: Option<PathBuf>,
}

/// The default body limit: a long conversation fits, a mistaken upload does not.
pub const DEFAULT_BODY_LIMIT: usize = 4 << 20;

/// Open SSE streams are ended this long after a shutdown signal at the latest.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

pub struct AppState {
    pool: pool::Pool,
    caller: Caller,
    metrics: metrics::Metrics,
    events: broadcast::Sender<ServiceEvent>,
    shutdown: watch::Receiver<bool>,
    /// SHA-256 of the API key: compared in constant time, whatever the lengths.
    key: Option<[u8; 32]>,
    body_limit: usize,
}

pub type Shared = Arc<AppState>;

/// Resolves once the server is shutting down.
async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The routes, their limits and checks.
pub fn router(state: Shared, with_ui: bool, allow_origins: &[String]) -> Router {
    let mut api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/v1/chat/completions", post(generate::chat))
        .route("/v1/completions", post(generate::completions))
        .route("/metrics", get(metrics_text));
    if with_ui {
        api = api
            .route("/api/call/{command}", post(ui::call))
            .route("/api/events", get(ui::events));
    }
    let api = api.route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    let mut app = api
        .route("/health", get(health))
        .layer(axum::extract::DefaultBodyLimit::max(state.body_limit));
    if with_ui {
        app = app.fallback(ui::file);
    }
    let mut app = app
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state);
    if !allow_origins.is_empty() {
        let origins: Vec<HeaderValue> = allow_origins
            .iter()
            .filter_map(|o| o.parse().ok())
            .collect();
        app = app.layer(
            tower_http::cors::CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]),
        );
    }
    app
}

/// Requests need the key when the server has one: `Authorization: Bearer KEY`, or
/// `?api_key=KEY` for the UI's event stream (a browser's EventSource sends no headers).
async fn authorize(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let Some(want) = state.key else {
        return next.run(req).await;
    };
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let query = req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("api_key="))
            .map(|v| percent_decode(v))
    });
    let ok = bearer
        .or(query)
        .is_some_and(|k| bool::from(digest(&k).ct_eq(&want)));
    if ok {
        next.run(req).await
    } else {
        ApiError::unauthorized().into_response()
    }
}

/// `%XX` escapes of a query value (the UI encodes its key with encodeURIComponent).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Counts every request by route and status.
async fn count(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("other", |p| p.as_str())
        .to_string();
    let response = next.run(req).await;
    state.metrics.count(&endpoint, response.status().as_u16());
    response
}

async fn health(State(state): State<Shared>) -> Json<serde_json::Value> {
    Json(json!({"status": "ok", "models_loaded": state.pool.svc.loaded().len()}))
}

async fn models(State(state): State<Shared>) -> Json<serde_json::Value> {
    Json(json!({"object": "list", "data": state.pool.listed()}))
}

async fn model(
    State(state): State<Shared>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let listed = state.pool.listed();
    match listed.iter().find(|m| m.id == id) {
        Some(m) => Ok(Json(json!(m))),
        None => Err(ApiError::unknown_model(
            &id,
            &listed.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
        )),
    }
}

async fn metrics_text(State(state): State<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.text(),
    )
}

/// Builds the service and the state; the models given are loaded before this returns.
pub fn state(opts: &ServeOptions, shutdown: watch::Receiver<bool>) -> Result<Shared, String> {
    let store = match &opts.db {
        Some(p) => Store::open(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => Store::in_memory().map_err(|e| e.to_string())?,
    };
    let (events, _) = broadcast::channel(1024);
    let sender = events.clone();
    let sink = Arc::new(move |e: ServiceEvent| {
        // No browser listening is not an error.
        let _ = sender.send(e);
    });
    let svc = Service::new(store, sink);
    svc.prepare_device(&opts.backend);
    let access = Access::Served {
        models: opts.models.clone(),
        folders: opts.allow_folders.clone(),
    };
    let data_folder = opts
        .db
        .as_deref()
        .and_then(std::path::Path::parent)
        .map_or_else(|| "(in memory)".into(), |d| d.display().to_string());
    for m in &opts.models {
        let start = std::time::Instant::now();
        let info = svc
            .load_blocking(m, &opts.backend, opts.ctx, &mut |_, _| true)
            .map_err(|e| format!("{}: {e}", m.display()))?;
        eprintln!(
            "loaded {} ({}, {} tokens of context) in {:.1} s",
            info.name,
            info.adapter.as_deref().unwrap_or(info.backend),
            info.ctx,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(Arc::new(AppState {
        pool: pool::Pool::new(svc, access.clone(), opts.backend.clone(), opts.ctx),
        caller: Caller {
            access,
            data_folder,
        },
        metrics: metrics::Metrics::default(),
        events,
        shutdown,
        key: opts.api_key.as_deref().map(digest),
        body_limit: opts.body_limit,
    }))
}

/// Serves until Ctrl+C or SIGTERM.
pub fn run(opts: ServeOptions) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let addr = format!("{}:{}", opts.host, opts.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        serve_on(listener, opts, shutdown_signal()).await
    })
}

/// Loads the models, then serves on `listener` until `signal` resolves; open streams are then
/// ended, and the wait for them bounded.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    opts: ServeOptions,
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let (stop, shutdown) = watch::channel(false);
    let o = opts.clone();
    let waiting = shutdown.clone();
    let state = tokio::task::spawn_blocking(move || state(&o, waiting))
        .await
        .map_err(|e| e.to_string())??;
    let app = router(state, opts.ui, &opts.allow_origins);
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("Minerva's OpenAI-compatible API: http://{local}/v1");
    if opts.ui {
        eprintln!("Minerva in a browser: http://{local}/");
    }
    if opts.host != "127.0.0.1" && opts.host != "localhost" && opts.api_key.is_none() {
        eprintln!(
            "warning: listening on {} without --api-key: anyone who reaches it can use it",
            opts.host
        );
    }
    let graceful = async move {
        signal.await;
        eprintln!("shutting down");
        let _ = stop.send(true);
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(graceful);
    tokio::select! {
        r = server.into_future() => r.map_err(|e| e.to_string()),
        _ = async { stopped(shutdown).await; tokio::time::sleep(SHUTDOWN_GRACE).await } => Ok(()),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
