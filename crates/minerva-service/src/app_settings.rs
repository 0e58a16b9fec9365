//! The app's own settings (not a conversation's): the GPU adapter, the default context, the
//! folders to scan for models, the theme. Kept in SQLite as one JSON value, so a field added
//! later reads its default from an older database.

use crate::error::Result;
use crate::store::{db_err, json_err, Store};
use rusqlite::OptionalExtension;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppSettings {
    /// `auto`, `cpu`, or an adapter's name.
    pub adapter: String,
    /// Context length for new loads; None: the model's (at most 4,096).
    pub default_ctx: Option<usize>,
    /// Folders scanned for models besides the other tools' stores.
    pub model_folders: Vec<String>,
    /// Where the database lives (shown; `MINERVA_DB` moves it).
    pub data_folder: String,
    /// `system`, `light` or `dark`.
    pub theme: String,
    /// OpenAI-compatible engines whose models are listed beside the local ones.
    pub remote_engines: Vec<RemoteSource>,
}

/// A remote engine: its base URL (`http://host:port/v1`) and the key it wants, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteSource {
    pub url: String,
    #[serde(default)]
    pub api_key: Option<String>,
}

impl Default for AppSettings {
    fn default() -> Self {
        AppSettings {
            adapter: "auto".into(),
            default_ctx: None,
            model_folders: Vec::new(),
            data_folder: String::new(),
            theme: "system".into(),
            remote_engines: Vec::new(),
        }
    }
}

impl AppSettings {
    /// Values a front end may send, made sound: unknown themes and zero contexts fall back.
    pub fn checked(mut self) -> AppSettings {
        if !["system", "light", "dark"].contains(&self.theme.as_str()) {
            self.theme = "system".into();
        }
        if self.adapter.trim().is_empty() {
            self.adapter = "auto".into();
        }
        self.default_ctx = self.default_ctx.filter(|&c| c >= 16);
        self.model_folders.retain(|f| !f.trim().is_empty());
        self
    }
}

const KEY: &str = "app";

impl Store {
    pub fn app_settings(&self) -> Result<AppSettings> {
        let json: Option<String> = self
            .conn()
            .query_row(
                "SELECT value FROM app_settings WHERE key = ?1",
                [KEY],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        Ok(json
            .and_then(|j| serde_json::from_str(&j).ok())
            .unwrap_or_default())
    }

    pub fn set_app_settings(&self, settings: &AppSettings) -> Result<AppSettings> {
        let settings = settings.clone().checked();
        let json = serde_json::to_string(&settings).map_err(json_err)?;
        self.conn()
            .execute(
                "INSERT INTO app_settings (key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [KEY, json.as_str()],
            )
            .map_err(db_err)?;
        Ok(settings)
    }
}
