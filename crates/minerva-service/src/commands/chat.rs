//! The commands of the Models and Chat screens: cards, loads, the models found on disk, and
//! conversations with their messages, replies and settings.

use super::{answer, args, failed, Answer, Caller};
use crate::{Conversation, ModelInfo, Service, Settings};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// A conversation with the tokens its last reply left in the context, for the gauge.
#[derive(Serialize)]
struct ConversationView {
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

/// The reply started: events of kind text, reasoning, done or error follow, with this id.
#[derive(Serialize)]
struct ReplyStarted {
    message_id: u64,
}

#[derive(Serialize)]
struct Status {
    model: Option<ModelInfo>,
    memory_used_bytes: Option<u64>,
}

#[derive(Deserialize)]
struct OpenModel {
    path: String,
    backend: Option<String>,
}

#[derive(Deserialize)]
struct LoadModel {
    path: String,
    backend: Option<String>,
    ctx: Option<usize>,
}

#[derive(Deserialize)]
struct LoadId {
    load_id: u64,
}

#[derive(Deserialize)]
struct ModelId {
    id: u64,
}

#[derive(Deserialize)]
struct Query {
    query: Option<String>,
}

#[derive(Deserialize)]
struct NewConversation {
    model_path: Option<String>,
    settings: Option<Settings>,
}

#[derive(Deserialize)]
struct Rename {
    id: i64,
    title: String,
}

#[derive(Deserialize)]
struct ConversationId {
    id: i64,
}

#[derive(Deserialize)]
struct OfConversation {
    conversation_id: i64,
}

#[derive(Deserialize)]
struct Send {
    conversation_id: i64,
    text: String,
}

#[derive(Deserialize)]
struct NewRemote {
    url: String,
    api_key: Option<String>,
}

#[derive(Deserialize)]
struct RemoteUrl {
    url: String,
}

#[derive(Deserialize)]
struct Edit {
    message_id: i64,
    text: String,
}

#[derive(Deserialize)]
struct NewSettings {
    conversation_id: i64,
    settings: Settings,
}

pub(super) fn call(
    svc: &Arc<Service>,
    caller: &Caller,
    command: &str,
    json: Value,
) -> Option<Answer> {
    let reply = |r: crate::Result<u64>| {
        answer(ReplyStarted {
            message_id: r.map_err(failed)?,
        })
    };
    Some(match command {
        "open_model" => (|| {
            let a: OpenModel = args(command, json)?;
            let path = caller.access.readable(&PathBuf::from(&a.path))?;
            let backend = a.backend.as_deref().unwrap_or("auto");
            answer(svc.open(&path, backend, None).map_err(failed)?)
        })(),
        "load_model" => (|| {
            let a: LoadModel = args(command, json)?;
            let path = caller.access.readable(&PathBuf::from(&a.path))?;
            // What the UI leaves open comes from the app's settings.
            let settings = svc.store().app_settings().unwrap_or_default();
            let backend = a.backend.unwrap_or(settings.adapter);
            let load_id = svc.start_load(path, backend, a.ctx.or(settings.default_ctx));
            answer(serde_json::json!({ "load_id": load_id }))
        })(),
        "cancel_load" => {
            args::<LoadId>(command, json).and_then(|a| answer(svc.cancel_load(a.load_id)))
        }
        "unload_model" => {
            args::<ModelId>(command, json).and_then(|a| answer(svc.unload(a.id).map_err(failed)?))
        }
        "adapters" => answer(svc.adapters()),
        "loaded_models" => answer(svc.loaded()),
        "found_models" => answer(svc.found_models_for(&caller.access)),
        // A line per bad entry of the catalogue files (`file:line: what`).
        "catalogue_problems" => answer(svc.catalogue().problems),
        "list_conversations" => (|| {
            let a: Query = args(command, json)?;
            let q = a.query.filter(|q| !q.trim().is_empty());
            let list = svc.store().conversations(q.as_deref()).map_err(failed)?;
            answer(list.into_iter().map(|c| view(svc, c)).collect::<Vec<_>>())
        })(),
        "create_conversation" => (|| {
            let a: NewConversation = args(command, json)?;
            let c = svc
                .create_conversation(a.model_path.as_deref(), a.settings)
                .map_err(failed)?;
            answer(view(svc, c))
        })(),
        "rename_conversation" => args::<Rename>(command, json).and_then(|a| {
            answer(
                svc.store()
                    .rename_conversation(a.id, &a.title)
                    .map_err(failed)?,
            )
        }),
        "delete_conversation" => args::<ConversationId>(command, json).and_then(|a| {
            svc.stop(a.id);
            answer(svc.store().delete_conversation(a.id).map_err(failed)?)
        }),
        "get_messages" => args::<OfConversation>(command, json)
            .and_then(|a| answer(svc.store().messages(a.conversation_id).map_err(failed)?)),
        "send_message" => {
            args::<Send>(command, json).and_then(|a| reply(svc.send(a.conversation_id, &a.text)))
        }
        "regenerate" => args::<OfConversation>(command, json)
            .and_then(|a| reply(svc.regenerate(a.conversation_id))),
        "edit_message" => {
            args::<Edit>(command, json).and_then(|a| reply(svc.edit(a.message_id, &a.text)))
        }
        "stop" => {
            args::<OfConversation>(command, json).and_then(|a| answer(svc.stop(a.conversation_id)))
        }
        "update_settings" => args::<NewSettings>(command, json).and_then(|a| {
            answer(
                svc.store()
                    .set_settings(a.conversation_id, &a.settings)
                    .map_err(failed)?,
            )
        }),
        "add_remote_engine" => args::<NewRemote>(command, json).and_then(|a| {
            answer(
                svc.add_remote_engine(&a.url, a.api_key.as_deref())
                    .map_err(failed)?,
            )
        }),
        "remove_remote_engine" => args::<RemoteUrl>(command, json)
            .and_then(|a| answer(svc.remove_remote_engine(&a.url).map_err(failed)?)),
        "remote_engines" => answer(svc.remote_engines()),
        "status" => answer(Status {
            model: svc.loaded().pop(),
            memory_used_bytes: minerva_bench::measure::memory_status("VmRSS"),
        }),
        _ => return None,
    })
}
