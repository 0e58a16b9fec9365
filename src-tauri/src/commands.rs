//! The Tauri commands the UI invokes: each one a thin call into the service, run off the UI
//! thread, its error turned into the words the UI shows. Arguments are snake_case as the UI
//! sends them.

use minerva_service::library::FoundModel;
use minerva_service::{Conversation, Message, ModelCard, ModelInfo, Service, Settings};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use tauri::State;

pub(crate) type Svc<'a> = State<'a, Arc<Service>>;
pub(crate) type Answer<T> = Result<T, String>;

pub(crate) fn words<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Runs service work on a blocking thread: model files are read and SQLite is written there,
/// never on the thread that draws the window.
pub(crate) async fn off_ui<T: Send + 'static>(
    f: impl FnOnce() -> Answer<T> + Send + 'static,
) -> Answer<T> {
    tauri::async_runtime::spawn_blocking(f)
        .await
        .map_err(words)?
}

#[tauri::command(rename_all = "snake_case")]
pub async fn open_model(svc: Svc<'_>, path: String, backend: Option<String>) -> Answer<ModelCard> {
    let svc = svc.inner().clone();
    off_ui(move || {
        svc.open(
            &PathBuf::from(path),
            backend.as_deref().unwrap_or("auto"),
            None,
        )
        .map_err(words)
    })
    .await
}

#[derive(Serialize)]
pub struct LoadStarted {
    load_id: u64,
}

#[tauri::command(rename_all = "snake_case")]
pub fn load_model(
    svc: Svc<'_>,
    path: String,
    backend: Option<String>,
    ctx: Option<usize>,
) -> LoadStarted {
    // What the UI leaves open comes from the app's settings.
    let settings = svc.store().app_settings().unwrap_or_default();
    let backend = backend.unwrap_or(settings.adapter);
    LoadStarted {
        load_id: svc.start_load(PathBuf::from(path), backend, ctx.or(settings.default_ctx)),
    }
}

#[tauri::command(rename_all = "snake_case")]
pub fn cancel_load(svc: Svc<'_>, load_id: u64) -> bool {
    svc.cancel_load(load_id)
}

#[tauri::command(rename_all = "snake_case")]
pub async fn unload_model(svc: Svc<'_>, id: u64) -> Answer<()> {
    let svc = svc.inner().clone();
    off_ui(move || svc.unload(id).map_err(words)).await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn adapters(svc: Svc<'_>) -> Answer<Vec<minerva_service::AdapterView>> {
    let svc = svc.inner().clone();
    off_ui(move || Ok(svc.adapters())).await
}

#[tauri::command(rename_all = "snake_case")]
pub fn loaded_models(svc: Svc<'_>) -> Vec<ModelInfo> {
    svc.loaded()
}

#[tauri::command(rename_all = "snake_case")]
pub async fn found_models(svc: Svc<'_>) -> Answer<Vec<FoundModel>> {
    let svc = svc.inner().clone();
    off_ui(move || Ok(svc.found_models())).await
}

/// A line per bad entry of the catalogue files (`file:line: what`).
#[tauri::command(rename_all = "snake_case")]
pub async fn catalogue_problems(svc: Svc<'_>) -> Answer<Vec<String>> {
    let svc = svc.inner().clone();
    off_ui(move || Ok(svc.catalogue().problems)).await
}

/// A conversation with the tokens its last reply left in the context, for the gauge.
#[derive(Serialize)]
pub struct ConversationView {
    #[serde(flatten)]
    conversation: Conversation,
    tokens_used: usize,
}

fn view(svc: &Service, conversation: Conversation) -> ConversationView {
    let tokens_used = svc
        .store()
        .messages(conversation.id)
        .unwrap_or_default()
        .iter()
        .rev()
        .find_map(|m| m.stats.as_ref())
        .map_or(0, |s| s.prompt_tokens + s.generated_tokens);
    ConversationView {
        conversation,
        tokens_used,
    }
}

#[tauri::command(rename_all = "snake_case")]
pub async fn list_conversations(
    svc: Svc<'_>,
    query: Option<String>,
) -> Answer<Vec<ConversationView>> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let q = query.filter(|q| !q.trim().is_empty());
        let list = svc.store().conversations(q.as_deref()).map_err(words)?;
        Ok(list.into_iter().map(|c| view(&svc, c)).collect())
    })
    .await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn create_conversation(
    svc: Svc<'_>,
    model_path: Option<String>,
    settings: Option<Settings>,
) -> Answer<ConversationView> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let c = svc
            .create_conversation(model_path.as_deref(), settings)
            .map_err(words)?;
        Ok(view(&svc, c))
    })
    .await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn rename_conversation(svc: Svc<'_>, id: i64, title: String) -> Answer<()> {
    let svc = svc.inner().clone();
    off_ui(move || svc.store().rename_conversation(id, &title).map_err(words)).await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn delete_conversation(svc: Svc<'_>, id: i64) -> Answer<()> {
    let svc = svc.inner().clone();
    off_ui(move || {
        svc.stop(id);
        svc.store().delete_conversation(id).map_err(words)
    })
    .await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn get_messages(svc: Svc<'_>, conversation_id: i64) -> Answer<Vec<Message>> {
    let svc = svc.inner().clone();
    off_ui(move || svc.store().messages(conversation_id).map_err(words)).await
}

/// The reply started: events of kind text, reasoning, done or error follow, with this id.
#[derive(Serialize)]
pub struct ReplyStarted {
    message_id: u64,
}

#[tauri::command(rename_all = "snake_case")]
pub async fn send_message(
    svc: Svc<'_>,
    conversation_id: i64,
    text: String,
) -> Answer<ReplyStarted> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let message_id = svc.send(conversation_id, &text).map_err(words)?;
        Ok(ReplyStarted { message_id })
    })
    .await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn regenerate(svc: Svc<'_>, conversation_id: i64) -> Answer<ReplyStarted> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let message_id = svc.regenerate(conversation_id).map_err(words)?;
        Ok(ReplyStarted { message_id })
    })
    .await
}

#[tauri::command(rename_all = "snake_case")]
pub async fn edit_message(svc: Svc<'_>, message_id: i64, text: String) -> Answer<ReplyStarted> {
    let svc = svc.inner().clone();
    off_ui(move || {
        let message_id = svc.edit(message_id, &text).map_err(words)?;
        Ok(ReplyStarted { message_id })
    })
    .await
}

#[tauri::command(rename_all = "snake_case")]
pub fn stop(svc: Svc<'_>, conversation_id: i64) {
    svc.stop(conversation_id);
}

#[tauri::command(rename_all = "snake_case")]
pub async fn update_settings(svc: Svc<'_>, conversation_id: i64, settings: Settings) -> Answer<()> {
    let svc = svc.inner().clone();
    off_ui(move || {
        svc.store()
            .set_settings(conversation_id, &settings)
            .map_err(words)
    })
    .await
}

#[derive(Serialize)]
pub struct Status {
    model: Option<ModelInfo>,
    memory_used_bytes: Option<u64>,
}

#[tauri::command(rename_all = "snake_case")]
pub fn status(svc: Svc<'_>) -> Status {
    Status {
        model: svc.loaded().pop(),
        memory_used_bytes: minerva_bench::measure::memory_status("VmRSS"),
    }
}
