//! The client against a real HTTP server on the loopback.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::test_server::{ask, fixture, KEY};
use super::tests::{content, reasoning, stream_deltas, stream_done};
use super::*;

#[test]
fn models_are_listed() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    assert_eq!(engine.url(), format!("{}/v1", f.url));
    assert_eq!(engine.models().unwrap(), ["qwen3-4b", "llama-3.2-1b"]);
}

#[test]
fn a_streamed_chat_with_reasoning_and_usage() {
    let f = fixture();
    let engine = RemoteEngine::new(&format!("{}/v1/", f.url), Some(KEY)).unwrap();
    let (deltas, done) = ask(&engine, "chat", &AtomicBool::new(false));
    assert_eq!(deltas, stream_deltas());
    assert_eq!(done.unwrap(), stream_done());
    let (auth, body) = f.seen.lock().unwrap().clone().unwrap();
    assert_eq!(auth, "Bearer sk-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 16);
    assert_eq!(body["stop"], serde_json::json!(["</s>"]));
    assert_eq!(
        body["messages"][1],
        serde_json::json!({"role": "user", "content": "Hi"})
    );
    assert!(body.get("temperature").is_none() && body.get("logprobs").is_none());
}

#[test]
fn a_wrong_or_missing_key_is_refused() {
    let f = fixture();
    let wrong = RemoteEngine::new(&f.url, Some("sk-wrong")).unwrap();
    let e = ask(&wrong, "chat", &AtomicBool::new(false)).1.unwrap_err();
    let url = format!("{}/v1", f.url);
    assert_eq!(
        e,
        RemoteError::Key {
            url: url.clone(),
            sent: true
        }
    );
    assert_eq!(
        e.to_string(),
        format!("the engine at {url} refused the API key: check the key")
    );
    let none = RemoteEngine::new(&f.url, None).unwrap();
    assert_eq!(
        none.models().unwrap_err(),
        RemoteError::Key { url, sent: false }
    );
}

#[test]
fn an_unknown_model_and_a_server_error_say_what_the_server_said() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let url = engine.url().to_string();
    let e = ask(&engine, "missing", &AtomicBool::new(false))
        .1
        .unwrap_err();
    assert_eq!(
        e,
        RemoteError::NoModel {
            url: url.clone(),
            model: "missing".into()
        }
    );
    let e = ask(&engine, "broken", &AtomicBool::new(false))
        .1
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("the engine at {url} answered 500 Internal Server Error: failed to load the model")
    );
}

#[test]
fn an_unreachable_port() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let engine = RemoteEngine::new(&format!("http://127.0.0.1:{port}"), None).unwrap();
    let e = engine.models().unwrap_err();
    assert!(
        matches!(&e, RemoteError::Unreachable { url, .. } if url.contains(&port.to_string())),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("cannot reach the engine at http://127.0.0.1:"),
        "{e}"
    );
    let e = ask(&engine, "chat", &AtomicBool::new(false)).1.unwrap_err();
    assert!(matches!(e, RemoteError::Unreachable { .. }), "{e:?}");
}

#[test]
fn cancel_mid_stream_returns_promptly_and_closes_the_connection() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let cancelled_at = Arc::new(Mutex::new(None));
    {
        let (cancel, cancelled_at) = (cancel.clone(), cancelled_at.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(350));
            *cancelled_at.lock().unwrap() = Some(Instant::now());
            cancel.store(true, Ordering::Relaxed);
        });
    }
    let (deltas, done) = ask(&engine, "slow", &cancel);
    assert_eq!(done.unwrap().finish_reason.as_deref(), Some("cancelled"));
    assert!(cancelled_at.lock().unwrap().is_some());
    // Some of the fifty chunks came, in order, and the reply stopped long before its end.
    assert!((1..25).contains(&deltas.len()), "{deltas:?}");
    assert_eq!(deltas[0], content("t0 "));
    // The server sees the connection closed within a chunk or two.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f.dropped.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(f.dropped.load(Ordering::SeqCst), "the server still streams");
}

