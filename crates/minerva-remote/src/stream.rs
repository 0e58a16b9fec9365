//! What a reply's stream (a chat's or a completion's) becomes: read on a thread of its own
//! into events, and the events decoded into deltas and the way the reply ended.

use std::io::BufReader;
use std::sync::mpsc::SyncSender;

use reqwest::blocking::RequestBuilder;

use super::http::is_json;
use super::sse::{self, SseEvent, SseParser};
use super::{wire, RemoteDelta, RemoteDone, RemoteEngine, MAX_BODY};
use crate::error::{RemoteError, Result};

/// What the thread reading a stream hands to the caller's thread.
pub(super) enum Item {
    Event(SseEvent),
    /// An answer sent whole, as JSON, by a server that ignored `stream: true`.
    Whole(String),
    Failed(RemoteError),
}

impl RemoteEngine {
    /// Sends the request and reads its stream into `tx`, until the end, `[DONE]`, an error, or
    /// the caller hanging up (which drops the response and so closes the connection).
    pub(super) fn stream(&self, request: RequestBuilder, model: &str, tx: SyncSender<Item>) {
        let response = match self.send(request).and_then(|r| self.check(r, Some(model))) {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Item::Failed(e));
                return;
            }
        };
        if is_json(&response) {
            let item = match self.read_body(response, MAX_BODY) {
                Ok(body) => Item::Whole(body),
                Err(e) => Item::Failed(e),
            };
            let _ = tx.send(item);
            return;
        }
        let mut lines = sse::Lines::new(BufReader::new(response), sse::MAX_LINE);
        let mut parser = SseParser::new();
        loop {
            let line = match lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => {
                    if let Some(event) = parser.finish() {
                        let _ = tx.send(Item::Event(event));
                    }
                    return;
                }
                Err(e) => {
                    let _ = tx.send(Item::Failed(self.broken(&e)));
                    return;
                }
            };
            // `[DONE]` ends the reply at once, whether or not a blank line follows it and
            // however long the server then keeps the connection open.
            let is_done = line.strip_prefix("data:").map(str::trim) == Some("[DONE]");
            let mut events: Vec<SseEvent> = Vec::new();
            if is_done {
                events.extend(parser.finish());
                events.push(done_event());
            } else {
                events.extend(parser.line(&line));
            }
            for event in events {
                if tx.send(Item::Event(event)).is_err() {
                    return;
                }
            }
            if is_done {
                return;
            }
        }
    }

    /// Handles one event; true when it ends the reply.
    pub(super) fn event(
        &self,
        event: SseEvent,
        done: &mut RemoteDone,
        on: &mut dyn FnMut(RemoteDelta),
    ) -> Result<bool> {
        match event.event.as_str() {
            // Older llama.cpp servers report a failure as an event of its own.
            "error" => Err(self.failed_mid_stream(wire::error_message(&event.data))),
            "" | "message" => {
                let data = event.data.trim();
                if data == "[DONE]" {
                    return Ok(true);
                }
                self.data(data, done, on)?;
                Ok(false)
            }
            // Named events of other kinds are not part of a reply.
            _ => Ok(false),
        }
    }

    /// Decodes an event's data: one chunk, or (from a server that leaves out the blank lines
    /// between events) one chunk per line.
    pub(super) fn data(
        &self,
        data: &str,
        done: &mut RemoteDone,
        on: &mut dyn FnMut(RemoteDelta),
    ) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let chunks = match serde_json::from_str::<wire::Chunk>(data) {
            Ok(chunk) => vec![chunk],
            Err(e) if data.contains('\n') => data
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l.trim_start_matches("data:")))
                .collect::<std::result::Result<Vec<wire::Chunk>, _>>()
                .map_err(|_| self.malformed(data, &e))?,
            Err(e) => return Err(self.malformed(data, &e)),
        };
        for chunk in chunks {
            self.chunk(chunk, done, on)?;
        }
        Ok(())
    }

    pub(super) fn chunk(
        &self,
        chunk: wire::Chunk,
        done: &mut RemoteDone,
        on: &mut dyn FnMut(RemoteDelta),
    ) -> Result<()> {
        if let Some(error) = chunk.error {
            return Err(self.failed_mid_stream(wire::message_of(&error)));
        }
        if let Some(usage) = chunk.usage {
            done.prompt_tokens = usage.prompt_tokens.or(done.prompt_tokens);
            done.completion_tokens = usage.completion_tokens.or(done.completion_tokens);
        }
        // Only one reply is asked for; other choices would belong to other replies.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(mut delta) = choice.delta {
                if let Some(text) = delta.reasoning().filter(|t| !t.is_empty()) {
                    on(RemoteDelta::Reasoning(text));
                }
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    on(RemoteDelta::Content(text));
                }
            }
            if let Some(text) = choice.text.filter(|t| !t.is_empty()) {
                on(RemoteDelta::Content(text));
            }
            for token in choice.logprobs.map(|l| l.into_tokens()).unwrap_or_default() {
                on(RemoteDelta::Logprob(token));
            }
            if choice.finish_reason.is_some() {
                done.finish_reason = choice.finish_reason;
            }
        }
        Ok(())
    }
}

fn done_event() -> SseEvent {
    SseEvent {
        event: String::new(),
        data: "[DONE]".into(),
    }
}
