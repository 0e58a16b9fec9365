//! Completions without a stored conversation (what an OpenAI-compatible server answers):
//! messages or a raw prompt turned into ids, checked against the context before anything runs,
//! queued on the model's session behind the requests before it, and streamed back as reasoning,
//! answer text and per-token log-probabilities. Dropping a [`Completion`] cancels it.

use crate::error::{Result, ServiceError};
use crate::models::LoadedModel;
use crate::reply::ReplyText;
use minerva_engine::session::TextStream;
use minerva_engine::{Event, Request, SamplerConfig, StopReason, TokenLogprobs};
use minerva_text::{Message, OutputPiece};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

/// What to complete.
#[derive(Debug, Clone)]
pub enum CompletionPrompt {
    /// Rendered with the model's chat template, the assistant's turn opened.
    Chat(Vec<Message>),
    /// Taken as it is (the tokenizer adds its start token where the model wants one).
    Text(String),
}

#[derive(Debug, Clone)]
pub struct CompletionRequest {
    pub prompt: CompletionPrompt,
    /// None: up to the end of the context.
    pub max_tokens: Option<usize>,
    pub sampler: SamplerConfig,
    /// The answer ends before the first of these.
    pub stop: Vec<String>,
    /// `Some(n)`: each token's log-probability with its `n` best alternatives.
    pub logprobs: Option<usize>,
}

/// A generated token's log-probabilities, with token texts.
#[derive(Debug, Clone, PartialEq)]
pub struct LogprobView {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top: Vec<(String, f32, Vec<u8>)>,
}

/// How a completion ended, OpenAI's words: `stop` (a stop token or string), `length`
/// (max_tokens or the context), `cancelled`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionDone {
    pub finish_reason: &'static str,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub time_to_first_token_ms: f64,
    pub decode_tokens_per_s: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CompletionEvent {
    Reasoning(String),
    Text(String),
    Logprob(LogprobView),
    Done(CompletionDone),
    Error(String),
}

/// A completion under way: read its events with [`Completion::next`].
pub struct Completion {
    pub prompt_tokens: usize,
    pub max_tokens: usize,
    model: Arc<LoadedModel>,
    events: UnboundedReceiver<Event>,
    text: ReplyText,
    cancel: Arc<AtomicBool>,
    /// Events decoded but not yet handed out.
    ready: std::collections::VecDeque<CompletionEvent>,
    generated: usize,
    /// The token before the next one (the prompt's last, then each generated one): token texts
    /// are read in its context, so that a leading space is kept.
    last_id: u32,
    started: bool,
    ended: bool,
}

/// Queues a completion on a loaded model. A prompt that does not leave room for `max_tokens`
/// in the context is refused with the numbers ([`ServiceError::ContextFull`]); nothing is cut.
pub fn start(model: Arc<LoadedModel>, req: CompletionRequest) -> Result<Completion> {
    let local = model.local()?;
    let prep = &local.prep;
    let text = match &req.prompt {
        CompletionPrompt::Chat(messages) => prep.builder.render(messages, true)?,
        CompletionPrompt::Text(t) => t.clone(),
    };
    let prompt = match &req.prompt {
        CompletionPrompt::Chat(_) => prep.builder.encode(&prep.tokenizer, &text)?,
        CompletionPrompt::Text(_) => prep.tokenizer.encode(&text, true)?,
    };
    if prompt.is_empty() {
        return Err(ServiceError::Invalid("the prompt is empty".into()));
    }
    let ctx = model.info.ctx;
    let max_tokens = match req.max_tokens {
        Some(n) if prompt.len() + n > ctx => {
            return Err(ServiceError::ContextFull {
                ctx,
                needed: prompt.len() + n,
            })
        }
        Some(n) => n,
        None if prompt.len() >= ctx => {
            return Err(ServiceError::ContextFull {
                ctx,
                needed: prompt.len() + 1,
            })
        }
        None => ctx - prompt.len(),
    };
    let prompt_tokens = prompt.len();
    let last_id = prompt[prompt.len() - 1];
    let engine_req = Request {
        prompt,
        max_tokens,
        sampler: req.sampler,
        stop: prep.stop.clone(),
        logprobs: req.logprobs,
    };
    // Special tokens stay in the text: the splitter reads harmony channels from them.
    let stream = TextStream::new(prep.tokenizer.clone(), false);
    let (events, cancel) = local.session.generate(engine_req, Box::new(stream));
    let text = ReplyText::new(prep, req.stop);
    Ok(Completion {
        prompt_tokens,
        max_tokens,
        model,
        events,
        text,
        cancel,
        ready: Default::default(),
        generated: 0,
        last_id,
        started: false,
        ended: false,
    })
}

