//! Sessions: multi-turn cache reuse, cancellation, streaming from a thread, context policy.

use minerva_engine::session::NoText;
use minerva_engine::{
    CpuBackend, EngineError, Event, Model, Request, SamplerConfig, Session, StopReason,
};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

/// The llama fixture prompt ("The quick brown fox jumps over the lazy dog.").
const PROMPT: [u32; 24] = [
    1, 330, 223, 449, 358, 77, 295, 407, 80, 486, 90, 402, 354, 82, 85, 321, 381, 273, 269, 67, 92,
    91, 408, 16,
];

fn model(fixture: &str) -> Model {
    let ckpt = minerva_formats::Checkpoint::open(Path::new(FIXTURES).join(fixture)).unwrap();
    Model::load(&ckpt, Box::new(CpuBackend::new())).unwrap()
}

fn request(prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request {
        prompt,
        max_tokens,
        sampler: SamplerConfig::default(),
        stop: vec![],
        logprobs: None,
    }
}

fn run(session: &mut Session, req: &Request) -> (Vec<u32>, minerva_engine::Stats) {
    let mut ids = Vec::new();
    let stats = session
        .generate(req, &AtomicBool::new(false), &mut NoText, &mut |e| {
            if let Event::Token { id, .. } = e {
                ids.push(id)
            }
        })
        .unwrap();
    (ids, stats)
}

/// Logits of the last token of `ids`, from a fresh cache.
fn fresh_last_logits(fixture: &str, ids: &[u32]) -> Vec<f32> {
    let mut m = model(fixture);
    let mut cache = m.new_cache(256).unwrap();
    let all = m.score(&mut cache, ids).unwrap();
    let vocab = m.spec.vocab_size;
    all[all.len() - vocab..].to_vec()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn second_turn_prefills_only_new_tokens() {
    // gpt-oss: its sliding-window layer must also carry over between turns.
    for (fixture, prompt) in [
        ("llama/f32", PROMPT.to_vec()),
        ("gpt_oss/f32", PROMPT[1..].iter().map(|t| t + 4).collect()),
    ] {
        let mut s = Session::new(model(fixture), 256, 0.0).unwrap();
        let (reply, stats) = run(&mut s, &request(prompt.clone(), 6));
        assert_eq!(stats.prefill_tokens, prompt.len());
        assert_eq!(reply.len(), 6);

        // Turn two: the conversation so far, the reply, and a new user message.
        let mut turn2 = prompt.clone();
        turn2.extend(&reply);
        turn2.extend([330, 223, 449, 16]);
        let computed = s.prefill(&turn2).unwrap();
        // The last reply token was never fed, so it is computed with the new message.
        assert_eq!(computed, 4 + 1, "{fixture}");
        let d = max_abs_diff(
            &s.last_logits().unwrap(),
            &fresh_last_logits(fixture, &turn2),
        );
        assert!(d < 1e-4, "{fixture}: cached and fresh logits differ by {d}");

        // An edited conversation: only the tokens after the first difference are computed.
        let cut = prompt.len() + 2;
        let mut edited = turn2[..cut].to_vec();
        edited.extend([(turn2[cut] + 1) % 500, 295, 407]);
        assert_eq!(s.prefill(&edited).unwrap(), 3, "{fixture}");
        let d = max_abs_diff(
            &s.last_logits().unwrap(),
            &fresh_last_logits(fixture, &edited),
        );
        assert!(d < 1e-4, "{fixture}: logits after an edit differ by {d}");
    }
}

#[test]
fn cancellation_stops_within_one_token() {
    let mut s = Session::new(model("llama/f32"), 256, 0.0).unwrap();
    let cancel = AtomicBool::new(false);
    let mut seen = 0;
    let stats = s
        .generate(
            &request(PROMPT.to_vec(), 100),
            &cancel,
            &mut NoText,
            &mut |e| {
                if let Event::Token { .. } = e {
                    seen += 1;
                    if seen == 3 {
                        cancel.store(true, Ordering::Relaxed);
                    }
                }
            },
        )
        .unwrap();
    assert_eq!(stats.stop_reason, StopReason::Cancelled);
    assert_eq!(stats.generated_tokens, 3);
    assert_eq!(seen, 3);
}

#[test]
fn streams_from_its_own_thread_and_cancels() {
    let handle = Session::new(model("llama/f32"), 256, 12.5).unwrap().spawn();
    let (mut rx, _) = handle.generate(request(PROMPT.to_vec(), 5), Box::new(NoText));
    let mut ids = Vec::new();
    let stats = loop {
        match rx.blocking_recv().expect("the stream ended without Done") {
            Event::Token { id, .. } => ids.push(id),
            Event::Done { stats } => break stats,
            Event::Error(e) => panic!("{e}"),
            Event::Text(_) | Event::Logprobs(_) => {}
        }
    };
    assert_eq!(ids.len(), 5);
    assert_eq!(stats.stop_reason, StopReason::MaxTokens);
    assert_eq!(stats.load_ms, 12.5);
    assert!(stats.decode_tokens_per_s > 0.0 && stats.prefill_tokens_per_s > 0.0);

    // A long turn cancelled after its first token ends early with Cancelled.
    let mut sampled = request(PROMPT.to_vec(), 200);
    sampled.sampler = SamplerConfig {
        temperature: 0.8,
        seed: 7,
        ..Default::default()
    };
    let (mut rx, cancel) = handle.generate(sampled, Box::new(NoText));
    let mut n = 0;
    let stats = loop {
        match rx.blocking_recv().expect("the stream ended without Done") {
            Event::Token { .. } => {
                n += 1;
                cancel.store(true, Ordering::Relaxed);
            }
            Event::Done { stats } => break stats,
            Event::Error(e) => panic!("{e}"),
            Event::Text(_) | Event::Logprobs(_) => {}
        }
    };
    assert_eq!(stats.stop_reason, StopReason::Cancelled);
    assert_eq!(stats.generated_tokens, n);
    assert!(n < 200);
}

#[test]
fn context_overflow_is_an_error_or_a_stop() {
    let mut s = Session::new(model("llama/f32"), 20, 0.0).unwrap();
    let err = s.prefill(&PROMPT).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::ContextFull {
                ctx: 20,
                needed: 24
            }
        ),
        "{err}"
    );

    // Generation that reaches the end of the context stops there.
    let mut s = Session::new(model("llama/f32"), 26, 0.0).unwrap();
    let (ids, stats) = run(&mut s, &request(PROMPT.to_vec(), 10));
    assert_eq!(stats.stop_reason, StopReason::ContextFull);
    assert_eq!(ids.len(), 3);
}

