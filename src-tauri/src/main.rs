//! The Minerva desktop app: a window showing the web UI (ui/), whose commands and events are
//! thin wrappers over minerva-service. Conversations live in the app data folder's SQLite file
//! (`MINERVA_DB` names another).

mod bench_commands;
mod commands;

use minerva_service::{ChatPiece, Service, ServiceEvent, Store};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use tauri::{Emitter, Manager};

/// An event as the UI reads it: a reply's pieces carry `message_id` (the reply being written)
/// and `kind`; its end carries the stats.
fn for_ui(e: &ServiceEvent) -> Value {
    let ServiceEvent::Chat(c) = e else {
        return serde_json::to_value(e).unwrap_or(Value::Null);
    };
    let mut v = json!({"conversation_id": c.conversation_id, "message_id": c.turn_id});
    match &c.piece {
        ChatPiece::Text { text } => {
            v["kind"] = "text".into();
            v["text"] = text.as_str().into();
        }
        ChatPiece::Reasoning { text } => {
            v["kind"] = "reasoning".into();
            v["text"] = text.as_str().into();
        }
        ChatPiece::Done { message } => {
            v["kind"] = "done".into();
            v["stats"] = serde_json::to_value(&message.stats).unwrap_or(Value::Null);
            v["stored_id"] = message.id.into();
        }
        ChatPiece::Error { message } => {
            v["kind"] = "error".into();
            v["message"] = message.as_str().into();
        }
    }
    v
}

/// Without a display the window cannot open: say so, and show what the command line does.
fn no_display() -> bool {
    cfg!(target_os = "linux")
        && std::env::var_os("DISPLAY").is_none()
        && std::env::var_os("WAYLAND_DISPLAY").is_none()
}

/// The database's path: `MINERVA_DB`, else the platform's app data folder.
fn db_path() -> Option<std::path::PathBuf> {
    std::env::var_os("MINERVA_DB")
        .map(std::path::PathBuf::from)
        .or_else(minerva_service::default_db_path)
}

/// The folder where the app keeps its data, for the settings screen.
pub fn data_folder() -> String {
    db_path()
        .as_deref()
        .and_then(std::path::Path::parent)
        .map_or_else(|| "(in memory)".into(), |d| d.display().to_string())
}

fn main() {
    // A benchmark measurement: this binary in a child process, no window.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(minerva_bench::measure::CHILD_ARG) {
        std::process::exit(minerva_bench::measure::child_main(&args[1..]));
    }
    if no_display() {
        eprintln!(
            "Minerva's window needs a display (DISPLAY or WAYLAND_DISPLAY is not set).\n\
             The same engine from a terminal:\n  \
             minerva info MODEL             the model card\n  \
             minerva chat MODEL             chat in the terminal\n  \
             minerva run MODEL --prompt T   one reply\n\
             (cargo run --release -p minerva-cli -- chat MODEL)"
        );
        std::process::exit(1);
    }
    let db = db_path();
    let store = match db.as_deref().map(Store::open) {
        Some(Ok(store)) => store,
        Some(Err(e)) => {
            eprintln!("error: {e}; conversations will not be kept");
            Store::in_memory().expect("an in-memory database opens")
        }
        None => Store::in_memory().expect("an in-memory database opens"),
    };
    let app_handle: Arc<OnceLock<tauri::AppHandle>> = Arc::default();
    let emitter = app_handle.clone();
    let sink = Arc::new(move |e: ServiceEvent| {
        if let Some(app) = emitter.get() {
            let _ = app.emit(e.name(), for_ui(&e));
        }
    });
    let service = Service::new(store, sink);
    let result = tauri::Builder::default()
        .plugin(tauri_plugin_dialog::init())
        .manage(service)
        .setup(move |app| {
            let _ = app_handle.set(app.handle().clone());
            if let Some(w) = app.get_webview_window("main") {
                let _ = w.set_title("Minerva");
            }
            Ok(())
        })
        .invoke_handler(tauri::generate_handler![
            commands::open_model,
            commands::load_model,
            commands::cancel_load,
            commands::unload_model,
            commands::adapters,
            commands::loaded_models,
            commands::found_models,
            commands::catalogue_problems,
            commands::list_conversations,
            commands::create_conversation,
            commands::rename_conversation,
            commands::delete_conversation,
            commands::get_messages,
            commands::send_message,
            commands::regenerate,
            commands::edit_message,
            commands::stop,
            commands::update_settings,
            commands::status,
            bench_commands::bench_catalogue,
            bench_commands::bench_formats,
            bench_commands::start_bench,
            bench_commands::cancel_bench,
            bench_commands::bench_runs,
            bench_commands::bench_run,
            bench_commands::compare_bench_runs,
            bench_commands::delete_bench_run,
            bench_commands::import_bench_report,
            bench_commands::export_bench_run,
            bench_commands::save_png,
            bench_commands::app_settings,
            bench_commands::set_app_settings,
        ])
        .run(tauri::generate_context!());
    if let Err(e) = result {
        eprintln!("error: the window could not run: {e}");
        std::process::exit(1);
    }
}
