//! Remote OpenAI-compatible engines (vLLM, llama.cpp's server, another Minerva) as model
//! sources, like folders: added by URL (with an optional key) and kept in the app's settings;
//! their models are listed with the found ones, "loaded" (checked to be there), chatted with
//! (streamed, stoppable, reasoning apart) and stored like local replies. A remote model goes by
//! the path `URL#MODEL` in found models, loads and conversations.

use crate::app_settings::RemoteSource;
use crate::chat::{chat_messages, Turn, Writer};
use crate::error::{Result, ServiceError};
use crate::library::FoundModel;
use crate::models::{Engine, LoadedModel, ModelInfo};
use crate::remote::{RemoteChat, RemoteDelta, RemoteEngine, RemoteMessage};
use crate::store::Stats;
use crate::Service;
use minerva_text::OutputPiece;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// The format and source name remote models carry.
pub const REMOTE: &str = "remote";

/// The path a remote engine's model goes by.
pub fn remote_path(url: &str, model: &str) -> PathBuf {
    PathBuf::from(format!("{url}#{model}"))
}

/// The engine's URL and the model's id of a remote model's path.
pub fn parse_remote_path(path: &Path) -> Option<(&str, &str)> {
    let s = path.to_str()?;
    if !(s.starts_with("http://") || s.starts_with("https://")) {
        return None;
    }
    s.split_once('#').filter(|(_, m)| !m.is_empty())
}

/// A remote engine as front ends list it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteEngineView {
    pub url: String,
    pub models: Vec<String>,
    /// Why its models could not be listed just now.
    pub error: Option<String>,
}

impl Service {
    /// Adds (or replaces) an engine once it has listed its models.
    pub fn add_remote_engine(&self, url: &str, api_key: Option<&str>) -> Result<RemoteEngineView> {
        let engine = RemoteEngine::new(url, api_key).map_err(ServiceError::from)?;
        let models = engine.models().map_err(ServiceError::from)?;
        let url = engine.url().to_string();
        let mut settings = self.store.app_settings()?;
        settings.remote_engines.retain(|r| r.url != url);
        settings.remote_engines.push(RemoteSource {
            url: url.clone(),
            api_key: api_key
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(String::from),
        });
        self.store.set_app_settings(&settings)?;
        Ok(RemoteEngineView {
            url,
            models,
            error: None,
        })
    }

    pub fn remove_remote_engine(&self, url: &str) -> Result<()> {
        let mut settings = self.store.app_settings()?;
        let before = settings.remote_engines.len();
        settings.remote_engines.retain(|r| r.url != url);
        if settings.remote_engines.len() == before {
            return Err(ServiceError::Invalid(format!("no remote engine {url}")));
        }
        self.store.set_app_settings(&settings)?;
        Ok(())
    }

    /// The engines added, each with its models as it lists them now.
    pub fn remote_engines(&self) -> Vec<RemoteEngineView> {
        let sources = self
            .store
            .app_settings()
            .map(|s| s.remote_engines)
            .unwrap_or_default();
        sources
            .iter()
            .map(|r| {
                let listed = RemoteEngine::new(&r.url, r.api_key.as_deref())
                    .and_then(|e| e.models())
                    .map_err(|e| ServiceError::from(e).to_string());
                RemoteEngineView {
                    url: r.url.clone(),
                    models: listed.clone().unwrap_or_default(),
                    error: listed.err(),
                }
            })
            .collect()
    }

    /// Every model of every engine added, as found models.
    pub(crate) fn remote_found(&self) -> Vec<FoundModel> {
        self.remote_engines()
            .into_iter()
            .flat_map(|e| {
                e.models.into_iter().map(move |m| FoundModel {
                    path: remote_path(&e.url, &m),
                    name: m,
                    format: REMOTE.into(),
                    bytes: 0,
                    source: REMOTE,
                })
            })
            .collect()
    }

