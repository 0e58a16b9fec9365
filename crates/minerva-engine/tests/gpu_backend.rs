//! The GPU backend as the transformer drives it: weights take their stored size on the GPU, a
//! decode step (one token in, its greedy id out) waits once, its work submitted in the pieces
//! `submit_sizes` plans, and greedy turns queue each step before reading the token it embeds.

mod gpu_common;

use minerva_engine::backend::Choice;
use minerva_engine::gpu::context::submit_sizes;
use minerva_engine::gpu::{GpuBackend, GpuError, GpuOptions};
use minerva_engine::model::UNREAD;
use minerva_engine::session::NoText;
use minerva_engine::{CpuBackend, Event, Model, Request, SamplerConfig, Session, StopReason};
use minerva_formats::Checkpoint;
use std::sync::atomic::AtomicBool;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn backend() -> Option<GpuBackend> {
    backend_with(&GpuOptions::default())
}

fn backend_with(opts: &GpuOptions) -> Option<GpuBackend> {
    match GpuBackend::new(opts) {
        Ok(b) => Some(b),
        Err(e @ GpuError::NoAdapter(_)) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: no GPU adapter ({e})");
            None
        }
        Err(e) => panic!("GPU backend unavailable: {e}"),
    }
}

#[test]
fn weights_keep_their_size_and_decode_submits_in_planned_pieces() {
    // Dispatches per decode token of the 2-layer fixtures: the embedding; per llama layer 5 —
    // q/k/v product (the norm folded in), attention (RoPE of q and k and the cache write
    // folded into its one query's decode kernel), output product (adding into the residual
    // stream), gate/up/act product (quantizing x to int8 itself, applying the norm as it does,
    // and writing its results as int8 records), down product (reading them, adding into the
    // residual); then the output product (the final norm folded in: its output is step-local,
    // so not dispatched as well) and argmax. (Gate and up weights that take no int8 x, such as
    // f16 or MLX's 3-bit, have the norm dispatched on its own: 6 a layer.) gpt-oss layers 7: q/k/v
    // with biases, attention with the RoPE and write, output product, router (with the norm
    // folded in, writing its output for the experts), gate/up/activation (routing the token
    // itself), down, combine (adding into the residual). (Products of Q4_0 and Q8_0 weights
    // with vocabulary-sized outputs take int8 x with a quantizing dispatch before them; these
    // fixtures have none.)
    for (fixture, dispatches) in [
        ("llama/gguf-q4_0/llama-Q4_0.gguf", 13),
        ("gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf", 17),
        ("llama/mlx-4bit", 13),
    ] {
        let Some(b) = backend() else { return };
        let ctx = b.context().clone();
        let ckpt = Checkpoint::open(format!("{FIXTURES}/{fixture}")).unwrap();
        let stored: u64 = ckpt.tensors().map(|t| t.stored_bytes() as u64).sum();
        let spec = ckpt.spec().unwrap();
        let mut model = Model::load_with_spec(&ckpt, spec, Box::new(b), 8).unwrap();
        let on_gpu = ctx.weight_bytes();
        // Padding to words and the small tables made at load (RoPE frequencies) only.
        assert!(
            on_gpu >= stored * 99 / 100 && on_gpu <= stored * 105 / 100,
            "{fixture}: {on_gpu} bytes of weights on the GPU for {stored} stored"
        );
        let mut cache = model.new_cache(32).unwrap();
        model.prefill(&mut cache, &[1, 2, 3, 4]).unwrap();
        let mut next = model.argmax().unwrap();
        // The first decode step builds its dispatches; later ones reuse them.
        model.prefill(&mut cache, &[next]).unwrap();
        next = model.argmax().unwrap();
        for _ in 0..3 {
            let (before, launches) = (ctx.submits(), ctx.dispatches());
            model.prefill(&mut cache, &[next]).unwrap();
            next = model.argmax().unwrap();
            let launches = ctx.dispatches() - launches;
            // One wait per step; the step's dispatches go in the pieces `submit_sizes` plans.
            assert_eq!(
                ctx.submits() - before,
                submit_sizes(launches as usize).len() as u64,
                "{fixture}: submits in one decode step of {launches} dispatches"
            );
            assert_eq!(
                launches,
                dispatches,
                "{fixture}: dispatches in one decode step, planned as\n{}",
                model.explain_plan(1e12).unwrap_or_default()
            );
            eprintln!("{fixture}: {launches} dispatches in one decode step");
        }
        // Each layer's gate/up product hands its results to the down product as int8 records.
        if fixture.starts_with("llama/") && ctx.int8_products {
            let plan = model.explain_plan(1e12).unwrap_or_default();
            let handed = plan.matches("gate/up→int8 records").count();
            assert_eq!(handed, 2, "{fixture}: the decode step planned as\n{plan}");
        }
    }
}

