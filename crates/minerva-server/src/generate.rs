//! `POST /v1/chat/completions` and `POST /v1/completions`: a request checked and turned into
//! the service's completion, queued on its model, and answered whole or streamed as
//! server-sent events (reasoning apart as `reasoning_content`, usage in the last chunk,
//! `data: [DONE]` at the end). A client that goes away drops its completion, which stops it.
//!
//! Requests to one model run one after the other, in the order they came: each model's
//! session takes one turn at a time. Continuous batching would go in the engine's session
//! (several caches stepped together), with nothing here changing but the queue's length.

use crate::error::ApiError;
use crate::openai::{self, ChatRequest, Common, Content, Usage};
use crate::Shared;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use minerva_service::{
    Completion, CompletionEvent, CompletionPrompt, CompletionRequest, LogprobView,
};
use minerva_text::Message;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Which endpoint a completion answers: they differ in their JSON only.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Text,
}

/// The body as JSON of type T, or the error a client should see.
fn parse<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(limit)
        } else {
            ApiError::invalid(e.body_text())
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid(format!("the request body is not a valid request: {e}")))
}

pub async fn chat(
    State(state): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ChatRequest = parse(body, state.body_limit)?;
    let messages = req
        .messages
        .iter()
        .map(|m| {
            let role = match m.role.as_str() {
                "system" | "developer" => "system",
                "user" => "user",
                "assistant" => "assistant",
                other => {
                    return Err(ApiError::invalid(format!(
                        "messages: the role '{other}' is not supported (system, developer, user, assistant)"
                    )))
                }
            };
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(t)) => t.clone(),
                Some(Content::Parts(parts)) => parts
                    .iter()
                    .filter(|p| p.kind == "text")
                    .filter_map(|p| p.text.as_deref())
                    .collect::<Vec<_>>()
                    .join("\n"),
            };
            Ok(Message::new(role, content))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "messages: at least one message is needed",
        ));
    }
    let logprobs = match (req.logprobs, req.top_logprobs) {
        (true, n) => Some(n.unwrap_or(0)),
        (false, Some(_)) => return Err(ApiError::invalid("top_logprobs needs logprobs: true")),
        (false, None) => None,
    };
    run(
        state,
        Kind::Chat,
        &req.common,
        CompletionPrompt::Chat(messages),
        logprobs,
    )
    .await
}

pub async fn completions(
    State(state): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: openai::CompletionRequest = parse(body, state.body_limit)?;
    let mut prompts = req.prompt.into_vec();
    if prompts.len() != 1 {
        return Err(ApiError::invalid("prompt: one prompt per request"));
    }
    let prompt = CompletionPrompt::Text(prompts.remove(0));
    run(state, Kind::Text, &req.common, prompt, req.logprobs).await
}

async fn run(
    state: Shared,
    kind: Kind,
    common: &Common,
    prompt: CompletionPrompt,
    logprobs: Option<usize>,
) -> Result<Response, ApiError> {
    if common.n.unwrap_or(1) != 1 {
        return Err(ApiError::invalid("n: one choice per request"));
    }
    if logprobs.is_some_and(|n| n > minerva_engine::MAX_TOP_LOGPROBS) {
        return Err(ApiError::invalid(format!(
            "at most {} top log-probabilities per token",
            minerva_engine::MAX_TOP_LOGPROBS
        )));
    }
    if common.max_tokens() == Some(0) {
        return Err(ApiError::invalid("max_tokens: at least 1"));
    }
    let arrived = Instant::now();
    let model = state.pool.model(&common.model).await?;
    let req = CompletionRequest {
        prompt,
        max_tokens: common.max_tokens(),
        sampler: common.sampler(),
        stop: common
            .stop
            .clone()
            .map(|s| s.into_vec())
            .unwrap_or_default(),
        logprobs,
    };
    let svc = state.pool.svc.clone();
    let completion = tokio::task::spawn_blocking(move || svc.complete(model.id, req))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    state
        .metrics
        .prompt_tokens
        .inc_by(completion.prompt_tokens as u64);
    let run = Running::new(state.clone(), completion, arrived);
    let head = Head {
        id: next_id(kind),
        model: model.name.clone(),
        created: openai::now(),
        kind,
    };
    if common.stream {
        Ok(stream(state, head, run).into_response())
    } else {
        whole(head, run, logprobs.is_some()).await
    }
}

