//! A blocking client for OpenAI-compatible engines (llama.cpp's server, vLLM, another Minerva,
//! OpenAI itself): list their models and stream a chat reply or a plain completion, with a
//! cancel.

mod error;
mod http;
mod sse;
mod stream;
mod wire;

#[cfg(test)]
mod live_tests;
#[cfg(test)]
mod test_server;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use reqwest::blocking::Client;
use reqwest::header::{HeaderValue, ACCEPT};
use serde::{Deserialize, Serialize};

pub use error::{RemoteError, Result};
use http::{client, normalize};
use stream::Item;

/// A server that does not answer a connection within this is taken as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest wait for the answer's head and then for any one read of its body. A stream as
/// a whole has no time limit: a long reply is not a hung one.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a chat waiting on the server looks at its cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(20);
/// Bodies read whole (a model list, an answer that was not streamed) and error bodies.
const MAX_BODY: u64 = 8 << 20;
const MAX_ERROR_BODY: u64 = 64 << 10;

/// An OpenAI-compatible engine at a base URL such as `http://host:8080/v1`.
///
/// Its calls block the calling thread; make one outside any async runtime (its HTTP client
/// runs a runtime of its own, which may not be dropped inside another).
#[derive(Clone)]
pub struct RemoteEngine {
    /// Without a trailing `/`.
    base: String,
    /// The whole `Authorization` value, marked sensitive so it never shows in logs.
    key: Option<HeaderValue>,
    client: Client,
    read_timeout: Duration,
}

impl std::fmt::Debug for RemoteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEngine")
            .field("base", &self.base)
            .field("key", &self.key.as_ref().map(|_| "…"))
            .finish()
    }
}

/// One message of the conversation sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl RemoteMessage {
    /// A message of `role` saying `content`.
    pub fn new(role: &str, content: &str) -> RemoteMessage {
        RemoteMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A chat request; fields left `None` or empty are not sent, so the server's defaults apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RemoteChat {
    pub model: String,
    pub messages: Vec<RemoteMessage>,
    pub max_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    /// Some(n): ask for logprobs with n top alternatives.
    pub logprobs: Option<usize>,
}

/// A plain completion request: the prompt is continued as it is, no chat template applied.
/// Fields left `None` or empty are not sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RemoteCompletion {
    pub model: String,
    pub prompt: String,
    pub max_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    /// Some(n): ask for logprobs with n top alternatives.
    pub logprobs: Option<usize>,
}

/// A piece of a reply, as it arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteDelta {
    /// Text of the answer.
    Content(String),
    /// Thinking text, which servers send apart from the answer.
    Reasoning(String),
    /// One generated token's logprob and its top alternatives, as the server sent them; it
    /// follows the text of the chunk it came with.
    Logprob(RemoteLogprob),
}

/// A generated token's log probability and the top alternatives at its place.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteLogprob {
    pub token: String,
    pub logprob: f32,
    /// (token, logprob), most likely first as servers send them.
    pub top: Vec<(String, f32)>,
}

/// How a reply ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteDone {
    /// The server's reason (`stop`, `length`, …), `cancelled` when the cancel flag stopped the
    /// reply, None when the stream ended without giving one.
    pub finish_reason: Option<String>,
    /// Counts the server reported (it may not).
    pub prompt_tokens: Option<usize>,
    pub completion_tokens: Option<usize>,
}

impl RemoteEngine {
    /// `http://host:port`, `http://host:port/` and `http://host:port/v1` all give the base
    /// `http://host:port/v1`; another path is kept (some servers live under `/api/v1` or
    /// `/openai/v1`), less a pasted `/chat/completions` or `/models`. Only http and https.
    pub fn new(url: &str, api_key: Option<&str>) -> Result<RemoteEngine> {
        RemoteEngine::with_read_timeout(url, api_key, READ_TIMEOUT)
    }

