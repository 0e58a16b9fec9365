//! The models this server answers for: those loaded (at start with `--model`, or since), and
//! those it may load on first use (the `--model` paths and what the `--allow-folder` folders
//! hold, and catalogue ids whose files lie there). A request names a model by its id (the
//! name `/v1/models` lists), its path or its catalogue id.

use crate::error::ApiError;
use minerva_service::commands::Access;
use minerva_service::{ModelInfo, Service};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct Pool {
    pub svc: Arc<Service>,
    pub access: Access,
    pub backend: String,
    pub ctx: Option<usize>,
    /// One load at a time: two requests for a model that is not loaded load it once.
    loading: tokio::sync::Mutex<()>,
}

/// A model as `/v1/models` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// Loaded now, or loaded on first use.
    pub loaded: bool,
    pub path: PathBuf,
}

impl Pool {
    pub fn new(svc: Arc<Service>, access: Access, backend: String, ctx: Option<usize>) -> Pool {
        Pool {
            svc,
            access,
            backend,
            ctx,
            loading: tokio::sync::Mutex::new(()),
        }
    }

    /// The loaded models, then those a request may load.
    pub fn listed(&self) -> Vec<Listed> {
        let created = crate::openai::now();
        let loaded = self.svc.loaded();
        let mut out: Vec<Listed> = loaded
            .iter()
            .filter(|m| m.backend != minerva_service::sources::REMOTE)
            .map(|m| Listed {
                id: m.name.clone(),
                object: "model",
                created,
                owned_by: "minerva",
                loaded: true,
                path: m.path.clone(),
            })
            .collect();
        // Remote engines' models are the app's to chat with, not this server's to serve.
        for f in self.svc.local_models_for(&self.access) {
            if !out.iter().any(|l| l.id == f.name || l.path == f.path) {
                out.push(Listed {
                    id: f.name,
                    object: "model",
                    created,
                    owned_by: "minerva",
                    loaded: false,
                    path: f.path,
                });
            }
        }
        out
    }

    fn loaded_named(&self, name: &str) -> Option<ModelInfo> {
        self.svc
            .loaded()
            .into_iter()
            .find(|m| m.name == name || m.path == Path::new(name))
    }

    /// The loaded model a request names, loading it first when it may be.
    pub async fn model(&self, name: &str) -> Result<ModelInfo, ApiError> {
        if let Some(m) = self.loaded_named(name) {
            return Ok(m);
        }
        let _one_load = self.loading.lock().await;
        if let Some(m) = self.loaded_named(name) {
            return Ok(m);
        }
        let listed = self.listed();
        let path = match listed.iter().find(|l| l.id == name) {
            Some(l) => l.path.clone(),
            None => match self.access.readable(Path::new(name)) {
                Ok(p) if p.exists() => p,
                _ => {
                    let ids: Vec<String> = listed.into_iter().map(|l| l.id).collect();
                    return Err(ApiError::unknown_model(name, &ids));
                }
            },
        };
        self.load(path).await
    }

    /// Loads a model on a blocking thread.
    pub async fn load(&self, path: PathBuf) -> Result<ModelInfo, ApiError> {
        let svc = self.svc.clone();
        let (backend, ctx) = (self.backend.clone(), self.ctx);
        tokio::task::spawn_blocking(move || {
            svc.load_blocking(&path, &backend, ctx, &mut |_, _| true)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(ApiError::from)
    }
}