impl Completion {
    /// The next event; None after `Done` or `Error`.
    pub async fn next(&mut self) -> Option<CompletionEvent> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Some(e);
            }
            if self.ended {
                return None;
            }
            let event = self.events.recv().await;
            self.take(event);
        }
    }

    /// [`Completion::next`] for callers on plain threads.
    pub fn blocking_next(&mut self) -> Option<CompletionEvent> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Some(e);
            }
            if self.ended {
                return None;
            }
            let event = self.events.blocking_recv();
            self.take(event);
        }
    }

    /// True once the session has begun this completion (it is no longer queued).
    pub fn started(&self) -> bool {
        self.started
    }

    /// Stops the generation within one token.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    fn take(&mut self, event: Option<Event>) {
        self.started = true;
        let Some(event) = event else {
            self.end_with_error("the model's session stopped".into());
            return;
        };
        match &event {
            Event::Logprobs(l) => {
                let view = self.view(l);
                self.ready.push_back(CompletionEvent::Logprob(view));
                return;
            }
            Event::Token { id, .. } => {
                self.generated += 1;
                self.last_id = *id;
            }
            Event::Done { stats } => {
                let pieces = self.text.finish();
                self.push_pieces(pieces);
                let finish_reason = match stats.stop_reason {
                    StopReason::Stop => "stop",
                    StopReason::MaxTokens | StopReason::ContextFull => "length",
                    StopReason::Cancelled => "cancelled",
                };
                self.ready.push_back(CompletionEvent::Done(CompletionDone {
                    finish_reason,
                    prompt_tokens: stats.prompt_tokens,
                    completion_tokens: stats.generated_tokens,
                    time_to_first_token_ms: stats.time_to_first_token_ms,
                    decode_tokens_per_s: stats.decode_tokens_per_s,
                }));
                self.ended = true;
                return;
            }
            Event::Error(message) => {
                self.end_with_error(ServiceError::Engine(message.clone()).to_string());
                return;
            }
            Event::Text(_) => {}
        }
        let pieces = self.text.push(&event);
        self.push_pieces(pieces);
        // A stop string ends the completion here: the session is told to stop and what it
        // still sends is not read.
        if self.text.stopped() {
            self.cancel();
            let pieces = self.text.finish();
            self.push_pieces(pieces);
            self.ready.push_back(CompletionEvent::Done(CompletionDone {
                finish_reason: "stop",
                prompt_tokens: self.prompt_tokens,
                completion_tokens: self.generated,
                time_to_first_token_ms: 0.0,
                decode_tokens_per_s: 0.0,
            }));
            self.ended = true;
        }
    }

    fn push_pieces(&mut self, pieces: Vec<OutputPiece>) {
        for p in pieces {
            self.ready.push_back(match p {
                OutputPiece::Answer(t) => CompletionEvent::Text(t),
                OutputPiece::Reasoning(t) => CompletionEvent::Reasoning(t),
            });
        }
    }

    fn end_with_error(&mut self, message: String) {
        self.ready.push_back(CompletionEvent::Error(message));
        self.ended = true;
    }

    fn view(&self, l: &TokenLogprobs) -> LogprobView {
        let Ok(local) = self.model.local() else {
            return LogprobView {
                token: String::new(),
                logprob: l.logprob,
                bytes: Vec::new(),
                top: Vec::new(),
            };
        };
        let tokenizer = &local.prep.tokenizer;
        // A token's text after the one before it, less that one's: decoded alone, a
        // SentencePiece token loses its leading space.
        let before = tokenizer.decode(&[self.last_id], false).unwrap_or_default();
        let text = |id: u32| {
            let pair = tokenizer
                .decode(&[self.last_id, id], false)
                .unwrap_or_default();
            let t = match pair.strip_prefix(before.as_str()) {
                Some(rest) if !before.contains('\u{fffd}') => rest.to_string(),
                _ => tokenizer.decode(&[id], false).unwrap_or_default(),
            };
            let bytes = t.as_bytes().to_vec();
            (t, bytes)
        };
        let (token, bytes) = text(l.id);
        LogprobView {
            token,
            logprob: l.logprob,
            bytes,
            top: l
                .top
                .iter()
                .map(|&(id, lp)| {
                    let (t, b) = text(id);
                    (t, lp, b)
                })
                .collect(),
        }
    }
}

impl Drop for Completion {
    /// A client that goes away stops its generation.
    fn drop(&mut self) {
        if !self.ended {
            self.cancel();
        }
    }
}