/// What every response and chunk of one completion repeats.
struct Head {
    id: String,
    model: String,
    created: u64,
    kind: Kind,
}

impl Head {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Text, _) => "text_completion",
        }
    }

    fn wrap(&self, chunk: bool, choices: Value, usage: Option<Usage>) -> Value {
        let mut v = json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = json!(u);
        }
        v
    }
}

fn next_id(kind: Kind) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let prefix = if kind == Kind::Chat {
        "chatcmpl"
    } else {
        "cmpl"
    };
    format!("{prefix}-{:x}{n:04x}", openai::now())
}

/// A completion with its place in the metrics: queued until its first event, then running.
struct Running {
    state: Shared,
    completion: Completion,
    arrived: Instant,
    started: bool,
}

impl Running {
    fn new(state: Shared, completion: Completion, arrived: Instant) -> Running {
        state.metrics.queued.inc();
        Running {
            state,
            completion,
            arrived,
            started: false,
        }
    }

    async fn next(&mut self) -> Option<CompletionEvent> {
        let e = self.completion.next().await;
        if !self.started {
            self.started = true;
            let m = &self.state.metrics;
            m.queued.dec();
            m.running.inc();
            m.time_to_first_token
                .observe(self.arrived.elapsed().as_secs_f64());
        }
        if let Some(CompletionEvent::Done(d)) = &e {
            let m = &self.state.metrics;
            m.generated_tokens.inc_by(d.completion_tokens as u64);
            if d.decode_tokens_per_s > 0.0 {
                m.decode_tokens_per_second.set(d.decode_tokens_per_s);
            }
        }
        e
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let m = &self.state.metrics;
        if self.started {
            m.running.dec();
        } else {
            m.queued.dec();
        }
    }
}

/// The whole answer in one response.
async fn whole(head: Head, mut run: Running, asked_logprobs: bool) -> Result<Response, ApiError> {
    let (mut text, mut reasoning, mut logprobs) = (String::new(), String::new(), Vec::new());
    let done = loop {
        match run.next().await {
            Some(CompletionEvent::Text(t)) => text.push_str(&t),
            Some(CompletionEvent::Reasoning(t)) => reasoning.push_str(&t),
            Some(CompletionEvent::Logprob(l)) => logprobs.push(l),
            Some(CompletionEvent::Done(d)) => break d,
            Some(CompletionEvent::Error(e)) => return Err(ApiError::internal(e)),
            None => return Err(ApiError::internal("the completion ended without a result")),
        }
    };
    let usage = Usage::new(done.prompt_tokens, done.completion_tokens);
    let choice = match head.kind {
        Kind::Chat => {
            let mut message = json!({"role": "assistant", "content": text});
            if !reasoning.is_empty() {
                message["reasoning_content"] = reasoning.into();
            }
            json!({
                "index": 0,
                "message": message,
                "logprobs": asked_logprobs
                    .then(|| json!({"content": logprobs.iter().map(openai::chat_logprob).collect::<Vec<_>>()})),
                "finish_reason": done.finish_reason,
            })
        }
        Kind::Text => json!({
            "index": 0,
            "text": reasoning + &text,
            "logprobs": (!logprobs.is_empty()).then(|| openai::completion_logprobs(&logprobs, 0)),
            "finish_reason": done.finish_reason,
        }),
    };
    Ok(Json(head.wrap(false, json!([choice]), Some(usage))).into_response())
}

/// What a stream has sent so far, to place each chunk.
struct Streaming {
    head: Head,
    run: Running,
    /// Log-probabilities waiting for the next chunk of text.
    logprobs: Vec<LogprobView>,
    /// Characters of text sent (the legacy API's offsets).
    sent_chars: usize,
    role_sent: bool,
    finished: bool,
}

