//! Choosing the next token from logits: greedy, or temperature with top-k, top-p and min-p
//! filters, after an optional repetition penalty; deterministic for a given seed.

/// Sampling settings. The defaults are greedy decoding with no penalty.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// 0 means greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches p (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than min_p times the most likely one (0: none).
    pub min_p: f32,
    /// Penalty > 1 on tokens among the last `repeat_last_n` (logit / penalty if positive,
    /// · penalty if negative); 1 disables it.
    pub repetition_penalty: f32,
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// True when the choice depends on nothing but the largest logit (a backend argmax will do).
    pub fn is_plain_argmax(&self) -> bool {
        self.is_greedy() && self.repetition_penalty == 1.0
    }

    /// How many best candidates decide the choice, when that is fewer than the vocabulary
    /// (top-k without a repetition penalty): a backend's top-k read then suffices.
    pub fn candidates(&self) -> Option<usize> {
        (self.top_k > 0 && self.repetition_penalty == 1.0).then_some(self.top_k)
    }
}

/// SplitMix64: a small, well-mixed generator; plenty for sampling and fully reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Debug, Clone)]
pub struct Sampler {
    pub config: SamplerConfig,
    rng: Rng,
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        let rng = Rng::new(config.seed);
        Sampler { config, rng }
    }

    /// The next token given the logits and the tokens so far.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let dist = self.distribution(logits, history);
        if dist.len() == 1 {
            return dist[0].0;
        }
        let u = self.rng.next_f64();
        let mut acc = 0f64;
        for &(id, p) in &dist {
            acc += p as f64;
            if u < acc {
                return id;
            }
        }
        dist.last().map_or(0, |d| d.0)
    }

    /// The uniform draw of the next device-side choice: the seed's sequence, one per token.
    pub fn next_uniform(&mut self) -> f32 {
        // Below 1 after rounding to f32.
        (self.rng.next_f64() as f32).min(1.0 - f32::EPSILON)
    }

    /// The distinct tokens among the last `repeat_last_n` of `history` (with `one_more`, among
    /// its last `repeat_last_n - 1`: the newest token is still on the device) that the
    /// repetition penalty applies to; none when it is off.
    pub fn penalized(&self, history: &[u32], one_more: bool) -> Vec<u32> {
        let c = &self.config;
        if c.repetition_penalty == 1.0 {
            return Vec::new();
        }
        let window = c.repeat_last_n.saturating_sub(one_more as usize);
        let seen: std::collections::BTreeSet<u32> = history[history.len().saturating_sub(window)..]
            .iter()
            .copied()
            .collect();
        seen.into_iter().collect()
    }

    /// As `sample`, from the best candidates only (`(id, logit)`, at least
    /// `config.candidates()` of them, best first); the same choice as `sample` over all logits
    /// for the same seed.
    pub fn sample_candidates(&mut self, candidates: &[(u32, f32)]) -> u32 {
        let logits: Vec<f32> = candidates.iter().map(|c| c.1).collect();
        let i = self.sample(&logits, &[]) as usize;
        candidates.get(i).map_or(0, |c| c.0)
    }

    /// The distribution `sample` draws from: (token, probability), most likely first. Greedy
    /// decoding gives the single best token with probability 1.
    pub fn distribution(&self, logits: &[f32], history: &[u32]) -> Vec<(u32, f32)> {
        let c = &self.config;
        let mut l = logits.to_vec();
        if c.repetition_penalty != 1.0 {
            let start = history.len().saturating_sub(c.repeat_last_n);
            // Each distinct token is penalized once, however often it occurred.
            let seen: std::collections::BTreeSet<u32> = history[start..].iter().copied().collect();
            for t in seen {
                if let Some(v) = l.get_mut(t as usize) {
                    *v = if *v > 0.0 {
                        *v / c.repetition_penalty
                    } else {
                        *v * c.repetition_penalty
                    };
                }
            }
        }
        let mut order: Vec<u32> = (0..l.len() as u32).collect();
        // Stable: ties keep the lower id first, like argmax.
        order.sort_by(|&a, &b| {
            l[b as usize]
                .partial_cmp(&l[a as usize])
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        if c.is_greedy() || order.len() <= 1 {
            return order.first().map(|&t| vec![(t, 1.0)]).unwrap_or_default();
        }
        if c.top_k > 0 {
            order.truncate(c.top_k);
        }
        let max = l[order[0] as usize];
        let mut probs: Vec<f64> = order
            .iter()
            .map(|&t| (((l[t as usize] - max) / c.temperature) as f64).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        let mut keep = probs.len();
        if c.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, p) in probs.iter().enumerate() {
                acc += p;
                if acc >= c.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        if c.min_p > 0.0 {
            let floor = probs[0] * c.min_p as f64;
            keep = keep.min(probs.iter().take_while(|&&p| p >= floor).count().max(1));
        }
        let kept: f64 = probs[..keep].iter().sum();
        order[..keep]
            .iter()
            .zip(&probs[..keep])
            .map(|(&t, &p)| (t, (p / kept) as f32))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOGITS: [f32; 6] = [2.0, 1.0, 0.5, 0.0, -1.0, 1.5];

    fn softmax(xs: &[f64]) -> Vec<f64> {
        let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = xs.iter().map(|x| (x - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }

    /// Draws many tokens and returns the largest gap between observed and intended frequency.
    fn max_deviation(cfg: SamplerConfig, history: &[u32], intended: &[f64]) -> f64 {
        let mut s = Sampler::new(cfg);
        let draws = 40_000;
        let mut counts = vec![0usize; LOGITS.len()];
        for _ in 0..draws {
            counts[s.sample(&LOGITS, history) as usize] += 1;
        }
        counts
            .iter()
            .zip(intended)
            .map(|(&c, &p)| (c as f64 / draws as f64 - p).abs())
            .fold(0.0, f64::max)
    }

    fn intended(f: impl Fn(usize, f64) -> Option<f64>, temp: f64) -> Vec<f64> {
        let base = softmax(&LOGITS.iter().map(|&x| x as f64 / temp).collect::<Vec<_>>());
        let w: Vec<f64> = base
            .iter()
            .enumerate()
            .map(|(i, &p)| f(i, p).unwrap_or(0.0))
            .collect();
        let s: f64 = w.iter().sum();
        w.iter().map(|x| x / s).collect()
    }

    const TOL: f64 = 0.012;

    #[test]
    fn temperature_matches_softmax() {
        let cfg = SamplerConfig {
            temperature: 0.7,
            seed: 1,
            ..Default::default()
        };
        assert!(max_deviation(cfg, &[], &intended(|_, p| Some(p), 0.7)) < TOL);
    }

    #[test]
    fn top_k_keeps_the_k_best() {
        // Best three: ids 0 (2.0), 5 (1.5), 1 (1.0).
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 3,
            seed: 2,
            ..Default::default()
        };
        let want = intended(|i, p| [0, 5, 1].contains(&i).then_some(p), 1.0);
        assert!(max_deviation(cfg, &[], &want) < TOL);
    }

    #[test]
    fn top_p_keeps_the_smallest_nucleus() {
        let base = intended(|_, p| Some(p), 1.0);
        // Sorted: 0, 5, 1, 2, 3, 4. The nucleus for p reaches p with ids 0 and 5 only.
        let p = (base[0] + base[5] * 0.5) as f32;
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_p: p,
            seed: 3,
            ..Default::default()
        };
        let want = intended(|i, p| [0, 5].contains(&i).then_some(p), 1.0);
        assert!(max_deviation(cfg, &[], &want) < TOL);
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        // p_i / p_max = e^(l_i - 2): keep those ≥ 0.3 → logits ≥ 2 + ln 0.3 ≈ 0.796: ids 0, 5, 1.
        let cfg = SamplerConfig {
            temperature: 1.0,
            min_p: 0.3,
            seed: 4,
            ..Default::default()
        };
        let want = intended(|i, p| [0, 5, 1].contains(&i).then_some(p), 1.0);
        assert!(max_deviation(cfg, &[], &want) < TOL);
    }

    #[test]
    fn repetition_penalty_reshapes_logits() {
        let cfg = SamplerConfig {
            temperature: 1.0,
            repetition_penalty: 2.0,
            seed: 5,
            ..Default::default()
        };
        let mut l: Vec<f64> = LOGITS.iter().map(|&x| x as f64).collect();
        l[0] /= 2.0; // positive: divided
        l[4] *= 2.0; // negative: multiplied
        let want = softmax(&l);
        assert!(max_deviation(cfg, &[0, 4, 0], &want) < TOL);
    }

    #[test]
    fn candidates_give_the_same_choices() {
        let logits: Vec<f32> = (0..300)
            .map(|i| ((i * 7919 % 1000) as f32 / 150.0).sin() * 3.0)
            .collect();
        let cfg = SamplerConfig {
            temperature: 0.9,
            top_k: 20,
            top_p: 0.9,
            min_p: 0.02,
            seed: 11,
            ..Default::default()
        };
        let mut order: Vec<u32> = (0..300).collect();
        order.sort_by(|&a, &b| logits[b as usize].partial_cmp(&logits[a as usize]).unwrap());
        let cands: Vec<(u32, f32)> = order[..20]
            .iter()
            .map(|&i| (i, logits[i as usize]))
            .collect();
        let (mut full, mut top) = (Sampler::new(cfg.clone()), Sampler::new(cfg));
        let a: Vec<u32> = (0..500).map(|_| full.sample(&logits, &[])).collect();
        let b: Vec<u32> = (0..500).map(|_| top.sample_candidates(&cands)).collect();
        assert_eq!(a, b);
        assert!(a.iter().collect::<std::collections::BTreeSet<_>>().len() > 3);
    }

    #[test]
    fn greedy_and_seeds() {
        let mut g = Sampler::new(SamplerConfig::default());
        assert_eq!(g.sample(&LOGITS, &[]), 0);
        let cfg = SamplerConfig {
            temperature: 1.0,
            seed: 42,
            ..Default::default()
        };
        let run = |cfg: SamplerConfig| {
            let mut s = Sampler::new(cfg);
            (0..64).map(|_| s.sample(&LOGITS, &[])).collect::<Vec<_>>()
        };
        assert_eq!(run(cfg.clone()), run(cfg.clone()));
        assert_ne!(run(cfg.clone()), run(SamplerConfig { seed: 43, ..cfg }));
    }
}
