//! What the service tells front ends as it happens: load progress, the pieces of a reply, and
//! a benchmark run's progress and end.
//! The app emits each as a Tauri event named by [`ServiceEvent::name`], the server as SSE, the
//! command line prints them.

use crate::models::ModelInfo;
use crate::store::Message;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// Where events go; called from the service's threads.
pub type Sink = Arc<dyn Fn(ServiceEvent) + Send + Sync>;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChatPiece {
    /// Answer text since the last piece.
    Text {
        text: String,
    },
    /// Reasoning text (gpt-oss `analysis`, `<think>`) since the last piece.
    Reasoning {
        text: String,
    },
    /// The reply, as stored, with its stats.
    Done {
        message: Message,
    },
    Error {
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatEvent {
    pub conversation_id: i64,
    /// The reply this piece belongs to (from `send`, `regenerate` or `edit`).
    pub turn_id: u64,
    #[serde(flatten)]
    pub piece: ChatPiece,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ServiceEvent {
    LoadProgress {
        load_id: u64,
        bytes: u64,
        total: u64,
    },
    LoadDone {
        load_id: u64,
        model: ModelInfo,
    },
    LoadError {
        load_id: u64,
        message: String,
        /// The load was cancelled rather than failed.
        cancelled: bool,
    },
    Chat(ChatEvent),
    /// A benchmark run: format `format` is at step `done` of `total`, doing `phase`.
    BenchProgress {
        job: u64,
        format: usize,
        label: String,
        done: usize,
        total: usize,
        phase: String,
    },
    /// The run ended (completely, or cancelled with what was measured) and was stored.
    BenchDone {
        job: u64,
        run: crate::bench_runs::BenchRunSummary,
    },
    BenchError {
        job: u64,
        message: String,
    },
}

impl ServiceEvent {
    /// The event's name for front ends that route by name.
    pub fn name(&self) -> &'static str {
        match self {
            ServiceEvent::LoadProgress { .. } => "load-progress",
            ServiceEvent::LoadDone { .. } => "load-done",
            ServiceEvent::LoadError { .. } => "load-error",
            ServiceEvent::Chat(_) => "chat",
            ServiceEvent::BenchProgress { .. } => "bench-progress",
            ServiceEvent::BenchDone { .. } => "bench-done",
            ServiceEvent::BenchError { .. } => "bench-error",
        }
    }
}

impl ServiceEvent {
    /// The event as the UI reads it, in the app and in a browser alike: a reply's pieces carry
    /// `message_id` (the reply being written) and `kind`; its end carries the stats.
    pub fn for_ui(&self) -> Value {
        let ServiceEvent::Chat(c) = self else {
            return serde_json::to_value(self).unwrap_or(Value::Null);
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
}