impl Streaming {
    /// The chunk a piece of text (or reasoning) makes, with the log-probabilities since the last.
    fn text_chunk(&mut self, text: String, reasoning: bool) -> Value {
        let logprobs = std::mem::take(&mut self.logprobs);
        let choice = match self.head.kind {
            Kind::Chat => {
                let key = if reasoning {
                    "reasoning_content"
                } else {
                    "content"
                };
                json!({
                    "index": 0,
                    "delta": {key: text},
                    "logprobs": (!logprobs.is_empty())
                        .then(|| json!({"content": logprobs.iter().map(openai::chat_logprob).collect::<Vec<_>>()})),
                    "finish_reason": null,
                })
            }
            Kind::Text => {
                let lp = (!logprobs.is_empty())
                    .then(|| openai::completion_logprobs(&logprobs, self.sent_chars));
                self.sent_chars += text.chars().count();
                json!({"index": 0, "text": text, "logprobs": lp, "finish_reason": null})
            }
        };
        self.head.wrap(true, json!([choice]), None)
    }

    /// The next events to send, or None at the end.
    async fn next(&mut self) -> Option<Vec<Value>> {
        if self.finished {
            return None;
        }
        if !self.role_sent && self.head.kind == Kind::Chat {
            self.role_sent = true;
            let choice = json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null});
            return Some(vec![self.head.wrap(true, json!([choice]), None)]);
        }
        loop {
            match self.run.next().await {
                Some(CompletionEvent::Text(t)) => return Some(vec![self.text_chunk(t, false)]),
                Some(CompletionEvent::Reasoning(t)) => {
                    let as_text = self.head.kind == Kind::Text;
                    return Some(vec![self.text_chunk(t, !as_text)]);
                }
                Some(CompletionEvent::Logprob(l)) => self.logprobs.push(l),
                Some(CompletionEvent::Done(d)) => {
                    self.finished = true;
                    let mut out = Vec::new();
                    if !self.logprobs.is_empty() {
                        out.push(self.text_chunk(String::new(), false));
                    }
                    let choice = match self.head.kind {
                        Kind::Chat => {
                            json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": d.finish_reason})
                        }
                        Kind::Text => {
                            json!({"index": 0, "text": "", "logprobs": null, "finish_reason": d.finish_reason})
                        }
                    };
                    let usage = Usage::new(d.prompt_tokens, d.completion_tokens);
                    out.push(self.head.wrap(true, json!([choice]), None));
                    out.push(self.head.wrap(true, json!([]), Some(usage)));
                    return Some(out);
                }
                Some(CompletionEvent::Error(message)) => {
                    self.finished = true;
                    let e = ApiError::internal(message);
                    return Some(vec![
                        json!({"error": {"message": e.message, "type": e.kind, "code": null}}),
                    ]);
                }
                None => {
                    self.finished = true;
                    return None;
                }
            }
        }
    }
}

/// Server-sent events: one `data:` line per chunk, `[DONE]` last; the stream ends early when
/// the server shuts down, and the completion stops when the stream is dropped.
fn stream(state: Shared, head: Head, run: Running) -> impl IntoResponse {
    let streaming = Streaming {
        head,
        run,
        logprobs: Vec::new(),
        sent_chars: 0,
        role_sent: false,
        finished: false,
    };
    let chunks = futures_util::stream::unfold(Some(streaming), |s| async move {
        let mut s = s?;
        match s.next().await {
            Some(values) => {
                let events: Vec<Result<Event, Infallible>> = values
                    .into_iter()
                    .map(|v| Ok(Event::default().data(v.to_string())))
                    .collect();
                Some((futures_util::stream::iter(events), Some(s)))
            }
            None => {
                let done = vec![Ok(Event::default().data("[DONE]"))];
                Some((futures_util::stream::iter(done), None))
            }
        }
    })
    .flatten();
    let shutdown = state.shutdown.clone();
    let chunks = chunks.take_until(async move { crate::stopped(shutdown).await });
    Sse::new(chunks).keep_alive(KeepAlive::default())
}
