//! Conversations through the service on a tiny fixture model: the KV cache kept between turns,
//! regenerate, edit, stop, a conversation longer than the context, and the stored messages.

mod common;

use common::{service, tiny_model, wait_reply};
use minerva_service::{Role, ServiceError, Settings, Store};

fn greedy(max_tokens: usize) -> Settings {
    Settings {
        temperature: 0.0,
        max_tokens,
        backend: "cpu".into(),
        ..Settings::default()
    }
}

#[test]
fn a_second_turn_prefills_only_its_new_tokens() {
    let (svc, rx) = service(Store::in_memory().unwrap());
    svc.load_blocking(&tiny_model(), "cpu", Some(256), &mut |_, _| true)
        .unwrap();
    let conv = svc.create_conversation(None, Some(greedy(6))).unwrap();
    let first = wait_reply(&rx, svc.send(conv.id, "Hello there").unwrap());
    let m1 = first.result.unwrap();
    let s1 = m1.stats.clone().unwrap();
    assert!((1..=6).contains(&s1.generated_tokens));
    assert_eq!(s1.prefill_tokens, s1.prompt_tokens, "nothing cached yet");
    // The streamed text is the stored reply.
    assert_eq!(first.text.trim_end(), m1.content);

    let second = wait_reply(&rx, svc.send(conv.id, "And again").unwrap());
    let s2 = second.result.unwrap().stats.unwrap();
    assert!(s2.prompt_tokens > s1.prompt_tokens + s1.generated_tokens);
    // The cache held the first turn: only what differs from it is computed.
    assert!(
        s2.prefill_tokens < s2.prompt_tokens - s1.prompt_tokens / 2,
        "second turn prefilled {} of {} tokens",
        s2.prefill_tokens,
        s2.prompt_tokens
    );

    let messages = svc.store().messages(conv.id).unwrap();
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::User, Role::Assistant]
    );
    assert_eq!(
        svc.store().conversation(conv.id).unwrap().title,
        "Hello there"
    );
}

#[test]
fn regenerate_replaces_the_last_reply_and_edit_drops_what_followed() {
    let (svc, rx) = service(Store::in_memory().unwrap());
    svc.load_blocking(&tiny_model(), "cpu", Some(256), &mut |_, _| true)
        .unwrap();
    let conv = svc.create_conversation(None, Some(greedy(4))).unwrap();
    let a = wait_reply(&rx, svc.send(conv.id, "Tell me a story").unwrap())
        .result
        .unwrap();
    let b = wait_reply(&rx, svc.regenerate(conv.id).unwrap())
        .result
        .unwrap();
    // A new reply, stored in place of the old one.
    assert_ne!(a.id, b.id);
    let messages = svc.store().messages(conv.id).unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].id, b.id);

    wait_reply(&rx, svc.send(conv.id, "Another").unwrap())
        .result
        .unwrap();
    assert_eq!(svc.store().messages(conv.id).unwrap().len(), 4);
    let edited = wait_reply(&rx, svc.edit(messages[0].id, "Tell me a poem").unwrap())
        .result
        .unwrap();
    let messages = svc.store().messages(conv.id).unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].content, "Tell me a poem");
    assert_eq!(messages[1].id, edited.id);
    // Only the user's messages can be edited.
    assert!(matches!(
        svc.edit(edited.id, "x"),
        Err(ServiceError::Invalid(_))
    ));
}

#[test]
fn stop_ends_a_reply_and_keeps_what_it_said() {
    // A model that speaks: its greedy story runs for hundreds of tokens, so the reply is still
    // going when it is stopped.
    let Some(model) = common::smollm2() else {
        return;
    };
    let (svc, rx) = service(Store::in_memory().unwrap());
    svc.load_blocking(&model, "cpu", Some(2048), &mut |_, _| true)
        .unwrap();
    let conv = svc.create_conversation(None, Some(greedy(1500))).unwrap();
    let turn = svc
        .send(
            conv.id,
            "Write a very long story about a dragon and a castle.",
        )
        .unwrap();
    // Stop once the first text has arrived.
    loop {
        let e = rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
        if matches!(&e, minerva_service::ServiceEvent::Chat(c) if c.turn_id == turn) {
            break;
        }
    }
    svc.stop(conv.id);
    let reply = wait_reply(&rx, turn);
    let message = reply.result.unwrap();
    let stats = message.stats.clone().unwrap();
    assert_eq!(stats.stop_reason, "cancelled");
    assert!(stats.generated_tokens >= 1 && stats.generated_tokens < 1500);
    // What it said so far is the stored reply (the first piece was read above).
    assert!(!message.content.is_empty());
    assert!(
        message.content.ends_with(reply.text.trim_end()),
        "{message:?}"
    );
}

#[test]
fn a_conversation_longer_than_the_context_says_so() {
    let (svc, _rx) = service(Store::in_memory().unwrap());
    svc.load_blocking(&tiny_model(), "cpu", Some(24), &mut |_, _| true)
        .unwrap();
    let conv = svc.create_conversation(None, Some(greedy(4))).unwrap();
    let long = "word ".repeat(64);
    match svc.send(conv.id, &long) {
        Err(e @ ServiceError::ContextFull { ctx: 24, .. }) => {
            let text = e.to_string();
            assert!(text.contains("context holds 24"), "{text}");
        }
        other => panic!("expected a full context, got {other:?}"),
    }
}

#[test]
fn sending_without_a_model_asks_for_one() {
    let (svc, _rx) = service(Store::in_memory().unwrap());
    let conv = svc.create_conversation(None, None).unwrap();
    assert_eq!(svc.send(conv.id, "hi"), Err(ServiceError::NothingLoaded));
    // Nothing was stored for the refused message.
    assert!(svc.store().messages(conv.id).unwrap().is_empty());
}

/// tests/fixtures/thinking answers every prompt with "<think> the tiny model can return
/// four</think>Hello there" (tools/make_thinking_fixture.py): the reasoning streams and is stored
/// apart from the answer, sampled as well as greedy.
#[test]
fn reasoning_streams_and_is_stored_apart_from_the_answer() {
    let (svc, rx) = service(Store::in_memory().unwrap());
    svc.load_blocking(
        &common::fixture("thinking"),
        "cpu",
        Some(128),
        &mut |_, _| true,
    )
    .unwrap();
    for settings in [
        greedy(40),
        Settings {
            temperature: 0.8,
            seed: Some(3),
            ..greedy(40)
        },
    ] {
        let conv = svc.create_conversation(None, Some(settings)).unwrap();
        let reply = wait_reply(&rx, svc.send(conv.id, "What is two plus two?").unwrap());
        let m = reply.result.unwrap();
        assert_eq!(reply.reasoning.trim(), "the tiny model can return four");
        assert_eq!(reply.text.trim(), "Hello there");
        assert_eq!(m.content, "Hello there");
        assert_eq!(
            m.reasoning.as_deref().map(str::trim),
            Some("the tiny model can return four")
        );
    }
}
