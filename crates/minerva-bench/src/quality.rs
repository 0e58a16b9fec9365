//! Quality of a format against a reference: mean and largest KL divergence of the next-token
//! distributions, how often both pick the same top token, and the perplexity of the text. A
//! remote engine's quality is its top-1 agreement alone (see [`crate::agreement`]).

use minerva_engine::Model;
use serde::Serialize;

/// How one format's predictions compare with the reference's over the same tokens. A remote
/// engine gives only its top token per position: its KL and perplexity are None.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Quality {
    /// Positions compared.
    pub positions: usize,
    /// Mean KL(reference ‖ format) in nats.
    pub kl_mean: Option<f64>,
    pub kl_max: Option<f64>,
    /// Share of positions whose most likely next token is the reference's.
    pub top1_agreement: f64,
    /// exp of the mean negative log-likelihood of the text's next tokens under this format.
    pub perplexity: Option<f64>,
    /// A remote engine's tokens left out of the comparison, where the reference's tokenizer
    /// does not have them as one token (None for a local format).
    #[serde(default)]
    pub unaligned: Option<usize>,
}

/// log-softmax in f64, so tiny probabilities keep their logs.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let sum: f64 = logits.iter().map(|&v| (f64::from(v) - max).exp()).sum();
    let log_z = max + sum.ln();
    logits.iter().map(|&v| f64::from(v) - log_z).collect()
}

pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &x)| {
            if x > best.1 {
                (i, x)
            } else {
                best
            }
        })
        .0
}

/// Accumulates the comparison position by position.
#[derive(Debug, Default)]
pub struct Drift {
    positions: usize,
    kl_sum: f64,
    kl_max: f64,
    agree: usize,
    nll_sum: f64,
    scored: usize,
}

impl Drift {
    /// One position: the reference's and this format's logits, and the token that follows in
    /// the text (None at the last position).
    pub fn add(&mut self, reference: &[f32], logits: &[f32], next: Option<u32>) {
        let (lp_ref, lp) = (log_softmax(reference), log_softmax(logits));
        let kl: f64 = lp_ref
            .iter()
            .zip(&lp)
            .map(|(&a, &b)| a.exp() * (a - b))
            .sum::<f64>()
            .max(0.0);
        self.kl_sum += kl;
        self.kl_max = self.kl_max.max(kl);
        self.agree += usize::from(argmax(reference) == argmax(logits));
        self.positions += 1;
        if let Some(t) = next.and_then(|t| lp.get(t as usize)) {
            self.nll_sum -= t;
            self.scored += 1;
        }
    }

    pub fn finish(&self) -> Quality {
        let n = self.positions.max(1) as f64;
        Quality {
            positions: self.positions,
            kl_mean: Some(self.kl_sum / n),
            kl_max: Some(self.kl_max),
            top1_agreement: self.agree as f64 / n,
            perplexity: Some((self.nll_sum / self.scored.max(1) as f64).exp()),
            unaligned: None,
        }
    }
}

/// The logits at every position of `ids` (row-major, `ids.len()` × vocabulary), computed in
/// chunks of `chunk` tokens over one cache.
pub fn logits_over(
    model: &mut Model,
    ids: &[u32],
    chunk: usize,
) -> minerva_engine::Result<Vec<f32>> {
    let mut cache = model.new_cache(ids.len().max(1))?;
    let mut out = Vec::with_capacity(ids.len() * model.spec.vocab_size);
    for part in ids.chunks(chunk.max(1)) {
        out.extend(model.score(&mut cache, part)?);
    }
    model.free_cache(cache);
    Ok(out)
}

/// Compares `logits` with `reference` (both `ids.len()` × `vocab`) over the text `ids`.
pub fn compare(reference: &[f32], logits: &[f32], ids: &[u32], vocab: usize) -> Quality {
    let mut drift = Drift::default();
    for (i, (r, l)) in reference
        .chunks(vocab)
        .zip(logits.chunks(vocab))
        .enumerate()
    {
        drift.add(r, l, ids.get(i + 1).copied());
    }
    drift.finish()
}