#[test]
fn stop_tokens_end_the_turn() {
    let mut s = Session::new(model("llama/f32"), 256, 0.0).unwrap();
    let (free, _) = run(&mut s, &request(PROMPT.to_vec(), 8));
    let mut s = Session::new(model("llama/f32"), 256, 0.0).unwrap();
    let mut req = request(PROMPT.to_vec(), 8);
    req.stop = vec![free[2]];
    let first_stop = free.iter().position(|&t| t == free[2]).unwrap();
    let (ids, stats) = run(&mut s, &req);
    assert_eq!(stats.stop_reason, StopReason::Stop);
    assert_eq!(ids, free[..=first_stop]);
}

/// Sliding-window layers kept as short rings (steps of 2 tokens: a ring of 9 for gpt-oss's
/// window of 8) continue a conversation in place, and start over when an edit reaches back
/// further than the ring holds — with the same logits either way.
#[test]
fn window_rings_continue_or_start_over() {
    let fixture = "gpt_oss/f32";
    let ckpt = minerva_formats::Checkpoint::open(Path::new(FIXTURES).join(fixture)).unwrap();
    let spec = ckpt.spec().unwrap();
    let m = Model::load_with_spec(&ckpt, spec, Box::new(CpuBackend::new()), 2).unwrap();
    let mut s = Session::new(m, 256, 0.0).unwrap();
    let prompt: Vec<u32> = PROMPT[1..].iter().map(|t| t + 4).collect();
    let (reply, _) = run(&mut s, &request(prompt.clone(), 6));
    let mut turn2 = prompt.clone();
    turn2.extend(&reply);
    turn2.extend([334, 227]);
    assert_eq!(s.prefill(&turn2).unwrap(), 3);
    let d = max_abs_diff(
        &s.last_logits().unwrap(),
        &fresh_last_logits(fixture, &turn2),
    );
    assert!(d < 1e-4, "continued: logits differ by {d}");

    // Back by 8 tokens: the ring of 9 no longer holds the window before the edit.
    let cut = turn2.len() - 8;
    let mut edited = turn2[..cut].to_vec();
    edited.push((turn2[cut] + 1) % 500);
    assert_eq!(s.prefill(&edited).unwrap(), edited.len());
    let d = max_abs_diff(
        &s.last_logits().unwrap(),
        &fresh_last_logits(fixture, &edited),
    );
    assert!(d < 1e-4, "restarted: logits differ by {d}");

    // Back by 1 token: within the ring, only the edited token is computed.
    let mut edited2 = edited.clone();
    *edited2.last_mut().unwrap() = (edited[cut] + 1) % 500;
    assert_eq!(s.prefill(&edited2).unwrap(), 1);
    let d = max_abs_diff(
        &s.last_logits().unwrap(),
        &fresh_last_logits(fixture, &edited2),
    );
    assert!(d < 1e-4, "rewound: logits differ by {d}");
}

