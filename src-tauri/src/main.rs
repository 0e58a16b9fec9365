//! The Minerva desktop app: a window showing the web UI (ui/), whose commands and events are
//! thin wrappers over minerva-service. Conversations live in the app data folder's SQLite file
//! (`MINERVA_DB` names another).

mod commands;

use minerva_service::{Service, ServiceEvent, Store};
use std::sync::{Arc, OnceLock};
use tauri::{Emitter, Manager};

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
            let _ = app.emit(e.name(), e.for_ui());
        }
    });
    let service = Service::new(store, sink);
    // The GPU's device is made while the window opens, not when the first model loads.
    service.prepare_device("auto");
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
        .invoke_handler(tauri::generate_handler![commands::call])
        .run(tauri::generate_context!());
    if let Err(e) = result {
        eprintln!("error: the window could not run: {e}");
        std::process::exit(1);
    }
}