#[test]
fn cancel_while_the_server_is_silent() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        flag.store(true, Ordering::Relaxed);
    });
    // The server never answers: only the cancel can end this.
    let (deltas, done) = ask(&engine, "silent", &cancel);
    assert_eq!(done.unwrap().finish_reason.as_deref(), Some("cancelled"));
    assert!(deltas.is_empty());
}

#[test]
fn done_ends_the_reply_while_the_connection_stays_open() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let (deltas, done) = ask(&engine, "done-then-hang", &AtomicBool::new(false));
    assert_eq!(deltas, stream_deltas());
    assert_eq!(done.unwrap(), stream_done());
}

#[test]
fn the_read_timeout_is_per_read_not_for_the_whole_stream() {
    let f = fixture();
    let timeout = Duration::from_millis(400);
    let engine = RemoteEngine::with_read_timeout(&f.url, Some(KEY), timeout).unwrap();
    // 1.1 s of chunks 100 ms apart: longer than the timeout in all, never between two reads.
    let (deltas, done) = ask(&engine, "slow-12", &AtomicBool::new(false));
    assert_eq!(deltas.len(), 12);
    assert_eq!(done.unwrap(), RemoteDone::default());
    // A server that goes quiet mid-stream.
    let (deltas, done) = ask(&engine, "stall", &AtomicBool::new(false));
    assert_eq!(deltas, [content("a")]);
    let e = done.unwrap_err();
    assert!(
        e.to_string()
            .ends_with("stopped sending (nothing for 0.4 s)"),
        "{e}"
    );
}

#[test]
fn a_wrong_address_or_a_web_page_is_not_taken_for_a_reply() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let e = ask(&engine, "page", &AtomicBool::new(false)).1.unwrap_err();
    assert!(
        e.to_string()
            .ends_with("is it an OpenAI-compatible server?"),
        "{e}"
    );
    // The server's routes are under /v1: /api/v1 has nothing.
    let wrong = RemoteEngine::new(&format!("{}/api/v1", f.url), Some(KEY)).unwrap();
    let e = wrong.models().unwrap_err();
    assert!(
        e.to_string()
            .contains("has nothing at /api/v1/models (404)"),
        "{e}"
    );
}

#[test]
fn an_answer_not_streamed_is_taken_whole() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let (deltas, done) = ask(&engine, "whole", &AtomicBool::new(false));
    assert_eq!(deltas, [reasoning("r"), content("Hi")]);
    let done = done.unwrap();
    assert_eq!(done.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        (done.prompt_tokens, done.completion_tokens),
        (Some(5), Some(1))
    );
}

#[test]
fn a_streamed_completion_with_logprobs_and_usage() {
    let f = fixture();
    let engine = RemoteEngine::new(&f.url, Some(KEY)).unwrap();
    let req = RemoteCompletion {
        model: "m".into(),
        prompt: "Say".into(),
        max_tokens: Some(2),
        temperature: Some(0.0),
        logprobs: Some(1),
        ..RemoteCompletion::default()
    };
    let mut deltas = Vec::new();
    let done = engine
        .complete(&req, &AtomicBool::new(false), &mut |d| deltas.push(d))
        .unwrap();
    assert_eq!(
        deltas,
        [
            content("Hello"),
            RemoteDelta::Logprob(RemoteLogprob {
                token: "Hello".into(),
                logprob: -0.5,
                top: vec![("Hello".into(), -0.5)],
            }),
            content(" world"),
        ]
    );
    assert_eq!(
        done,
        RemoteDone {
            finish_reason: Some("length".into()),
            prompt_tokens: Some(3),
            completion_tokens: Some(2),
        }
    );
    let (_, body) = f.seen.lock().unwrap().clone().unwrap();
    assert_eq!(
        (body["prompt"].as_str(), body["logprobs"].as_u64()),
        (Some("Say"), Some(1))
    );
    assert_eq!(body["stream"], true);
    assert_eq!(engine.host(), f.url.trim_start_matches("http://"));
}
