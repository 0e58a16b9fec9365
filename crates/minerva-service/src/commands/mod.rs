//! The commands a UI sends, by name with JSON arguments, for every transport: the app's window
//! (one Tauri command) and a browser through `minerva serve --ui` (one HTTP route). Each is a
//! thin call into the [`Service`]; arguments are snake_case as the UI sends them. A browser may
//! reach only the models and folders its server was started with ([`Access::Served`]).

mod bench;
mod chat;

use crate::Service;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Which files a caller may name.
#[derive(Debug, Clone)]
pub enum Access {
    /// The app's own window: the user's files are theirs to open.
    Local,
    /// A browser through the server: only these models (files or folders) and what lies in
    /// these folders; nothing is written to the server's disk on its behalf.
    Served {
        models: Vec<PathBuf>,
        folders: Vec<PathBuf>,
    },
}

impl Access {
    /// `path` (or a catalogue id's file) when this caller may read it.
    pub fn readable(&self, path: &Path) -> Result<PathBuf, CommandError> {
        // A remote engine's model: loading it checks that its engine was added.
        if crate::sources::parse_remote_path(path).is_some() {
            return Ok(path.to_path_buf());
        }
        let resolved = crate::catalogue::resolve(path).map_err(failed)?;
        let Access::Served { models, folders } = self else {
            return Ok(resolved);
        };
        let refused = || {
            CommandError::Refused(format!(
                "{} is not among the models this server was started with or the folders it \
                 allows (minerva serve --model, --allow-folder)",
                path.display()
            ))
        };
        let real = resolved.canonicalize().map_err(|_| refused())?;
        let canon = |p: &PathBuf| p.canonicalize().ok();
        let ok = models.iter().filter_map(canon).any(|m| m == real)
            || folders
                .iter()
                .filter_map(canon)
                .any(|f| real.starts_with(f));
        ok.then_some(resolved).ok_or_else(refused)
    }

    /// Refuses what would write a file on the server's disk for a browser.
    fn writes_files(&self, what: &str) -> Result<(), CommandError> {
        match self {
            Access::Local => Ok(()),
            Access::Served { .. } => Err(CommandError::Refused(format!(
                "{what} writes a file on the server's disk, which a browser may not do: \
                 download it from the page instead"
            ))),
        }
    }
}

/// Who calls, and what the front end shows of where data lives.
#[derive(Debug, Clone)]
pub struct Caller {
    pub access: Access,
    /// The folder of the database, for the settings screen.
    pub data_folder: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CommandError {
    /// No command of that name.
    Unknown(String),
    /// The arguments do not fit the command.
    BadArguments(String),
    /// The caller may not do this.
    Refused(String),
    /// The service could not do it (the words say why).
    Failed(String),
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandError::Unknown(c) => write!(f, "no command '{c}'"),
            CommandError::BadArguments(m) | CommandError::Refused(m) | CommandError::Failed(m) => {
                f.write_str(m)
            }
        }
    }
}

pub(crate) fn failed<E: std::fmt::Display>(e: E) -> CommandError {
    CommandError::Failed(e.to_string())
}

pub(crate) type Answer = Result<Value, CommandError>;

/// Arguments of `command`, read from the JSON object the UI sent.
pub(crate) fn args<T: DeserializeOwned>(command: &str, args: Value) -> Result<T, CommandError> {
    let args = if args.is_null() {
        Value::Object(Default::default())
    } else {
        args
    };
    serde_json::from_value(args).map_err(|e| CommandError::BadArguments(format!("{command}: {e}")))
}

pub(crate) fn answer<T: Serialize>(value: T) -> Answer {
    serde_json::to_value(value).map_err(failed)
}

/// Runs one command on this thread (it may read model files and write SQLite: call it off
/// any thread that draws or serves).
pub fn call(svc: &Arc<Service>, caller: &Caller, command: &str, json: Value) -> Answer {
    if let Some(a) = chat::call(svc, caller, command, json.clone()) {
        return a;
    }
    if let Some(a) = bench::call(svc, caller, command, json) {
        return a;
    }
    Err(CommandError::Unknown(command.to_string()))
}