#[test]
fn submit_pieces_start_small_and_cover_every_dispatch() {
    assert_eq!(submit_sizes(0), vec![0]);
    assert_eq!(submit_sizes(10), vec![10]);
    assert_eq!(submit_sizes(226), vec![16, 32, 64, 64, 50]);
    for n in 1..500 {
        let sizes = submit_sizes(n);
        assert_eq!(sizes.iter().sum::<usize>(), n);
        assert!(sizes.iter().all(|&s| (1..=64).contains(&s)));
    }
}

/// The llama fixture prompt ("The quick brown fox jumps over the lazy dog.").
const PROMPT: [u32; 24] = [
    1, 330, 223, 449, 358, 77, 295, 407, 80, 486, 90, 402, 354, 82, 85, 321, 381, 273, 269, 67, 92,
    91, 408, 16,
];

fn llama(backend: Box<dyn minerva_engine::Backend>) -> Model {
    let ckpt = Checkpoint::open(format!("{FIXTURES}/llama/f32")).unwrap();
    Model::load(&ckpt, backend).unwrap()
}

fn turn(s: &mut Session, max_tokens: usize, stop: Vec<u32>) -> (Vec<u32>, StopReason) {
    let req = Request {
        prompt: PROMPT.to_vec(),
        max_tokens,
        sampler: SamplerConfig::default(),
        stop,
        logprobs: None,
    };
    let mut ids = Vec::new();
    let stats = s
        .generate(&req, &AtomicBool::new(false), &mut NoText, &mut |e| {
            if let Event::Token { id, .. } = e {
                ids.push(id)
            }
        })
        .unwrap();
    (ids, stats.stop_reason)
}

#[test]
fn greedy_choices_stay_on_the_device_until_read() {
    let exact = GpuOptions {
        kv_f32: true,
        ..Default::default()
    };
    let Some(b) = backend_with(&exact) else {
        return;
    };
    let ctx = b.context().clone();
    let mut model = llama(Box::new(b));
    let mut cache = model.new_cache(64).unwrap();
    model.prefill(&mut cache, &PROMPT).unwrap();
    let first = model.choose_greedy().unwrap();
    assert!(matches!(first, Choice::OnDevice(_)), "{first:?}");
    // The step of the first token is queued before the token is known, and makes the second.
    // The kernel that chose the token moved the step uniform on: the host writes nothing.
    let writes = ctx.step_writes();
    model.decode_choice(&mut cache, first).unwrap();
    assert_eq!(
        ctx.step_writes(),
        writes,
        "a decode step behind a device choice"
    );
    assert_eq!(cache.tokens().last(), Some(&UNREAD));
    let second = model.choose_greedy().unwrap();
    let a = model.read_choice(&mut cache, first).unwrap();
    let b = model.read_choice(&mut cache, second).unwrap();
    assert_eq!(cache.tokens().last(), Some(&a));

    // The same two tokens chosen one synchronous step at a time on the CPU.
    let mut cpu = llama(Box::new(CpuBackend::reference()));
    let mut c = cpu.new_cache(64).unwrap();
    cpu.prefill(&mut c, &PROMPT).unwrap();
    let a_cpu = cpu.argmax().unwrap();
    cpu.prefill(&mut c, &[a_cpu]).unwrap();
    assert_eq!((a, b), (a_cpu, cpu.argmax().unwrap()));
}

#[test]
fn pipelined_greedy_turns_end_like_synchronous_ones() {
    let exact = GpuOptions {
        kv_f32: true,
        ..Default::default()
    };
    let cpu_session =
        |ctx| Session::new(llama(Box::new(CpuBackend::reference())), ctx, 0.0).unwrap();
    let Some(b) = backend_with(&exact) else {
        return;
    };
    let mut gpu = Session::new(llama(Box::new(b)), 256, 0.0).unwrap();
    let (free, reason) = turn(&mut gpu, 8, vec![]);
    assert_eq!(reason, StopReason::MaxTokens);
    assert_eq!(free, turn(&mut cpu_session(256), 8, vec![]).0);
    // The cache holds the prompt and every generated token but the last, all read.
    let mut held = PROMPT.to_vec();
    held.extend(&free[..7]);
    assert_eq!(gpu.cached(), held);

    // A stop token ends the turn at once; the step queued on it stays in the cache.
    let first_stop = free.iter().position(|&t| t == free[2]).unwrap();
    let (ids, reason) = turn(&mut gpu, 8, vec![free[2]]);
    assert_eq!(
        (ids.as_slice(), reason),
        (&free[..=first_stop], StopReason::Stop)
    );
    let mut held = PROMPT.to_vec();
    held.extend(&free[..=first_stop]);
    assert_eq!(gpu.cached(), held);

    // The end of the context stops the turn after the same tokens as on the CPU.
    let Some(b) = backend_with(&exact) else {
        return;
    };
    let mut gpu = Session::new(llama(Box::new(b)), 26, 0.0).unwrap();
    let (ids, reason) = turn(&mut gpu, 10, vec![]);
    assert_eq!(reason, StopReason::ContextFull);
    assert_eq!(ids, turn(&mut cpu_session(26), 10, vec![]).0);
    assert!(!gpu.cached().contains(&UNREAD));
}