    /// As [`RemoteEngine::new`], with another limit on each read (tests use short ones).
    pub(crate) fn with_read_timeout(
        url: &str,
        api_key: Option<&str>,
        read_timeout: Duration,
    ) -> Result<RemoteEngine> {
        let base = normalize(url)?;
        let key = match api_key.map(str::trim).filter(|k| !k.is_empty()) {
            Some(k) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {k}")).map_err(|_| {
                    RemoteError::Invalid(
                        "the API key holds characters that cannot be sent: paste it again".into(),
                    )
                })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        Ok(RemoteEngine {
            base,
            key,
            client: client(read_timeout)?,
            read_timeout,
        })
    }

    /// The normalized base URL, without a trailing `/`.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The engine's host, with the port where the address gives one (`10.0.0.5:8000`,
    /// `api.openai.com`).
    pub fn host(&self) -> String {
        match reqwest::Url::parse(&self.base) {
            Ok(u) => match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_string(),
                (None, _) => self.base.clone(),
            },
            Err(_) => self.base.clone(),
        }
    }

    /// GET {base}/models → the ids of the models the server offers.
    pub fn models(&self) -> Result<Vec<String>> {
        let response = self.check(self.send(self.request("models"))?, None)?;
        let body = self.read_body(response, MAX_BODY)?;
        let list: wire::ModelList = serde_json::from_str(&body).map_err(|_| {
            self.remote("did not list its models at /models: is it an OpenAI-compatible server?")
        })?;
        Ok(list.data.into_iter().map(|m| m.id).collect())
    }

    /// POST {base}/chat/completions with `stream: true` (and usage asked for); calls `on`
    /// with each delta as it arrives and returns at the end of the stream. Once `cancel` is
    /// set it returns within a few milliseconds with finish_reason `cancelled`, even while the
    /// server is still silent (say, reading a long prompt); the connection is dropped, which
    /// stops the server, when the next chunk arrives.
    pub fn chat(
        &self,
        req: &RemoteChat,
        cancel: &AtomicBool,
        on: &mut dyn FnMut(RemoteDelta),
    ) -> Result<RemoteDone> {
        let body = wire::ChatRequest::streamed(req);
        self.stream_reply("chat/completions", &body, &req.model, cancel, on)
    }

    /// POST {base}/completions with `stream: true`: as [`RemoteEngine::chat`], for a prompt
    /// continued as it is. Its text arrives as [`RemoteDelta::Content`].
    pub fn complete(
        &self,
        req: &RemoteCompletion,
        cancel: &AtomicBool,
        on: &mut dyn FnMut(RemoteDelta),
    ) -> Result<RemoteDone> {
        let body = wire::CompletionRequest::streamed(req);
        self.stream_reply("completions", &body, &req.model, cancel, on)
    }

    /// Posts `body` to `path` and reads the streamed reply, as [`RemoteEngine::chat`] tells.
    fn stream_reply(
        &self,
        path: &str,
        body: &impl Serialize,
        model: &str,
        cancel: &AtomicBool,
        on: &mut dyn FnMut(RemoteDelta),
    ) -> Result<RemoteDone> {
        let mut done = RemoteDone::default();
        let request = self
            .request_with(reqwest::Method::POST, path)
            .header(ACCEPT, "text/event-stream")
            .json(body);
        // The reading is done on a thread of its own, so that this one can keep an eye on
        // the cancel flag while a read blocks.
        let (tx, items) = mpsc::sync_channel(64);
        let engine = self.clone();
        let model = model.to_string();
        std::thread::Builder::new()
            .name("remote-stream".into())
            .spawn(move || engine.stream(request, &model, tx))
            .map_err(|e| RemoteError::Client(format!("cannot start a thread: {e}")))?;
        let mut any_event = false;
        loop {
            if cancel.load(Ordering::Relaxed) {
                done.finish_reason = Some("cancelled".into());
                return Ok(done);
            }
            match items.recv_timeout(CANCEL_POLL) {
                Ok(Item::Event(event)) => {
                    any_event = true;
                    if self.event(event, &mut done, on)? {
                        return Ok(done);
                    }
                }
                Ok(Item::Whole(body)) => {
                    self.data(&body, &mut done, on)?;
                    return Ok(done);
                }
                Ok(Item::Failed(e)) => return Err(e),
                Err(RecvTimeoutError::Timeout) => {}
                // A body with no event at all is no stream (a web page, say), not an empty reply.
                Err(RecvTimeoutError::Disconnected) if !any_event => {
                    return Err(self.remote(
                        "answered without a stream of chunks: is it an OpenAI-compatible server?",
                    ))
                }
                // The stream ended without `[DONE]`, which some servers never send.
                Err(RecvTimeoutError::Disconnected) => return Ok(done),
            }
        }
    }
}
