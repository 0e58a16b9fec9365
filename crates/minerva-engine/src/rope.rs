//! RoPE frequencies from the spec: the plain inverse frequencies θ^(−2i/d) and the linear,
//! llama3 and YaRN rescalings, computed the way Hugging Face transformers computes them.

use minerva_formats::{RopeScaling, RopeSpec};
use std::f64::consts::PI;

/// The `dim / 2` inverse frequencies and the factor applied to cos and sin.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeFreqs {
    pub inv_freq: Vec<f32>,
    pub attention_factor: f32,
}

pub fn rope_freqs(rope: &RopeSpec) -> RopeFreqs {
    let dim = rope.dim;
    let base = rope.theta as f64;
    let plain: Vec<f64> = (0..dim / 2)
        .map(|i| 1.0 / base.powf((2 * i) as f64 / dim as f64))
        .collect();
    let (inv, attention_factor) = match rope.scaling {
        RopeScaling::None => (plain, 1.0),
        RopeScaling::Linear { factor } => (plain.iter().map(|f| f / factor as f64).collect(), 1.0),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position,
        } => {
            let (factor, lo, hi) = (
                factor as f64,
                low_freq_factor as f64,
                high_freq_factor as f64,
            );
            let old = original_max_position as f64;
            let (low_wavelen, high_wavelen) = (old / lo, old / hi);
            let inv = plain
                .iter()
                .map(|&f| {
                    let wavelen = 2.0 * PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - lo) / (hi - lo);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect();
            (inv, 1.0)
        }
        RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            truncate,
            attention_factor,
        } => {
            let factor = factor as f64;
            let correction_dim = |rotations: f64| {
                dim as f64 * (original_max_position as f64 / (rotations * 2.0 * PI)).ln()
                    / (2.0 * base.ln())
            };
            let (mut low, mut high) = (
                correction_dim(beta_fast as f64),
                correction_dim(beta_slow as f64),
            );
            if truncate {
                low = low.floor();
                high = high.ceil();
            }
            let low = low.max(0.0);
            let high = high.min(dim as f64 - 1.0);
            let high = if low == high { high + 0.001 } else { high };
            let inv = plain
                .iter()
                .enumerate()
                .map(|(i, &extrapolation)| {
                    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    let extrapolation_weight = 1.0 - ramp;
                    let interpolation = extrapolation / factor;
                    interpolation * (1.0 - extrapolation_weight)
                        + extrapolation * extrapolation_weight
                })
                .collect();
            let af = match attention_factor {
                Some(a) => a as f64,
                None if factor <= 1.0 => 1.0,
                None => 0.1 * factor.ln() + 1.0,
            };
            (inv, af)
        }
    };
    RopeFreqs {
        inv_freq: inv.iter().map(|&f| f as f32).collect(),
        attention_factor: attention_factor as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minerva_formats::RopeStyle;

    fn spec(scaling: RopeScaling) -> RopeSpec {
        RopeSpec {
            theta: 10000.0,
            style: RopeStyle::Halves,
            dim: 64,
            scaling,
        }
    }

    #[test]
    fn plain_frequencies() {
        let f = rope_freqs(&spec(RopeScaling::None));
        assert_eq!(f.inv_freq.len(), 32);
        assert_eq!(f.inv_freq[0], 1.0);
        assert!((f.inv_freq[1] - 10000f32.powf(-2.0 / 64.0)).abs() < 1e-7);
        assert_eq!(f.attention_factor, 1.0);
    }

    #[test]
    fn yarn_keeps_high_and_divides_low_frequencies() {
        let s = RopeScaling::Yarn {
            factor: 8.0,
            original_max_position: 4096,
            beta_fast: 32.0,
            beta_slow: 1.0,
            truncate: true,
            attention_factor: None,
        };
        let plain = rope_freqs(&spec(RopeScaling::None)).inv_freq;
        let f = rope_freqs(&spec(s));
        assert_eq!(f.inv_freq[0], plain[0]);
        assert!((f.inv_freq[31] - plain[31] / 8.0).abs() < 1e-12);
        assert!((f.attention_factor - (0.1 * 8f32.ln() + 1.0)).abs() < 1e-6);
    }
}
