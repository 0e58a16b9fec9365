//! What a user does, for every front end (the app, the command line, the server): open a model
//! and read its card, load it with progress and a cancel, and hold conversations with it whose
//! messages, stats and settings live in SQLite. Front ends call [`Service`] and receive
//! [`ServiceEvent`]s through the sink they gave it; none of them touches the engine.

pub mod app_settings;
pub mod bench;
pub mod bench_runs;
pub mod card;
pub mod catalogue;
pub mod chat;
pub mod commands;
pub mod completion;
pub mod error;
pub mod events;
pub mod library;
pub mod models;
pub use minerva_remote as remote;
pub mod reply;
pub mod settings;
pub mod sources;
pub mod store;

pub use app_settings::AppSettings;
pub use bench::{BenchFormat, BenchRequest};
pub use bench_runs::BenchRunSummary;
pub use card::{card, ModelCard};
pub use completion::{
    Completion, CompletionDone, CompletionEvent, CompletionPrompt, CompletionRequest, LogprobView,
};
pub use error::{Result, ServiceError};
pub use events::{ChatEvent, ChatPiece, ServiceEvent, Sink};
pub use models::{BackendRequest, LoadedModel, ModelInfo};
pub use settings::Settings;
pub use store::{Conversation, Message, Role, Stats, Store};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A GPU adapter as front ends list it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AdapterView {
    /// What to pass as a backend to load on it.
    pub name: String,
    /// `name (API, driver …)`, and its memory where the driver tells it.
    pub description: String,
    pub software: bool,
    /// The card's memory, where its driver tells it (NVML on NVIDIA).
    pub memory_bytes: Option<u64>,
}

/// Progress is sent at most this often during a load.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);

/// The database file in the platform's app data folder (Tauri's `app_data_dir()` for the app's
/// identifier, so the app, the command line and the server share it).
pub fn default_db_path() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("dev.minerva.app").join("minerva.sqlite"))
}

