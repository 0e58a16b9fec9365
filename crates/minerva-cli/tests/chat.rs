//! `minerva chat` end to end: two turns from stdin (the second reuses the first's cache), Ctrl-C
//! at the prompt ending the chat, and a chat kept in a database file killed mid-reply losing only
//! that reply.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

/// (generated, prefilled) from each turn's stats line "[N tokens, prefill P at …]".
fn turn_stats(stderr: &str) -> Vec<(usize, usize)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('[')?;
            let (n, rest) = rest.split_once(" tokens, prefill ")?;
            let (p, _) = rest.split_once(' ')?;
            Some((n.parse().ok()?, p.parse().ok()?))
        })
        .collect()
}

#[test]
fn two_turns_reuse_the_cache() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .arg("chat")
        .arg(Path::new(FIXTURES).join("qwen3/f32"))
        .args(["--temp", "0", "--max-tokens", "8"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"What is two plus two?\nAnd three?\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let turns = turn_stats(&stderr);
    assert_eq!(turns.len(), 2, "{stderr}");
    let ((n1, p1), (_, p2)) = (turns[0], turns[1]);
    assert_eq!(n1, 8);
    // The second prompt holds the whole first turn; only what follows it is computed.
    assert!(
        p2 < p1 + n1,
        "second turn prefilled {p2} tokens (first: {p1} + {n1})"
    );
    // One prompt per turn, and one more before end of input.
    assert!(String::from_utf8_lossy(&out.stdout).matches("> ").count() >= 3);
}

#[test]
fn ctrl_c_at_the_prompt_ends_the_chat() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .arg("chat")
        .arg(Path::new(FIXTURES).join("qwen3/f32"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the first prompt, so that the handler is installed and no reply is streaming.
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"> ") {
        assert_eq!(
            stdout.read(&mut byte).unwrap(),
            1,
            "chat ended before its prompt"
        );
        seen.push(byte[0]);
    }
    // Held open until the end: `wait` would close it, and end-of-input also ends the chat.
    let _stdin = child.stdin.take().unwrap();
    let pid = child.id().to_string();
    let kill = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
}

/// A prompt whose greedy reply from SmolLM2 runs for hundreds of tokens.
const LONG_REPLY: &[u8] =
    b"Write a very long story about a dragon and a castle, with many chapters.\n";

#[test]
fn a_chat_killed_mid_reply_loses_only_that_reply() {
    let Some(model) = common::smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("minerva.sqlite");
    let mut child = Command::new(env!("CARGO_BIN_EXE_minerva"))
        .arg("chat")
        .arg(&model)
        .args([
            "--temp",
            "0",
            "--max-tokens",
            "2000",
            "--backend",
            "cpu",
            "--db",
        ])
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Keep stdin open: the chat waits for more after this reply.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(LONG_REPLY).unwrap();
    // Wait until the reply is streaming: text after the prompt "> ". A reply that ended first
    // would leave the chat waiting at its next prompt, so the read is given up after a while.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while seen.len() < 64 {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        seen
    });
    let start = std::time::Instant::now();
    while !reader.is_finished() && start.elapsed() < std::time::Duration::from_secs(120) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SIGKILL: no destructor, no flush.
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stdin);
    let seen = reader.join().unwrap();
    assert!(
        seen.len() >= 64,
        "the reply did not stream: {}",
        String::from_utf8_lossy(&seen)
    );

    let store = minerva_service::Store::open(&db).unwrap();
    assert_eq!(store.integrity().unwrap(), "ok");
    let conversations = store.conversations(None).unwrap();
    assert_eq!(conversations.len(), 1);
    let messages = store.messages(conversations[0].id).unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0].role, minerva_service::Role::User);
    assert_eq!(
        messages[0].content.as_bytes(),
        LONG_REPLY.strip_suffix(b"\n").unwrap()
    );
    // The file takes new writes.
    store
        .add_message(
            conversations[0].id,
            minerva_service::Role::User,
            "again",
            None,
            None,
            None,
        )
        .unwrap();
}

#[test]
fn a_remote_engines_model_chats_like_the_same_model_here() {
    let fixture = Path::new(FIXTURES).join("qwen3/f32");
    let chat = |model: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_minerva"))
            .args(["chat", model, "--temp", "0", "--max-tokens", "6"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"What is two plus two?\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let here = chat(fixture.to_str().unwrap());
    let server = common::serving::serve(fixture.to_str().unwrap());
    let (_, models) = common::serving::get(server.port, "/v1/models").unwrap();
    let id = serde_json::from_str::<serde_json::Value>(&models).unwrap()["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Without /v1: the address is completed as the engine was added.
    let there = chat(&format!("http://127.0.0.1:{}#{id}", server.port));
    assert!(here.len() > 4, "{here}");
    assert_eq!(
        there, here,
        "the remote reply = the local one (greedy, same weights)"
    );
}
