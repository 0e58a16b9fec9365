//! Shared pieces of the service tests: a service whose events arrive on a channel, the fixture
//! models, and waiting for a reply to end.
#![allow(dead_code)]

use minerva_service::{ChatPiece, Message, Service, ServiceEvent, Store};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(FIXTURES).join(rel)
}

/// A tiny llama GGUF with a chat template.
pub fn tiny_model() -> PathBuf {
    fixture("llama/gguf-q4_0/llama-Q4_0.gguf")
}

/// SmolLM2-135M-Instruct, fetched by scripts/setup.sh: a model that speaks, for replies that
/// must run long. Missing under CI is a failure; elsewhere the test is skipped, loudly.
pub fn smollm2() -> Option<PathBuf> {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.cache/models"))
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing: run scripts/setup.sh",
        path.display()
    );
    eprintln!(
        "SKIPPED: {} is missing (scripts/setup.sh fetches it)",
        path.display()
    );
    None
}

pub fn service(store: Store) -> (Arc<Service>, Receiver<ServiceEvent>) {
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let sink = Arc::new(move |e: ServiceEvent| {
        let _ = tx.lock().unwrap().send(e);
    });
    (Service::new(store, sink), rx)
}

/// What a reply streamed, and how it ended.
pub struct Reply {
    pub text: String,
    pub reasoning: String,
    pub result: Result<Message, String>,
}

/// Collects a turn's events until it ends (other events are skipped).
pub fn wait_reply(rx: &Receiver<ServiceEvent>, turn_id: u64) -> Reply {
    let mut reply = Reply {
        text: String::new(),
        reasoning: String::new(),
        result: Err("no end".into()),
    };
    loop {
        let e = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the reply did not end within 120 s");
        let ServiceEvent::Chat(c) = e else { continue };
        if c.turn_id != turn_id {
            continue;
        }
        match c.piece {
            ChatPiece::Text { text } => reply.text.push_str(&text),
            ChatPiece::Reasoning { text } => reply.reasoning.push_str(&text),
            ChatPiece::Done { message } => {
                reply.result = Ok(message);
                return reply;
            }
            ChatPiece::Error { message } => {
                reply.result = Err(message);
                return reply;
            }
        }
    }
}
