//! The damage the first mutation campaign found, as committed inputs (tests/fixtures/hostile,
//! written by tools/make_hostile_fixtures.py): each is refused by the stage that owns the
//! check, with an error naming the file and the key, where it used to panic, abort, hang or
//! pass silently. The undamaged tiny models run every stage.

use minerva_mutate::run::{run_case, Outcome, Stage};
use std::path::PathBuf;

fn hostile(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/hostile")
        .join(name)
}

/// The case is refused at `stage` with a message holding every one of `words`.
fn refused(name: &str, stage: Stage, words: &[&str]) {
    match run_case(&hostile(name)) {
        Outcome::Refused(s, msg) => {
            assert_eq!(s, stage, "{name}: {msg}");
            for w in words {
                assert!(msg.contains(w), "{name}: '{w}' missing from: {msg}");
            }
        }
        other => panic!("{name}: expected a refusal at {stage:?}, got {other:?}"),
    }
}

#[test]
fn the_undamaged_tiny_models_run_every_stage() {
    assert_eq!(run_case(&hostile("valid.gguf")), Outcome::Ran);
    assert_eq!(run_case(&hostile("valid")), Outcome::Ran);
}

/// Rows 1–3: layer counts of 2^63 (capacity overflow), 2^40 (abort) and 10^8 (hang, or a
/// gigabyte of `info --json`) are checked against the tensors before anything is sized.
#[test]
fn huge_layer_counts_are_refused_against_the_tensors_present() {
    for n in ["2e63", "2e40", "1e8"] {
        refused(
            &format!("block-count-{n}.gguf"),
            Stage::Spec,
            &[
                "block-count",
                "llama.block_count",
                "2 blocks numbered 0 to 1",
            ],
        );
        refused(
            &format!("layers-{n}"),
            Stage::Spec,
            &["config.json", "num_hidden_layers", "2 blocks"],
        );
    }
    refused(
        "block-count-0.gguf",
        Stage::Spec,
        &["llama.block_count is 0"],
    );
}

/// Row 4: a negative gpt-oss swiglu_limit (the CPU GLU's clamp panicked on it).
#[test]
fn a_negative_swiglu_limit_is_refused() {
    refused(
        "swiglu-limit-negative",
        Stage::Spec,
        &["config.json", "swiglu_limit is -1"],
    );
}

/// Row 5: tokenizers 0.22 panics on a tokenizer.json cut inside its decoder section.
#[test]
fn a_tokenizer_cut_in_its_decoder_is_an_error() {
    refused(
        "tokenizer-cut-in-decoder",
        Stage::Tokenizer,
        &["tokenizer.json", "not a valid tokenizer.json"],
    );
}

/// Row 6: a missing, null, 0 or 1 context length is the file's fault, said with its key.
#[test]
fn a_missing_or_tiny_context_names_the_file_and_key() {
    refused(
        "context-missing",
        Stage::Spec,
        &["config.json", "max_position_embeddings: missing"],
    );
    refused(
        "context-null",
        Stage::Spec,
        &["config.json", "max_position_embeddings: missing"],
    );
    refused(
        "context-0",
        Stage::Spec,
        &["config.json", "max_position_embeddings is 0"],
    );
    refused(
        "context-1",
        Stage::Spec,
        &["config.json", "max_position_embeddings is 1"],
    );
    refused(
        "context-length-1.gguf",
        Stage::Spec,
        &["llama.context_length is 1"],
    );
}

/// Accepted silently before: zero, negative, NaN or infinite norm epsilon and RoPE base.
#[test]
fn bad_norm_and_rope_constants_are_refused() {
    for v in ["0", "negative", "nan", "inf"] {
        refused(
            &format!("rms-eps-{v}.gguf"),
            Stage::Spec,
            &["llama.attention.layer_norm_rms_epsilon"],
        );
        refused(
            &format!("rope-theta-{v}.gguf"),
            Stage::Spec,
            &["llama.rope.freq_base"],
        );
    }
}

/// Reported as a shape mismatch in model.safetensors before: config.json is blamed.
#[test]
fn a_wrong_vocabulary_or_width_blames_config_json() {
    refused(
        "vocab-size-wrong",
        Stage::Spec,
        &[
            "config.json",
            "vocab_size is 1000",
            "model.embed_tokens.weight",
            "[512, 8]",
        ],
    );
    refused(
        "hidden-size-wrong",
        Stage::Spec,
        &["config.json", "hidden_size is 16"],
    );
}
