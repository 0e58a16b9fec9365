//! The client's decoding of captured streams, and its reading of addresses.

use super::sse::{self, SseParser};
use super::*;

/// Runs a captured stream through the same path as a live one (lines, events, chunks).
fn decode(text: &str) -> (Vec<RemoteDelta>, Result<RemoteDone>) {
    let engine = RemoteEngine::new("http://127.0.0.1:9", None).unwrap();
    let mut lines = sse::Lines::new(text.as_bytes(), sse::MAX_LINE);
    let mut parser = SseParser::new();
    let mut deltas = Vec::new();
    let mut done = RemoteDone::default();
    let mut on = |d: RemoteDelta| deltas.push(d);
    let mut events = Vec::new();
    while let Some(line) = lines.next_line().unwrap() {
        events.extend(parser.line(&line));
    }
    events.extend(parser.finish());
    let mut result = Ok(());
    for event in events {
        match engine.event(event, &mut done, &mut on) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    (deltas, result.map(|_| done))
}

pub(super) fn content(s: &str) -> RemoteDelta {
    RemoteDelta::Content(s.into())
}

pub(super) fn reasoning(s: &str) -> RemoteDelta {
    RemoteDelta::Reasoning(s.into())
}

/// A stream as servers send it: a role-only first chunk, reasoning under both names, pings,
/// logprobs, a finish_reason chunk, a usage-only chunk, and `[DONE]` with no blank line after.
pub(super) const STREAM: &str = concat!(
    ": ping\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Think\"}}]}\n\n",
    ": ping\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"ing.\",\"content\":null}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":{\"content\":",
    "[{\"token\":\"Hello\",\"logprob\":-0.5,\"top_logprobs\":[{\"token\":\"Hello\",\"logprob\":-0.5},",
    "{\"token\":\"Hi\",\"logprob\":-1.0}]}]}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n",
    "data: [DONE]\n",
);

pub(super) fn stream_deltas() -> Vec<RemoteDelta> {
    vec![
        reasoning("Think"),
        reasoning("ing."),
        content("Hello"),
        RemoteDelta::Logprob(RemoteLogprob {
            token: "Hello".into(),
            logprob: -0.5,
            top: vec![("Hello".into(), -0.5), ("Hi".into(), -1.0)],
        }),
        content(" world"),
    ]
}

pub(super) fn stream_done() -> RemoteDone {
    RemoteDone {
        finish_reason: Some("stop".into()),
        prompt_tokens: Some(7),
        completion_tokens: Some(3),
    }
}

#[test]
fn a_captured_stream_decodes() {
    let (deltas, done) = decode(STREAM);
    assert_eq!(deltas, stream_deltas());
    assert_eq!(done.unwrap(), stream_done());
    // The same with `\r\n` line ends.
    let (deltas, done) = decode(&STREAM.replace('\n', "\r\n"));
    assert_eq!(deltas, stream_deltas());
    assert_eq!(done.unwrap(), stream_done());
}

#[test]
fn a_stream_that_just_ends_and_chunks_without_blank_lines() {
    let text = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\
                data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n";
    let (deltas, done) = decode(text);
    assert_eq!(deltas, [content("a"), content("b")]);
    assert_eq!(done.unwrap(), RemoteDone::default());
}

#[test]
fn an_error_event_mid_stream() {
    let text = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n\
                event: error\ndata: {\"error\":{\"message\":\"the KV cache is full\",\"code\":500}}\n\n";
    let (deltas, done) = decode(text);
    assert_eq!(deltas, [content("a")]);
    let e = done.unwrap_err();
    assert!(matches!(e, RemoteError::Failed { .. }), "{e:?}");
    assert!(e.to_string().contains("the KV cache is full"), "{e}");
}

#[test]
fn an_error_chunk_mid_stream() {
    let text = "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n";
    let e = decode(text).1.unwrap_err();
    assert!(
        e.to_string()
            .ends_with("stopped the reply with an error: overloaded"),
        "{e}"
    );
}

#[test]
fn a_malformed_chunk_is_an_error_not_a_panic() {
    for text in [
        "data: {\"choices\": [\n\n",
        "data: not json\n\n",
        "data: {\"choices\":7}\n\n",
    ] {
        let e = decode(text).1.unwrap_err();
        assert!(e.to_string().contains("malformed stream"), "{text:?}: {e}");
    }
}

#[test]
fn addresses_are_normalized() {
    let base = |u: &str| RemoteEngine::new(u, None).map(|e| e.url().to_string());
    for u in [
        "http://h:8080",
        "http://h:8080/",
        "http://h:8080/v1",
        " http://h:8080/v1/ ",
    ] {
        assert_eq!(base(u).unwrap(), "http://h:8080/v1", "{u}");
    }
    assert_eq!(
        base("https://h/v1/chat/completions").unwrap(),
        "https://h/v1"
    );
    assert_eq!(
        base("https://h/openai/v1/models").unwrap(),
        "https://h/openai/v1"
    );
    assert_eq!(
        base("http://h:1/api/v1?x=1#f").unwrap(),
        "http://h:1/api/v1"
    );
    for (u, says) in [
        ("localhost:8080", "write it as http://localhost:8080"),
        ("ftp://h/v1", "use http:// or https://"),
        ("http://", "not an engine address"),
        ("", "not an engine address"),
    ] {
        let e = base(u).unwrap_err();
        assert!(
            matches!(e, RemoteError::Invalid(_)) && e.to_string().contains(says),
            "{u}: {e}"
        );
    }
    assert!(RemoteEngine::new("http://h", Some("bad\nkey")).is_err());
    let debug = format!(
        "{:?}",
        RemoteEngine::new("http://h", Some("sk-secret")).unwrap()
    );
    assert!(!debug.contains("sk-secret"), "{debug}");
}
