//! The golden check shared by the backends' golden tests: a fixture model against the reference
//! logits and greedy continuations computed by transformers over the same (dequantized) weights.
#![allow(dead_code)]

use minerva_engine::{Backend, Model};
use minerva_formats::{Checkpoint, RopeScaling};
use safetensors::SafeTensors;
use std::path::{Path, PathBuf};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

/// Reference logits must agree to this max abs difference (the fixtures' suggestion for a
/// float32 engine; observed arithmetic noise is about 1e-5).
pub const TOL: f32 = 1e-3;

/// The same for the CPU's default products, which round activations to 8 bits per block of 32
/// before every product (as llama.cpp's CPU path does): the fixtures' logits (standard
/// deviation ≈ 1.3, largest ≈ 5.5) then move by up to 0.17 (measured over every fixture).
pub const FAST_TOL: f32 = 0.3;

/// [`FAST_TOL`] for mixture-of-experts fixtures: where a token's router has a near tie, the
/// rounded activations can pick another expert, and that position's logits jump (gpt-oss:
/// 0.44 and 0.58 at two of 39 positions, the rest ≤ 0.18).
pub const FAST_TOL_MOE: f32 = 0.75;

/// Below this top1 − top2 margin (or the tolerance, if larger) a greedy step may flip on
/// arithmetic noise: teacher-force.
pub const NEAR_TIE: f32 = 1e-3;

/// The model path of a fixture folder: the GGUF file inside it, or the folder itself.
fn model_path(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "gguf"))
        .unwrap_or_else(|| dir.to_path_buf())
}

fn ints(st: &SafeTensors, name: &str) -> Vec<u32> {
    let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    t.data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32)
        .collect()
}

fn floats(st: &SafeTensors, name: &str) -> Vec<f32> {
    let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn top2_gap(row: &[f32]) -> f32 {
    let mut s = row.to_vec();
    s.sort_by(|a, b| b.partial_cmp(a).unwrap());
    s[0] - s[1]
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Loads a fixture on `backend`, checks the logits of one pass over the prompt (within `tol`),
/// then the greedy continuation (free-running, or teacher-forced where a step is a near tie)
/// and the logits of every greedy step; `adjust` changes the spec read from the checkpoint.
pub fn check_on(
    backend: Box<dyn Backend>,
    fixture: &str,
    max_batch: usize,
    tol: f32,
    adjust: impl FnOnce(&mut minerva_formats::ModelSpec),
) {
    let dir = Path::new(FIXTURES).join(fixture);
    let ckpt = Checkpoint::open(model_path(&dir)).unwrap_or_else(|e| panic!("{fixture}: {e}"));
    let mut spec = ckpt.spec().unwrap_or_else(|e| panic!("{fixture}: {e}"));
    adjust(&mut spec);
    let vocab = spec.vocab_size;
    // The gpt-oss references also hold the YaRN variant with a rounded correction range:
    // compare with the one the spec asks for.
    let truncated = matches!(spec.rope.scaling, RopeScaling::Yarn { truncate: true, .. });
    let suffix = if truncated { "_yarn_truncated" } else { "" };
    let mut model = Model::load_with_spec(&ckpt, spec, backend, max_batch)
        .unwrap_or_else(|e| panic!("{fixture}: {e}"));

    let bytes = std::fs::read(dir.join("reference.safetensors")).unwrap();
    let reference = SafeTensors::deserialize(&bytes).unwrap();
    let ids = ints(&reference, "input_ids");
    let want_logits = floats(&reference, &format!("logits{suffix}"));
    let greedy = ints(&reference, &format!("greedy_ids{suffix}"));

    // One forward pass over the prompt, no cache reuse.
    let mut cache = model.new_cache(ids.len() + greedy.len()).unwrap();
    let logits = model.score(&mut cache, &ids).unwrap();
    let d = max_abs_diff(&logits, &want_logits);
    eprintln!("{fixture}: prompt logits max abs diff {d:.2e} (yarn truncated: {truncated})");
    assert!(d <= tol, "{fixture}: prompt logits differ by {d}");
    model.free_cache(cache);

    // Greedy continuation with the KV cache, one token per step.
    let step_logits = (!truncated).then(|| floats(&reference, "greedy_step_logits"));
    let near_tie = match &step_logits {
        Some(s) => s
            .chunks_exact(vocab)
            .any(|r| top2_gap(r) < NEAR_TIE.max(tol)),
        None => false,
    };
    let mut cache = model.new_cache(ids.len() + greedy.len()).unwrap();
    model.prefill(&mut cache, &ids).unwrap();
    let mut produced = Vec::new();
    for k in 0..greedy.len() {
        let row = model.last_logits().unwrap();
        if let Some(s) = &step_logits {
            let d = max_abs_diff(&row, &s[k * vocab..(k + 1) * vocab]);
            assert!(d <= tol, "{fixture}: greedy step {k} logits differ by {d}");
        }
        let next = model.argmax().unwrap();
        assert_eq!(
            next,
            argmax(&row),
            "{fixture}: backend argmax disagrees with the logits"
        );
        produced.push(next);
        // Teacher-forcing feeds the reference token, free-running our own.
        let feed = if near_tie { greedy[k] } else { next };
        if k + 1 < greedy.len() {
            model.prefill(&mut cache, &[feed]).unwrap();
        }
    }
    if !near_tie {
        assert_eq!(produced, greedy, "{fixture}: greedy continuation");
    }
}

/// Logits of a 200-token prompt scored in one pass against the same positions reached by a
/// 150-token prefill and single decode steps (prefill products and attention against decode
/// ones), within `tol`.
pub fn prefill_agrees_with_decoding(backend: impl Fn() -> Box<dyn Backend>, tol: f32) {
    for fixture in ["llama/f32", "gpt_oss/f32"] {
        let ckpt = Checkpoint::open(Path::new(FIXTURES).join(fixture)).unwrap();
        let mut model = Model::load(&ckpt, backend()).unwrap();
        let vocab = model.spec.vocab_size as u32;
        let ids: Vec<u32> = (0..200u32).map(|i| (i * 37 + 11) % vocab).collect();
        let mut cache = model.new_cache(256).unwrap();
        let all = model.score(&mut cache, &ids).unwrap();
        let mut cache = model.new_cache(256).unwrap();
        model.prefill(&mut cache, &ids[..150]).unwrap();
        for (k, &id) in ids[150..].iter().enumerate() {
            model.prefill(&mut cache, &[id]).unwrap();
            let row = 150 + k;
            let want = &all[row * vocab as usize..(row + 1) * vocab as usize];
            let d = max_abs_diff(&model.last_logits().unwrap(), want);
            assert!(
                d < tol,
                "{fixture}: position {row}: decode and prefill differ by {d}"
            );
        }
    }
}
