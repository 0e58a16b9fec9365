//! Checks every number a model file gives before later stages size buffers or loops by it:
//! the layer count against the tensors present, head and expert relations, the vocabulary
//! against the embedding, and finite, in-range norms, RoPE and activation constants. Errors
//! name the file and the key (config.json when config.json is wrong).

use super::{Activation, ModelSpec, RopeScaling};
use crate::checkpoint::Checkpoint;
use crate::error::{FormatError, Result};
use std::collections::BTreeSet;
use std::path::Path;

/// Widths (hidden, FFN, head) above this come from a damaged file, not a model: the largest
/// published models stay under 2^17.
const MAX_WIDTH: usize = 1 << 20;
/// Vocabularies above this are damaged (the largest published ones hold about 2^18 tokens).
const MAX_VOCAB: usize = 1 << 24;
/// Trained contexts above this are damaged (the longest published is 10M tokens, about 2^23.3).
const MAX_CONTEXT: usize = 1 << 26;
/// A context that cannot hold a short prompt and a reply is a damaged value, not a model.
pub const MIN_CONTEXT: usize = 16;
const MAX_HEADS: usize = 1 << 14;
const MAX_EXPERTS: usize = 1 << 14;

/// The file's own spelling of each checked quantity, so messages name the key a user can find.
pub(super) trait KeyNames {
    fn key(&self, field: Field) -> String;
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Field {
    Layers,
    Hidden,
    Heads,
    KvHeads,
    HeadDim,
    Vocab,
    Ffn,
    Experts,
    ExpertsUsed,
    ExpertFfn,
    Context,
    NormEps,
    RopeTheta,
    RopeDim,
    RopeFactor,
    RopeOriginalContext,
    SlidingWindow,
    SwigluLimit,
    SwigluAlpha,
}

/// Transformer blocks in the tensor table: the distinct N of `blk.N.` (GGUF) or `layers.N.`
/// (Hugging Face, MLX) names. Counted, not taken as max+1, so one far-off name cannot claim
/// a billion layers.
pub(super) fn layers_present(ckpt: &Checkpoint) -> BTreeSet<usize> {
    let mut found = BTreeSet::new();
    for t in ckpt.tensors() {
        let mut parts = t.name.split('.');
        while let Some(p) = parts.next() {
            if p == "blk" || p == "layers" {
                if let Some(n) = parts.next().and_then(|n| n.parse::<usize>().ok()) {
                    found.insert(n);
                }
                break;
            }
        }
    }
    found
}

/// The layer count a file states, against the blocks its tensors hold; checked before
/// anything is sized per layer.
pub(super) fn layer_count(
    n_layers: usize,
    present: &BTreeSet<usize>,
    path: &Path,
    names: &dyn KeyNames,
) -> Result<()> {
    let key = names.key(Field::Layers);
    if n_layers == 0 {
        return Err(FormatError::malformed(path, format!("{key} is 0")));
    }
    let contiguous = present.len() == n_layers && present.last() == Some(&(n_layers - 1));
    if !contiguous {
        let held = match (present.first(), present.last()) {
            (Some(a), Some(b)) => format!("{} blocks numbered {a} to {b}", present.len()),
            _ => "no per-layer tensors".to_string(),
        };
        return Err(FormatError::malformed(
            path,
            format!("{key} is {n_layers}, but the tensors hold {held}"),
        ));
    }
    Ok(())
}

fn in_range(
    path: &Path,
    names: &dyn KeyNames,
    field: Field,
    v: usize,
    lo: usize,
    hi: usize,
) -> Result<()> {
    if v < lo || v > hi {
        return Err(FormatError::malformed(
            path,
            format!("{} is {v}, expected {lo} to {hi}", names.key(field)),
        ));
    }
    Ok(())
}

fn positive_finite(path: &Path, names: &dyn KeyNames, field: Field, v: f32) -> Result<()> {
    if !(v.is_finite() && v > 0.0) {
        return Err(FormatError::malformed(
            path,
            format!(
                "{} is {v}, expected a positive finite number",
                names.key(field)
            ),
        ));
    }
    Ok(())
}

/// Every number of a built spec against its sane range and the others it must agree with.
pub(super) fn numbers(spec: &ModelSpec, path: &Path, names: &dyn KeyNames) -> Result<()> {
    use Field::*;
    in_range(path, names, Hidden, spec.hidden_size, 1, MAX_WIDTH)?;
    in_range(path, names, Heads, spec.n_heads, 1, MAX_HEADS)?;
    in_range(path, names, KvHeads, spec.n_kv_heads, 1, spec.n_heads)?;
    if !spec.n_heads.is_multiple_of(spec.n_kv_heads) {
        return Err(FormatError::malformed(
            path,
            format!(
                "{} is {}, which does not divide {} = {}",
                names.key(KvHeads),
                spec.n_kv_heads,
                names.key(Heads),
                spec.n_heads
            ),
        ));
    }
    in_range(path, names, HeadDim, spec.head_dim, 1, MAX_WIDTH)?;
    if spec.n_heads * spec.head_dim > MAX_WIDTH {
        return Err(FormatError::malformed(
            path,
            format!(
                "{} × {} = {} × {} is beyond any model",
                names.key(Heads),
                names.key(HeadDim),
                spec.n_heads,
                spec.head_dim
            ),
        ));
    }
    in_range(path, names, Vocab, spec.vocab_size, 1, MAX_VOCAB)?;
    in_range(path, names, Ffn, spec.ffn, 0, MAX_WIDTH)?;
    if let Some(m) = &spec.moe {
        in_range(path, names, Experts, m.n_experts, 1, MAX_EXPERTS)?;
        in_range(
            path,
            names,
            ExpertsUsed,
            m.experts_per_token,
            1,
            m.n_experts,
        )?;
        in_range(path, names, ExpertFfn, m.expert_ffn, 1, MAX_WIDTH)?;
        if let Some(s) = m.shared_expert_ffn {
            in_range(path, names, ExpertFfn, s, 1, MAX_WIDTH)?;
        }
    } else if spec.ffn == 0 {
        return Err(FormatError::malformed(
            path,
            format!("{} is 0", names.key(Ffn)),
        ));
    }
    in_range(
        path,
        names,
        Context,
        spec.context_length,
        MIN_CONTEXT,
        MAX_CONTEXT,
    )?;
    positive_finite(path, names, NormEps, spec.norm_eps)?;
    if spec.norm_eps >= 1.0 {
        return Err(FormatError::malformed(
            path,
            format!(
                "{} is {}, expected below 1",
                names.key(NormEps),
                spec.norm_eps
            ),
        ));
    }
    positive_finite(path, names, RopeTheta, spec.rope.theta)?;
    if spec.rope.dim == 0 || spec.rope.dim > spec.head_dim || !spec.rope.dim.is_multiple_of(2) {
        return Err(FormatError::malformed(
            path,
            format!(
                "{} gives {} rotated dimensions, expected an even number up to the head size {}",
                names.key(RopeDim),
                spec.rope.dim,
                spec.head_dim
            ),
        ));
    }
    match spec.rope.scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => positive_finite(path, names, RopeFactor, factor)?,
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position,
        } => {
            positive_finite(path, names, RopeFactor, factor)?;
            positive_finite(path, names, RopeFactor, low_freq_factor)?;
            positive_finite(path, names, RopeFactor, high_freq_factor)?;
            if high_freq_factor <= low_freq_factor {
                return Err(FormatError::malformed(
                    path,
                    format!(
                        "{}: high_freq_factor {high_freq_factor} is not above low_freq_factor {low_freq_factor}",
                        names.key(RopeFactor)
                    ),
                ));
            }
            in_range(
                path,
                names,
                RopeOriginalContext,
                original_max_position,
                1,
                MAX_CONTEXT,
            )?;
        }
        RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            attention_factor,
            ..
        } => {
            positive_finite(path, names, RopeFactor, factor)?;
            positive_finite(path, names, RopeFactor, beta_fast)?;
            positive_finite(path, names, RopeFactor, beta_slow)?;
            if let Some(a) = attention_factor {
                positive_finite(path, names, RopeFactor, a)?;
            }
            in_range(
                path,
                names,
                RopeOriginalContext,
                original_max_position,
                1,
                MAX_CONTEXT,
            )?;
        }
    }
    if let Some(w) = spec.sliding_window {
        in_range(path, names, SlidingWindow, w, 1, MAX_CONTEXT)?;
    }
    if let Activation::GptOssClamped { alpha, limit } = spec.activation {
        positive_finite(path, names, SwigluLimit, limit)?;
        positive_finite(path, names, SwigluAlpha, alpha)?;
    }
    Ok(())
}

/// The embedding table must be [vocab, hidden]: when it is not, the stated numbers are what is
/// wrong (config.json or the GGUF's keys), and the message says so with both sides.
pub(super) fn embedding(
    spec: &ModelSpec,
    ckpt: &Checkpoint,
    embedding_name: Option<String>,
    stated_in: &Path,
    names: &dyn KeyNames,
) -> Result<()> {
    let Some(name) = embedding_name else {
        return Ok(());
    };
    let Some(t) = ckpt.tensor(&name) else {
        return Err(FormatError::not_a_model(
            ckpt.main_path(),
            format!("the token embedding '{name}' is missing"),
        ));
    };
    let expected = [spec.vocab_size, spec.hidden_size];
    if t.shape != expected {
        return Err(FormatError::malformed(
            stated_in,
            format!(
                "{} is {} and {} is {}, but the token embedding '{name}' is {:?}",
                names.key(Field::Vocab),
                expected[0],
                names.key(Field::Hidden),
                expected[1],
                t.shape
            ),
        ));
    }
    Ok(())
}