/// Turns text into a panic on the third token: a stand-in for any bug a hostile file reaches.
struct PanicsOnThird(usize);

impl minerva_engine::TokenText for PanicsOnThird {
    fn push(&mut self, _id: u32) -> String {
        self.0 += 1;
        assert!(self.0 < 3, "text step {} failed", self.0);
        String::new()
    }
}

#[test]
fn a_panic_in_generation_is_an_error_event_and_the_session_says_it_stopped() {
    let handle = Session::new(model("llama/f32"), 256, 0.0).unwrap().spawn();
    let (mut rx, _) = handle.generate(request(PROMPT.to_vec(), 20), Box::new(PanicsOnThird(0)));
    let error = loop {
        match rx
            .blocking_recv()
            .expect("the stream ended without Done or Error")
        {
            Event::Error(e) => break e,
            Event::Done { .. } => panic!("the turn finished despite the panic"),
            _ => {}
        }
    };
    assert!(
        error.contains("text step 3 failed") && error.contains("load the model again"),
        "{error}"
    );
    let (mut rx, _) = handle.generate(request(PROMPT.to_vec(), 2), Box::new(NoText));
    match rx.blocking_recv() {
        Some(Event::Error(e)) => assert!(e.contains("load the model again"), "{e}"),
        other => panic!("expected an error from the stopped session, got {other:?}"),
    }
}

#[test]
fn logprobs_come_with_each_token_and_leave_the_choice_unchanged() {
    let mut s = Session::new(model("llama/f32"), 256, 0.0).unwrap();
    let plain = run(&mut s, &request(PROMPT.to_vec(), 5)).0;
    let mut s = Session::new(model("llama/f32"), 256, 0.0).unwrap();
    let mut req = request(PROMPT.to_vec(), 5);
    req.logprobs = Some(3);
    let mut events = Vec::new();
    s.generate(&req, &AtomicBool::new(false), &mut NoText, &mut |e| {
        events.push(e)
    })
    .unwrap();
    let mut ids = Vec::new();
    let mut logprobs = Vec::new();
    for pair in events.windows(2) {
        if let [Event::Logprobs(l), Event::Token { id, .. }] = pair {
            assert_eq!(l.id, *id, "a token's logprobs come just before it");
            ids.push(*id);
            logprobs.push(l.clone());
        }
    }
    assert_eq!(ids, plain, "greedy tokens with logprobs = without");
    // The first token's log-probabilities are the log-softmax of the prompt's last logits.
    let logits = fresh_last_logits("llama/f32", &PROMPT);
    let max = logits.iter().copied().fold(f32::MIN, f32::max);
    let z: f32 = logits.iter().map(|l| (l - max).exp()).sum();
    let first = &logprobs[0];
    assert_eq!(first.top.len(), 3);
    assert_eq!(first.top[0].0, ids[0], "greedy takes the most likely token");
    for &(id, lp) in &first.top {
        let want = logits[id as usize] - max - z.ln();
        assert!((lp - want).abs() < 1e-4, "token {id}: {lp} vs {want}");
    }
    assert!(first.top.windows(2).all(|w| w[0].1 >= w[1].1));
    assert!((first.logprob - first.top[0].1).abs() < 1e-6);
}