/// The user's catalogue file, which extends the shipped models.toml: `MINERVA_CATALOGUE`, or
/// `models.toml` in the platform's config folder.
pub fn user_catalogue_path() -> Option<PathBuf> {
    std::env::var_os("MINERVA_CATALOGUE")
        .map(PathBuf::from)
        .or_else(|| dirs::config_dir().map(|d| d.join("dev.minerva.app").join("models.toml")))
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct Service {
    store: Arc<Store>,
    sink: Sink,
    next_id: AtomicU64,
    /// Cancel flags of loads in progress.
    loads: Mutex<HashMap<u64, Arc<AtomicBool>>>,
    models: Mutex<Vec<Arc<LoadedModel>>>,
    /// Cancel flags of replies in progress, by conversation, with the model writing each.
    turns: Mutex<HashMap<i64, (u64, Arc<AtomicBool>)>>,
    bench: bench::Runner,
}

impl Service {
    pub fn new(store: Store, sink: Sink) -> Arc<Service> {
        Arc::new(Service {
            store: Arc::new(store),
            sink,
            next_id: AtomicU64::new(1),
            loads: Mutex::new(HashMap::new()),
            models: Mutex::new(Vec::new()),
            turns: Mutex::new(HashMap::new()),
            bench: bench::Runner::default(),
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Makes the GPU device that loads on `backend` (as `open` reads it) will take, on a thread
    /// of its own, and keeps a device between the models loaded on it, so that no load waits
    /// for the driver to make one. The app, the server and a chat call it at their start.
    pub fn prepare_device(&self, backend: &str) {
        let b = models::BackendRequest::parse(backend);
        minerva_engine::load::prepare(b.kind, b.adapter.as_deref());
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The card of the model at `path` (or of a catalogue id's file), with memory at `ctx` on the device `backend` picks;
    /// the model joins the recent ones.
    pub fn open(&self, path: &Path, backend: &str, ctx: Option<usize>) -> Result<ModelCard> {
        let path = &catalogue::resolve(path)?;
        let ckpt = minerva_formats::Checkpoint::open(path)?;
        let req = BackendRequest::parse(backend);
        let choice = minerva_engine::devices::choose_named(req.kind, req.adapter.as_deref());
        let card = card::card(&ckpt, ctx, &choice)?;
        self.store.note_recent(
            &card.path.display().to_string(),
            card.format,
            card.file_bytes,
        )?;
        Ok(card)
    }

    /// The GPU adapters a model can be loaded on by name, best first (software ones last, as
    /// `auto` passes them over).
    pub fn adapters(&self) -> Vec<AdapterView> {
        // The memory of each card where its driver tells it (NVML on NVIDIA; wgpu does not).
        let memory = minerva_bench::driver_memory::Driver::open()
            .map(|d| d.devices())
            .unwrap_or_default();
        minerva_engine::devices::adapters()
            .iter()
            .map(|a| {
                let total = memory.iter().find(|(n, _)| *n == a.name).map(|(_, b)| *b);
                AdapterView {
                    name: a.name.clone(),
                    description: match total {
                        Some(b) => format!("{a}, {:.0} GiB", b as f64 / (1u64 << 30) as f64),
                        None => a.to_string(),
                    },
                    software: a.software,
                    memory_bytes: total,
                }
            })
            .collect()
    }

    /// Models the user already has: recent ones, the catalogue's models present on disk, and
    /// those in other tools' folders.
    pub fn found_models(&self) -> Vec<library::FoundModel> {
        let home = dirs::home_dir();
        let folders: Vec<PathBuf> = self
            .store
            .app_settings()
            .map(|s| s.model_folders.iter().map(PathBuf::from).collect())
            .unwrap_or_default();
        let mut found = library::found_models(&self.store, home.as_deref(), &folders);
        let catalogue = self.catalogue().found(home.as_deref());
        // A catalogue model is listed as such, wherever else it was also found.
        found.retain(|f| f.source == "recent" || !catalogue.iter().any(|c| c.path == f.path));
        found.extend(catalogue);
        found
    }

    /// The models a caller may see: those of this machine ([`Service::local_models_for`]) and
    /// the remote engines' models.
    pub fn found_models_for(&self, access: &commands::Access) -> Vec<library::FoundModel> {
        let mut found = self.local_models_for(access);
        found.extend(self.remote_found());
        found
    }

    /// The models of this machine a caller may see: all of [`Service::found_models`] for the
    /// app's window; for a browser through the server, only what the server was started with
    /// and what its allowed folders hold.
    pub fn local_models_for(&self, access: &commands::Access) -> Vec<library::FoundModel> {
        match access {
            commands::Access::Local => self.found_models(),
            commands::Access::Served { models, folders } => {
                let places: Vec<PathBuf> = models.iter().chain(folders).cloned().collect();
                library::found_models(&self.store, None, &places)
                    .into_iter()
                    .filter(|f| access.readable(&f.path).is_ok())
                    .collect()
            }
        }
    }

    /// The shipped catalogue extended by the user's, with a line per bad entry.
    pub fn catalogue(&self) -> catalogue::Catalogue {
        catalogue::Catalogue::load(user_catalogue_path().as_deref())
    }

    /// Loads a model on this thread, telling `progress(bytes, total)` (false cancels).
    pub fn load_blocking(
        &self,
        path: &Path,
        backend: &str,
        ctx: Option<usize>,
        progress: &mut dyn FnMut(u64, u64) -> bool,
    ) -> Result<ModelInfo> {
        let model = match sources::parse_remote_path(path) {
            Some((url, model)) => self.load_remote(self.id(), url, model)?,
            None => models::load(
                self.id(),
                path,
                &BackendRequest::parse(backend),
                ctx,
                progress,
            )?,
        };
        let info = model.info.clone();
        lock(&self.models).push(Arc::new(model));
        Ok(info)
    }

    /// Starts loading on a thread of its own; `load-progress` events follow, then `load-done`
    /// or `load-error`. Returns the load's id for [`Service::cancel_load`].
    pub fn start_load(self: &Arc<Self>, path: PathBuf, backend: String, ctx: Option<usize>) -> u64 {
        let load_id = self.id();
        let cancel = Arc::new(AtomicBool::new(false));
        lock(&self.loads).insert(load_id, cancel.clone());
        let service = self.clone();
        std::thread::spawn(move || {
            let sink = service.sink.clone();
            let mut last = Instant::now() - PROGRESS_EVERY;
            let mut progress = |bytes: u64, total: u64| {
                if last.elapsed() >= PROGRESS_EVERY || bytes == total {
                    last = Instant::now();
                    sink(ServiceEvent::LoadProgress {
                        load_id,
                        bytes,
                        total,
                    });
                }
                !cancel.load(Ordering::Relaxed)
            };
            let result = service.load_blocking(&path, &backend, ctx, &mut progress);
            lock(&service.loads).remove(&load_id);
            (service.sink)(match result {
                Ok(model) => ServiceEvent::LoadDone { load_id, model },
                Err(e) => ServiceEvent::LoadError {
                    load_id,
                    cancelled: e == ServiceError::Cancelled,
                    message: e.to_string(),
                },
            });
        });
        load_id
    }

    /// Cancels a load in progress (within one tensor); false when there is none of that id.
    pub fn cancel_load(&self, load_id: u64) -> bool {
        lock(&self.loads)
            .get(&load_id)
            .map(|c| c.store(true, Ordering::Relaxed))
            .is_some()
    }

    /// Unloads a model; a reply it is generating is stopped first.
    pub fn unload(&self, id: u64) -> Result<()> {
        let mut models = lock(&self.models);
        let i = models
            .iter()
            .position(|m| m.info.id == id)
            .ok_or(ServiceError::NoSuchModel(id))?;
        for (model, cancel) in lock(&self.turns).values() {
            if *model == id {
                cancel.store(true, Ordering::Relaxed);
            }
        }
        models.remove(i);
        Ok(())
    }

    pub fn loaded(&self) -> Vec<ModelInfo> {
        lock(&self.models).iter().map(|m| m.info.clone()).collect()
    }

    /// Queues a completion on a loaded model (see [`completion`]).
    pub fn complete(&self, model_id: u64, req: CompletionRequest) -> Result<Completion> {
        let model = lock(&self.models)
            .iter()
            .find(|m| m.info.id == model_id)
            .cloned()
            .ok_or(ServiceError::NoSuchModel(model_id))?;
        completion::start(model, req)
    }

    /// A new conversation with the model at `model_path` (default: the last one loaded).
    pub fn create_conversation(
        &self,
        model_path: Option<&str>,
        settings: Option<Settings>,
    ) -> Result<Conversation> {
        let path = match model_path {
            Some(p) => Some(p.to_string()),
            None => lock(&self.models)
                .last()
                .map(|m| m.info.path.display().to_string()),
        };
        self.store.create_conversation(
            "New conversation",
            path.as_deref(),
            &settings.unwrap_or_default(),
        )
    }

    /// The loaded model a conversation talks to: its own when loaded, else the last loaded
    /// (the conversation then moves to it).
    fn model_for(&self, conv: &Conversation) -> Result<Arc<LoadedModel>> {
        let models = lock(&self.models);
        let own = conv.model_path.as_ref().and_then(|p| {
            models
                .iter()
                .rev()
                .find(|m| m.info.path.display().to_string() == *p)
        });
        let model = own
            .or_else(|| models.last())
            .cloned()
            .ok_or(ServiceError::NothingLoaded)?;
        let path = model.info.path.display().to_string();
        if conv.model_path.as_deref() != Some(path.as_str()) {
            self.store.set_model(conv.id, &path)?;
        }
        Ok(model)
    }

    /// Starts a reply to the conversation as it is stored.
    fn reply(&self, conversation_id: i64) -> Result<u64> {
        let conversation = self.store.conversation(conversation_id)?;
        let model = self.model_for(&conversation)?;
        let turn_id = self.id();
        let model_id = model.info.id;
        let cancel = chat::start(chat::Turn {
            turn_id,
            conversation,
            model,
            store: self.store.clone(),
            sink: self.sink.clone(),
        })?;
        lock(&self.turns).insert(conversation_id, (model_id, cancel));
        Ok(turn_id)
    }

    /// Adds a user message and starts the reply; the first message titles the conversation.
    pub fn send(&self, conversation_id: i64, text: &str) -> Result<u64> {
        let conv = self.store.conversation(conversation_id)?;
        if text.trim().is_empty() {
            return Err(ServiceError::Invalid("the message is empty".into()));
        }
        let first = self.store.messages(conversation_id)?.is_empty();
        self.model_for(&conv)?;
        self.store
            .add_message(conversation_id, Role::User, text, None, None, None)?;
        if first && conv.title == "New conversation" {
            self.store
                .rename_conversation(conversation_id, &title_of(text))?;
        }
        self.reply(conversation_id)
    }

    /// Replaces the last reply with a new one.
    pub fn regenerate(&self, conversation_id: i64) -> Result<u64> {
        let messages = self.store.messages(conversation_id)?;
        match messages.last() {
            Some(m) if m.role == Role::Assistant => self.store.delete_message(m.id)?,
            Some(_) => {}
            None => return Err(ServiceError::Invalid("the conversation is empty".into())),
        }
        self.reply(conversation_id)
    }

    /// Rewrites a user message, drops what followed it, and starts a new reply.
    pub fn edit(&self, message_id: i64, text: &str) -> Result<u64> {
        let m = self.store.message(message_id)?;
        if m.role != Role::User {
            return Err(ServiceError::Invalid(
                "only the user's messages can be edited".into(),
            ));
        }
        self.store.rewrite_from(message_id, text)?;
        self.reply(m.conversation_id)
    }

    /// Stops the conversation's reply in progress (within one token); what was generated is
    /// kept, with stop reason `cancelled`.
    pub fn stop(&self, conversation_id: i64) {
        if let Some((_, cancel)) = lock(&self.turns).get(&conversation_id) {
            cancel.store(true, Ordering::Relaxed);
        }
    }
}

/// A conversation's title from its first message: the first line, at most 48 characters.
fn title_of(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default().trim();
    let mut title: String = line.chars().take(48).collect();
    if line.chars().count() > 48 {
        title.push('…');
    }
    title
}
