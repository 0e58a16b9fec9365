//! The GPU backend as the transformer drives it: weights take their stored size on the GPU, and
//! a decode step (one token in, its greedy id out) waits once, its work submitted in the pieces
//! `submit_sizes` plans.

mod gpu_common;

use minerva_engine::gpu::context::submit_sizes;
use minerva_engine::gpu::{GpuBackend, GpuError, GpuOptions};
use minerva_engine::Model;
use minerva_formats::Checkpoint;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn backend() -> Option<GpuBackend> {
    match GpuBackend::new(&GpuOptions::default()) {
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
    // Dispatches per decode token of the 2-layer fixtures: the embedding; per llama layer 6 —
    // q/k/v product (the norm folded in), RoPE with the cache write, attention, output product
    // (adding into the residual stream), gate/up/act product (the norm folded in), down product
    // (adding into the residual); then the final norm (folded into the output product, and
    // dispatched as well when the step is read back), the output product and argmax. gpt-oss
    // layers: q/k/v with biases 1, RoPE + write 1, attention 1, output product 1, router (with
    // the norm folded in, writing its output for the experts), routing, gate/up/activation,
    // down, combine 5, residual add 1.
    for (fixture, dispatches) in [
        ("llama/gguf-q4_0/llama-Q4_0.gguf", 16),
        ("gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf", 24),
        ("llama/mlx-4bit", 16),
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
                launches, dispatches,
                "{fixture}: dispatches in one decode step"
            );
            eprintln!("{fixture}: {launches} dispatches in one decode step");
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
