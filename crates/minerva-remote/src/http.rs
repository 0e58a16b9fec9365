//! The HTTP side of a remote engine: its client, requests, statuses and the errors they make.

use std::io::{self, Read};
use std::time::Duration;

use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};

use super::{wire, RemoteEngine, CONNECT_TIMEOUT, MAX_ERROR_BODY};
use crate::error::{RemoteError, Result};

impl RemoteEngine {
    /// A GET of `path` under the base, with the key.
    pub(super) fn request(&self, path: &str) -> RequestBuilder {
        self.request_with(reqwest::Method::GET, path)
    }

    pub(super) fn request_with(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        let request = self.client.request(method, format!("{}/{path}", self.base));
        match &self.key {
            Some(key) => request.header(AUTHORIZATION, key.clone()),
            None => request,
        }
    }

    pub(super) fn send(&self, request: RequestBuilder) -> Result<Response> {
        request.send().map_err(|e| {
            let reason = root_cause(&e);
            if e.is_connect() {
                RemoteError::Unreachable {
                    url: self.base.clone(),
                    reason,
                }
            } else if e.is_timeout() {
                let secs = self.read_timeout.as_secs_f32();
                self.remote(&format!("did not answer within {secs} s"))
            } else {
                self.remote(&format!("did not take the request ({reason})"))
            }
        })
    }

    /// Passes a success; turns any other status into its error, with the server's message.
    pub(super) fn check(&self, response: Response, model: Option<&str>) -> Result<Response> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let path = response.url().path().to_string();
        let body = self.read_body(response, MAX_ERROR_BODY).unwrap_or_default();
        let message = wire::error_message(&body);
        let url = self.base.clone();
        Err(match (status.as_u16(), model) {
            (401 | 403, _) => RemoteError::Key {
                url,
                sent: self.key.is_some(),
            },
            // A JSON error is the server's word on the model; a bare 404 means no such route.
            (404, Some(model)) if body.trim_start().starts_with('{') => RemoteError::NoModel {
                url,
                model: model.into(),
            },
            (404, _) => self.remote(&format!(
                "has nothing at {path} (404): give the address of its OpenAI-compatible API, \
                 such as http://host:8080/v1"
            )),
            _ => self.remote(&match message {
                Some(m) => format!("answered {status}: {m}"),
                None => format!("answered {status}"),
            }),
        })
    }

    pub(super) fn read_body(&self, response: Response, limit: u64) -> Result<String> {
        let mut bytes = Vec::new();
        response
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| self.broken(&e))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    pub(super) fn remote(&self, message: &str) -> RemoteError {
        RemoteError::Failed {
            url: self.base.clone(),
            message: message.into(),
        }
    }

    pub(super) fn failed_mid_stream(&self, message: Option<String>) -> RemoteError {
        let message = message.unwrap_or_else(|| "no message".into());
        self.remote(&format!("stopped the reply with an error: {message}"))
    }

    pub(super) fn malformed(&self, data: &str, e: &serde_json::Error) -> RemoteError {
        let data = wire::clip(data, 200);
        self.remote(&format!(
            "sent a malformed stream: `{data}` is not a chunk ({e})"
        ))
    }

    /// A failed read of a body under way.
    pub(super) fn broken(&self, e: &io::Error) -> RemoteError {
        if timed_out(e) {
            let secs = self.read_timeout.as_secs_f32();
            self.remote(&format!("stopped sending (nothing for {secs} s)"))
        } else if e.kind() == io::ErrorKind::InvalidData {
            self.remote(&format!("sent a malformed stream: {e}"))
        } else {
            let reason = e
                .get_ref()
                .map(|i| root_cause(i))
                .unwrap_or_else(|| e.to_string());
            self.remote(&format!("broke off the reply ({reason})"))
        }
    }
}

/// One HTTP client per engine: timeouts on connecting and on each read, none on the whole.
pub(super) fn client(read_timeout: Duration) -> Result<Client> {
    // reqwest is built without a TLS crypto provider of its own (aws-lc is slow to build and
    // needs cmake); ring is made the process's default unless another was installed first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The blocking client's `timeout` bounds the wait for the answer's head and then each read
    // of the body on its own, never the stream as a whole: it is the read timeout. (The async
    // builder's `read_timeout` cannot serve: its timer wants a Tokio runtime on the thread
    // that reads, and panics without one.)
    Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(read_timeout)
        .build()
        .map_err(|e| {
            RemoteError::Client(format!("cannot start the HTTP client: {}", root_cause(&e)))
        })
}

/// The base URL of an address, as [`RemoteEngine::new`] tells.
pub(super) fn normalize(url: &str) -> Result<String> {
    let text = url.trim();
    let invalid =
        |why: String| RemoteError::Invalid(format!("`{text}` is not an engine address: {why}"));
    if !text.contains("://") {
        return Err(invalid(format!("write it as http://{text}")));
    }
    let mut parsed = reqwest::Url::parse(text).map_err(|e| invalid(e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("use http:// or https://".into()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid("it names no host".into()));
    }
    parsed.set_query(None);
    parsed.set_fragment(None);
    let mut path = parsed.path().trim_end_matches('/').to_string();
    for endpoint in ["/chat/completions", "/completions", "/models"] {
        if let Some(rest) = path.strip_suffix(endpoint) {
            path = rest.to_string();
            break;
        }
    }
    if path.is_empty() {
        path = "/v1".into();
    }
    parsed.set_path(&path);
    Ok(parsed.as_str().trim_end_matches('/').to_string())
}

/// Whether the answer is JSON rather than a stream of events.
pub(super) fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// The innermost cause, which is the one that says what happened ("Connection refused").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut e = e;
    while let Some(source) = e.source() {
        e = source;
    }
    e.to_string()
}

/// Whether a failed read failed for want of data in time.
fn timed_out(e: &io::Error) -> bool {
    if e.kind() == io::ErrorKind::TimedOut {
        return true;
    }
    let mut cause = e.get_ref().map(|i| i as &(dyn std::error::Error + 'static));
    while let Some(c) = cause {
        let reqwest_timeout = c
            .downcast_ref::<reqwest::Error>()
            .is_some_and(|r| r.is_timeout());
        let io_timeout = c
            .downcast_ref::<io::Error>()
            .is_some_and(|i| i.kind() == io::ErrorKind::TimedOut);
        if reqwest_timeout || io_timeout {
            return true;
        }
        cause = c.source();
    }
    false
}
