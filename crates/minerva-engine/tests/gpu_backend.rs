//! The GPU backend as the transformer drives it: weights take their stored size on the GPU, and
//! a decode step (one token in, its greedy id out) is one submit.

mod gpu_common;

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
fn weights_keep_their_size_and_decode_is_one_submit_per_token() {
    // Dispatches per decode token of the 2-layer fixtures: the embedding; per llama layer 8 —
    // norm (fused with the residual add before it), q/k/v product, RoPE with the cache write,
    // attention, output product, add + norm, gate/up/act product, down product; then the last
    // add, the row copy, the final norm, the output product and argmax.
    for (fixture, dispatches) in [
        ("llama/gguf-q4_0/llama-Q4_0.gguf", 22),
        ("gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf", 38),
        ("llama/mlx-4bit", 22),
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
            assert_eq!(
                ctx.submits() - before,
                1,
                "{fixture}: submits in one decode step"
            );
            assert_eq!(
                ctx.dispatches() - launches,
                dispatches,
                "{fixture}: dispatches in one decode step"
            );
        }
    }
}
