//! One reply of a conversation: its messages rendered with the model's chat template, the turn
//! run on the model's session (which computes only the tokens its cache lacks), the streamed
//! text split into reasoning and answer and sent in batches, the finished reply stored.

use crate::error::{Result, ServiceError};
use crate::events::{ChatEvent, ChatPiece, ServiceEvent, Sink};
use crate::models::{ChatPrep, LoadedModel};
use crate::reply::ReplyText;
use crate::settings::Settings;
use crate::store::{Conversation, Role, Stats, Store};
use minerva_engine::session::TextStream;
use minerva_engine::{Event, Request};
use minerva_text::{Message, OutputPiece};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Text is sent at most this often while a reply streams (a UI repaints once per frame).
const BATCH: Duration = Duration::from_millis(25);

/// The prompt ids of a conversation's messages, with the settings' system prompt first and the
/// assistant's turn opened.
pub fn prompt_ids(
    prep: &ChatPrep,
    settings: &Settings,
    messages: &[crate::store::Message],
) -> Result<Vec<u32>> {
    let mut chat = Vec::with_capacity(messages.len() + 1);
    if !settings.system_prompt.trim().is_empty() {
        chat.push(Message::system(settings.system_prompt.clone()));
    }
    for m in messages {
        chat.push(match m.role {
            Role::System => Message::system(m.content.clone()),
            Role::User => Message::user(m.content.clone()),
            Role::Assistant => Message::assistant(m.content.clone()),
        });
    }
    let text = prep.builder.render(&chat, true)?;
    Ok(prep.builder.encode(&prep.tokenizer, &text)?)
}

/// A reply to start: everything the thread that runs it needs.
pub struct Turn {
    pub turn_id: u64,
    pub conversation: Conversation,
    pub model: Arc<LoadedModel>,
    pub store: Arc<Store>,
    pub sink: Sink,
}

/// Queues the reply on the model's session and returns its cancel flag; a thread forwards its
/// events and stores the reply when it ends. A prompt longer than the context is refused here,
/// in words, before anything runs.
pub fn start(turn: Turn) -> Result<Arc<AtomicBool>> {
    let conv = &turn.conversation;
    let messages = turn.store.messages(conv.id)?;
    let prep = &turn.model.prep;
    let prompt = prompt_ids(prep, &conv.settings, &messages)?;
    let ctx = turn.model.info.ctx;
    if prompt.len() >= ctx {
        return Err(ServiceError::ContextFull {
            ctx,
            needed: prompt.len() + 1,
        });
    }
    let fresh_seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let req = Request {
        prompt,
        max_tokens: conv.settings.max_tokens.max(1),
        sampler: conv.settings.sampler(fresh_seed),
        stop: prep.stop.clone(),
        logprobs: None,
    };
    // Special tokens stay in the text: the splitter reads harmony channels from them.
    let text = TextStream::new(prep.tokenizer.clone(), false);
    let (events, cancel) = turn.model.session.generate(req, Box::new(text));
    std::thread::spawn(move || forward(turn, events));
    Ok(cancel)
}

/// Text gathered between sends.
#[derive(Default)]
struct Pending {
    answer: String,
    reasoning: String,
}

fn forward(turn: Turn, mut events: tokio::sync::mpsc::UnboundedReceiver<Event>) {
    let send = |piece: ChatPiece| {
        (turn.sink)(ServiceEvent::Chat(ChatEvent {
            conversation_id: turn.conversation.id,
            turn_id: turn.turn_id,
            piece,
        }))
    };
    let flush = |p: &mut Pending| {
        if !p.reasoning.is_empty() {
            send(ChatPiece::Reasoning {
                text: std::mem::take(&mut p.reasoning),
            });
        }
        if !p.answer.is_empty() {
            send(ChatPiece::Text {
                text: std::mem::take(&mut p.answer),
            });
        }
    };
    let mut text = ReplyText::new(&turn.model.prep, Vec::new());
    let (mut answer, mut reasoning) = (String::new(), String::new());
    let mut pending = Pending::default();
    let mut last_send = Instant::now();
    let mut take = |pieces: Vec<OutputPiece>, pending: &mut Pending| {
        for piece in pieces {
            match piece {
                OutputPiece::Answer(t) => {
                    answer.push_str(&t);
                    pending.answer.push_str(&t);
                }
                OutputPiece::Reasoning(t) => {
                    reasoning.push_str(&t);
                    pending.reasoning.push_str(&t);
                }
            }
        }
    };
    let stats = loop {
        match events.blocking_recv() {
            Some(Event::Done { stats }) => {
                take(text.finish(), &mut pending);
                flush(&mut pending);
                break stats;
            }
            Some(Event::Error(message)) => {
                flush(&mut pending);
                send(ChatPiece::Error {
                    message: ServiceError::Engine(message).to_string(),
                });
                return;
            }
            Some(event) => {
                take(text.push(&event), &mut pending);
                if last_send.elapsed() >= BATCH {
                    flush(&mut pending);
                    last_send = Instant::now();
                }
            }
            None => {
                send(ChatPiece::Error {
                    message: "the model's session stopped".into(),
                });
                return;
            }
        }
    };
    let stats = Stats {
        prompt_tokens: stats.prompt_tokens,
        prefill_tokens: stats.prefill_tokens,
        generated_tokens: stats.generated_tokens,
        time_to_first_token_ms: stats.time_to_first_token_ms,
        prefill_tokens_per_s: stats.prefill_tokens_per_s,
        decode_tokens_per_s: stats.decode_tokens_per_s,
        stop_reason: stats.stop_reason.name().to_string(),
    };
    let reasoning = reasoning.trim();
    let stored = turn.store.add_message(
        turn.conversation.id,
        Role::Assistant,
        answer.trim_end(),
        (!reasoning.is_empty()).then_some(reasoning),
        Some(&stats),
        Some(&turn.conversation.settings),
    );
    match stored {
        Ok(message) => send(ChatPiece::Done { message }),
        Err(e) => send(ChatPiece::Error {
            message: e.to_string(),
        }),
    }
}
