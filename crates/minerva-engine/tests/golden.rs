//! Golden tests: every fixture model run on the CPU backend against the reference logits and
//! greedy continuations computed by transformers over the same (dequantized) weights.

use minerva_engine::model::DEFAULT_MAX_BATCH;
use minerva_engine::{CpuBackend, Model};
use minerva_formats::{Checkpoint, RopeScaling};
use safetensors::SafeTensors;
use std::path::{Path, PathBuf};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

/// Reference logits must agree to this max abs difference (the fixtures' suggestion for a
/// float32 engine; observed arithmetic noise is about 1e-5).
const TOL: f32 = 1e-3;

/// Below this top1 − top2 margin a greedy step may flip on arithmetic noise: teacher-force.
const NEAR_TIE: f32 = 1e-3;

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

/// Loads a fixture, checks the logits of one pass over the prompt, then the greedy
/// continuation (free-running, or teacher-forced where a step is a near tie) and the logits of
/// every greedy step.
fn check(fixture: &str, max_batch: usize) {
    check_with(fixture, max_batch, |_| {});
}

/// As `check`, with a change to the spec read from the checkpoint.
fn check_with(
    fixture: &str,
    max_batch: usize,
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
    let mut model = Model::load_with_spec(&ckpt, spec, Box::new(CpuBackend::new()), max_batch)
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
    assert!(d <= TOL, "{fixture}: prompt logits differ by {d}");
    model.free_cache(cache);

    // Greedy continuation with the KV cache, one token per step.
    let step_logits = (!truncated).then(|| floats(&reference, "greedy_step_logits"));
    let near_tie = match &step_logits {
        Some(s) => s.chunks_exact(vocab).any(|r| top2_gap(r) < NEAR_TIE),
        None => false,
    };
    let mut cache = model.new_cache(ids.len() + greedy.len()).unwrap();
    model.prefill(&mut cache, &ids).unwrap();
    let mut produced = Vec::new();
    for k in 0..greedy.len() {
        let row = model.last_logits().unwrap();
        if let Some(s) = &step_logits {
            let d = max_abs_diff(&row, &s[k * vocab..(k + 1) * vocab]);
            assert!(d <= TOL, "{fixture}: greedy step {k} logits differ by {d}");
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

#[test]
fn llama_f32() {
    check("llama/f32", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_bf16() {
    check("llama/bf16", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_f16() {
    check("llama/f16", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_gguf_f32() {
    check("llama/gguf-f32", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_gguf_q8_0() {
    check("llama/gguf-q8_0", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_gguf_q4_0() {
    check("llama/gguf-q4_0", DEFAULT_MAX_BATCH);
}

#[test]
fn llama_mlx_4bit() {
    check("llama/mlx-4bit", DEFAULT_MAX_BATCH);
}

#[test]
fn qwen3_f32() {
    check("qwen3/f32", DEFAULT_MAX_BATCH);
}

#[test]
fn qwen3_gguf_q8_0() {
    check("qwen3/gguf-q8_0", DEFAULT_MAX_BATCH);
}

#[test]
fn mixtral_f32() {
    check("mixtral/f32", DEFAULT_MAX_BATCH);
}

#[test]
fn mixtral_gguf_q4_k_m() {
    check("mixtral/gguf-q4_k_m", DEFAULT_MAX_BATCH);
}

#[test]
fn gpt_oss_f32() {
    check("gpt_oss/f32", DEFAULT_MAX_BATCH);
}

#[test]
fn gpt_oss_gguf_mxfp4_moe() {
    check("gpt_oss/gguf-mxfp4_moe", DEFAULT_MAX_BATCH);
}

/// Prefill in chunks of 3 tokens: chunk boundaries, and gpt-oss's sliding-window layer kept
/// as a ring shorter than the context, must not change any result.
#[test]
fn gpt_oss_f32_chunked_prefill() {
    check("gpt_oss/f32", 3);
}

/// YaRN with the correction range rounded (llama.cpp's and mlx-lm's variant) against the
/// reference computed by transformers with `truncate: true`.
#[test]
fn gpt_oss_f32_yarn_truncated() {
    check_with("gpt_oss/f32", DEFAULT_MAX_BATCH, |spec| {
        match &mut spec.rope.scaling {
            RopeScaling::Yarn { truncate, .. } => *truncate = true,
            other => panic!("gpt-oss spec without YaRN: {other:?}"),
        }
    });
}

/// A long prompt runs its products and attention on the thread pool, single decode steps on
/// the calling thread: both must give the same logits.
#[test]
fn long_prefill_agrees_with_token_by_token_decoding() {
    for fixture in ["llama/f32", "gpt_oss/f32"] {
        let ckpt = Checkpoint::open(Path::new(FIXTURES).join(fixture)).unwrap();
        let mut model = Model::load(&ckpt, Box::new(CpuBackend::new())).unwrap();
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
                d < 1e-4,
                "{fixture}: position {row}: decode and prefill differ by {d}"
            );
        }
    }
}
