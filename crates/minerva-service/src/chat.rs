//! One reply of a conversation: its messages rendered with the model's chat template, the turn
//! run on the model's session (which computes only the tokens its cache lacks), the streamed
//! text split into reasoning and answer and sent in batches, the finished reply stored.

use crate::error::{Result, ServiceError};
use crate::events::{ChatEvent, ChatPiece, ServiceEvent, Sink};
use crate::models::{ChatPrep, Engine, LoadedModel};
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

/// A conversation's messages as a chat, with the settings' system prompt first.
pub fn chat_messages(settings: &Settings, messages: &[crate::store::Message]) -> Vec<Message> {
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
    chat
}

/// The prompt ids of a conversation's messages, with the settings' system prompt first and the
/// assistant's turn opened.
pub fn prompt_ids(
    prep: &ChatPrep,
    settings: &Settings,
    messages: &[crate::store::Message],
) -> Result<Vec<u32>> {
    let text = prep
        .builder
        .render(&chat_messages(settings, messages), true)?;
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

/// Starts the reply and returns its cancel flag; a thread streams it and stores it when it
/// ends. On this machine the turn is queued on the model's session, and a prompt longer than
/// the context is refused here, in words, before anything runs; a remote engine's model is
/// asked over HTTP ([`crate::sources`]).
pub fn start(turn: Turn) -> Result<Arc<AtomicBool>> {
    let local = match &turn.model.engine {
        Engine::Local(local) => local,
        Engine::Remote { .. } => return crate::sources::start_turn(turn),
    };
    let conv = &turn.conversation;
    let messages = turn.store.messages(conv.id)?;
    let prep = &local.prep;
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
    let (events, cancel) = local.session.generate(req, Box::new(text));
    let text = ReplyText::new(prep, Vec::new());
    std::thread::spawn(move || forward(Writer::new(turn), text, events));
    Ok(cancel)
}

/// Writes a reply as it streams: its pieces sent in batches, then stored with its stats.
pub(crate) struct Writer {
    turn: Turn,
    answer: String,
    reasoning: String,
    /// Text gathered since the last send.
    pending_answer: String,
    pending_reasoning: String,
    last_send: Instant,
}

impl Writer {
    pub(crate) fn new(turn: Turn) -> Writer {
        Writer {
            turn,
            answer: String::new(),
            reasoning: String::new(),
            pending_answer: String::new(),
            pending_reasoning: String::new(),
            last_send: Instant::now(),
        }
    }

    fn send(&self, piece: ChatPiece) {
        (self.turn.sink)(ServiceEvent::Chat(ChatEvent {
            conversation_id: self.turn.conversation.id,
            turn_id: self.turn.turn_id,
            piece,
        }))
    }

    /// Takes a piece of the reply; sends what has gathered when a batch is due.
    pub(crate) fn take(&mut self, piece: OutputPiece) {
        match piece {
            OutputPiece::Answer(t) => {
                self.answer.push_str(&t);
                self.pending_answer.push_str(&t);
            }
            OutputPiece::Reasoning(t) => {
                self.reasoning.push_str(&t);
                self.pending_reasoning.push_str(&t);
            }
        }
        if self.last_send.elapsed() >= BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.pending_reasoning.is_empty() {
            let text = std::mem::take(&mut self.pending_reasoning);
            self.send(ChatPiece::Reasoning { text });
        }
        if !self.pending_answer.is_empty() {
            let text = std::mem::take(&mut self.pending_answer);
            self.send(ChatPiece::Text { text });
        }
        self.last_send = Instant::now();
    }

    /// Ends the reply with an error; what was sent stays on screen, nothing is stored.
    pub(crate) fn fail(mut self, message: String) {
        self.flush();
        self.send(ChatPiece::Error { message });
    }

    /// Stores the reply with its stats and tells the front end.
    pub(crate) fn finish(mut self, stats: Stats) {
        self.flush();
        let reasoning = self.reasoning.trim();
        let stored = self.turn.store.add_message(
            self.turn.conversation.id,
            Role::Assistant,
            self.answer.trim_end(),
            (!reasoning.is_empty()).then_some(reasoning),
            Some(&stats),
            Some(&self.turn.conversation.settings),
        );
        match stored {
            Ok(message) => self.send(ChatPiece::Done { message }),
            Err(e) => self.send(ChatPiece::Error {
                message: e.to_string(),
            }),
        }
    }
}

fn forward(
    mut writer: Writer,
    mut text: ReplyText,
    mut events: tokio::sync::mpsc::UnboundedReceiver<Event>,
) {
    let stats = loop {
        match events.blocking_recv() {
            Some(Event::Done { stats }) => {
                text.finish().into_iter().for_each(|p| writer.take(p));
                break stats;
            }
            Some(Event::Error(message)) => {
                return writer.fail(ServiceError::Engine(message).to_string());
            }
            Some(event) => text.push(&event).into_iter().for_each(|p| writer.take(p)),
            None => return writer.fail("the model's session stopped".into()),
        }
    };
    writer.finish(Stats {
        prompt_tokens: stats.prompt_tokens,
        prefill_tokens: stats.prefill_tokens,
        generated_tokens: stats.generated_tokens,
        time_to_first_token_ms: stats.time_to_first_token_ms,
        prefill_tokens_per_s: stats.prefill_tokens_per_s,
        decode_tokens_per_s: stats.decode_tokens_per_s,
        stop_reason: stats.stop_reason.name().to_string(),
    });
}
