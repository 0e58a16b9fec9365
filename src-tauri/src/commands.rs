//! The one Tauri command the UI invokes: `call` with a command's name and its JSON arguments,
//! run off the UI thread through the service's command table (the same table a browser reaches
//! through `minerva serve --ui`), its error turned into the words the UI shows.

use minerva_service::commands::{self, Access, Caller};
use minerva_service::Service;
use serde_json::Value;
use std::sync::Arc;
use tauri::State;

#[tauri::command(rename_all = "snake_case")]
pub async fn call(
    svc: State<'_, Arc<Service>>,
    command: String,
    args: Option<Value>,
) -> Result<Value, String> {
    let svc = svc.inner().clone();
    let caller = Caller {
        access: Access::Local,
        data_folder: crate::data_folder(),
    };
    // Model files are read and SQLite is written there, never on the thread that draws.
    tauri::async_runtime::spawn_blocking(move || {
        commands::call(&svc, &caller, &command, args.unwrap_or(Value::Null))
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}