    /// An engine that was added (only those: a path cannot reach any URL), found by its
    /// address as it was stored: normalized (`http://host:port` → `http://host:port/v1`).
    pub(crate) fn added_engine(&self, url: &str) -> Result<RemoteSource> {
        let normal = RemoteEngine::new(url, None).map(|e| e.url().to_string());
        let url = normal.as_deref().unwrap_or(url);
        let settings = self.store.app_settings()?;
        settings
            .remote_engines
            .into_iter()
            .find(|r| r.url == url)
            .ok_or_else(|| {
                ServiceError::Invalid(format!(
                    "{url} is not among the remote engines: add it first"
                ))
            })
    }

    /// The client of an engine that was added.
    fn engine(&self, url: &str) -> Result<RemoteEngine> {
        let source = self.added_engine(url)?;
        RemoteEngine::new(&source.url, source.api_key.as_deref()).map_err(ServiceError::from)
    }

    /// "Loads" a remote model: its engine answers and lists it.
    pub(crate) fn load_remote(&self, id: u64, url: &str, model: &str) -> Result<LoadedModel> {
        let start = Instant::now();
        let engine = self.engine(url)?;
        let models = engine.models().map_err(ServiceError::from)?;
        if !models.iter().any(|m| m == model) {
            return Err(ServiceError::Invalid(format!(
                "the engine at {url} has no model '{model}' (it has: {})",
                models.join(", ")
            )));
        }
        Ok(LoadedModel {
            info: ModelInfo {
                id,
                path: remote_path(url, model),
                name: model.to_string(),
                backend: REMOTE,
                adapter: Some(url.to_string()),
                backend_reason: None,
                load_ms: start.elapsed().as_secs_f64() * 1e3,
                // The engine knows its context; it refuses what does not fit, in its words.
                ctx: 0,
            },
            engine: Engine::Remote {
                engine,
                model: model.to_string(),
            },
        })
    }
}

/// Asks the engine for the reply on a thread of its own; returns its cancel flag.
pub(crate) fn start_turn(turn: Turn) -> Result<Arc<AtomicBool>> {
    let Engine::Remote { engine, model } = &turn.model.engine else {
        return Err(ServiceError::Invalid("not a remote model".into()));
    };
    let conv = &turn.conversation;
    let s = &conv.settings;
    let messages = chat_messages(s, &turn.store.messages(conv.id)?);
    let req = RemoteChat {
        model: model.clone(),
        messages: messages
            .iter()
            .map(|m| RemoteMessage::new(&m.role, &m.content))
            .collect(),
        max_tokens: Some(s.max_tokens.max(1)),
        temperature: Some(s.temperature),
        top_p: Some(s.top_p),
        seed: s.seed,
        stop: Vec::new(),
        logprobs: None,
    };
    let engine = engine.clone();
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    std::thread::spawn(move || {
        let mut writer = Writer::new(turn);
        let start = Instant::now();
        let (mut first, mut last, mut pieces) = (None, start, 0usize);
        let result = engine.chat(&req, &flag, &mut |delta| {
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
            match delta {
                RemoteDelta::Content(t) => writer.take(OutputPiece::Answer(t)),
                RemoteDelta::Reasoning(t) => writer.take(OutputPiece::Reasoning(t)),
                RemoteDelta::Logprob(_) => return,
            }
            pieces += 1;
        });
        let done = match result {
            Ok(done) => done,
            Err(e) => return writer.fail(ServiceError::from(e).to_string()),
        };
        // Timings from the stream as it arrived: the engine's own are not sent.
        let ttft_s = first.map_or(0.0, |f: Instant| (f - start).as_secs_f64());
        let decode_s = first.map_or(0.0, |f: Instant| (last - f).as_secs_f64());
        let prompt = done.prompt_tokens.unwrap_or(0);
        let generated = done.completion_tokens.unwrap_or(pieces);
        let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        let stop_reason = match done.finish_reason.as_deref() {
            Some("length") => "max_tokens",
            Some("cancelled") => "cancelled",
            _ => "stop",
        };
        writer.finish(Stats {
            prompt_tokens: prompt,
            prefill_tokens: prompt,
            generated_tokens: generated,
            time_to_first_token_ms: ttft_s * 1e3,
            prefill_tokens_per_s: rate(prompt, ttft_s),
            decode_tokens_per_s: rate(generated.saturating_sub(1), decode_s),
            stop_reason: stop_reason.into(),
        });
    });
    Ok(cancel)
}
