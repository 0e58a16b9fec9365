//! Quantization policies: which dtype each tensor gets. Mixed recipes like llama.cpp's Q4_K_M
//! (Q6_K for the output and some attn_v / ffn_down) or mlx-lm's gpt-oss recipe (router at 8
//! bits) are a base dtype plus per-role overrides.

use crate::dtype::DType;
use crate::names::{Role, TensorId};

/// A named recipe the command line accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantRecipe {
    /// One dtype for every quantizable matrix.
    Uniform(DType),
    /// llama.cpp Q4_K_M / Q5_K_M: the base K-quant, Q6_K for the output and for attn_v and
    /// ffn_down on the first eighth, the last eighth and every third layer between.
    KMixed(DType),
}

/// How each tensor is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantPolicy {
    pub recipe: QuantRecipe,
    /// Dtype of 1-D tensors and of anything that cannot take the chosen quant.
    pub fallback: DType,
    /// Per-role overrides (e.g. the MoE router kept at 8 bits).
    pub overrides: Vec<(Role, DType)>,
    pub n_layers: usize,
    /// GGUF: the router stays F32 (llama.cpp never quantizes `ffn_gate_inp`).
    pub keep_router_plain: bool,
}

impl QuantPolicy {
    pub fn uniform(dtype: DType, fallback: DType, n_layers: usize) -> Self {
        QuantPolicy {
            recipe: QuantRecipe::Uniform(dtype),
            fallback,
            overrides: Vec::new(),
            n_layers,
            keep_router_plain: false,
        }
    }

    /// llama.cpp's layer rule for the K_M mixes.
    fn more_bits(&self, layer: usize) -> bool {
        let n = self.n_layers.max(1);
        layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2
    }

    /// The dtype a tensor gets before checking that its rows fit the blocks.
    pub fn choose(&self, id: TensorId) -> DType {
        if !id.is_matrix() || (self.keep_router_plain && id.role == Role::Router) {
            return self.fallback;
        }
        if let Some(&(_, d)) = self.overrides.iter().find(|(r, _)| *r == id.role) {
            return d;
        }
        match self.recipe {
            QuantRecipe::Uniform(d) => d,
            QuantRecipe::KMixed(base) => match id.role {
                Role::Output => DType::Q6_K,
                Role::AttnV | Role::FfnDown | Role::ExpDown
                    if id.layer.is_some_and(|l| self.more_bits(l)) =>
                {
                    DType::Q6_K
                }
                _ => base,
            },
        }
    }
}

/// The dtype actually used for rows of `row_len` values: llama.cpp's fallbacks when 256-value
/// super-blocks do not fit (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0), then F16 when even 32-value
/// blocks do not.
pub fn fit_row(dtype: DType, row_len: usize) -> DType {
    if super::row_buffer_bytes(dtype, row_len).is_some() {
        return dtype;
    }
    let fallback = match dtype {
        DType::Q4_K => DType::Q5_0,
        DType::Q5_K => DType::Q5_1,
        DType::Q6_K => DType::Q8_0,
        DType::MlxAffine { bits, .. } => {
            return [64u16, 32]
                .into_iter()
                .map(|g| DType::MlxAffine { bits, group: g })
                .find(|d| super::row_buffer_bytes(*d, row_len).is_some())
                .unwrap_or(DType::BF16)
        }
        DType::MlxMxfp4 => DType::BF16,
        _ => DType::F16,
    };
    if super::row_buffer_bytes(fallback, row_len).is_some() {
        fallback
    } else {
        DType::F16
    }
}

/// The GGUF policy for a `--quant` name, following llama-quantize's choices: `q4_k_m` and
/// `q5_k_m` are the K_M mixes; the 32-block types keep the output (or the tied embedding) in
/// Q6_K; `mxfp4` on an MoE model is MXFP4_MOE (experts MXFP4, other matrices Q8_0); the router
/// and 1-D tensors stay F32.
pub fn gguf_policy(quant: &str, n_layers: usize, tied: bool, moe: bool) -> Option<QuantPolicy> {
    let base = |d| QuantPolicy {
        keep_router_plain: true,
        ..QuantPolicy::uniform(d, DType::F32, n_layers)
    };
    let output_q6 = |mut p: QuantPolicy| {
        p.overrides.push((
            if tied { Role::TokenEmbd } else { Role::Output },
            DType::Q6_K,
        ));
        p
    };
    Some(match quant.to_ascii_lowercase().as_str() {
        "f32" => base(DType::F32),
        "f16" => base(DType::F16),
        "bf16" => base(DType::BF16),
        "q8_0" => base(DType::Q8_0),
        "q4_0" => output_q6(base(DType::Q4_0)),
        "q4_1" => output_q6(base(DType::Q4_1)),
        "q5_0" => output_q6(base(DType::Q5_0)),
        "q5_1" => output_q6(base(DType::Q5_1)),
        "q6_k" => base(DType::Q6_K),
        // The K_M mixes already give `output` Q6_K; a tied embedding stands in for it.
        "q4_k_m" => output_q6(QuantPolicy {
            recipe: QuantRecipe::KMixed(DType::Q4_K),
            ..base(DType::Q4_K)
        }),
        "q5_k_m" => output_q6(QuantPolicy {
            recipe: QuantRecipe::KMixed(DType::Q5_K),
            ..base(DType::Q5_K)
        }),
        "mxfp4" if moe => {
            let mut p = base(DType::Q8_0);
            p.recipe = QuantRecipe::Uniform(DType::Q8_0);
            p.overrides = vec![
                (Role::ExpGate, DType::MXFP4),
                (Role::ExpUp, DType::MXFP4),
                (Role::ExpDown, DType::MXFP4),
            ];
            p
        }
        "mxfp4" => base(DType::MXFP4),
        _ => return None,
    })
}

/// The `--quant` names GGUF accepts.
pub const GGUF_QUANTS: &str = "f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k_m q5_k_m q6_k mxfp4";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_k_m_matches_llama_cpp_choices() {
        // The mixtral fixture (1 layer) stores attn_v, ffn_down_exps and output as Q6_K.
        let p = QuantPolicy {
            keep_router_plain: true,
            ..QuantPolicy {
                recipe: QuantRecipe::KMixed(DType::Q4_K),
                ..QuantPolicy::uniform(DType::Q4_K, DType::F32, 1)
            }
        };
        assert_eq!(p.choose(TensorId::layer(Role::AttnV, 0)), DType::Q6_K);
        assert_eq!(p.choose(TensorId::layer(Role::ExpDown, 0)), DType::Q6_K);
        assert_eq!(p.choose(TensorId::layer(Role::AttnQ, 0)), DType::Q4_K);
        assert_eq!(p.choose(TensorId::layer(Role::Router, 0)), DType::F32);
        assert_eq!(p.choose(TensorId::global(Role::Output)), DType::Q6_K);
        assert_eq!(p.choose(TensorId::layer(Role::AttnNorm, 0)), DType::F32);
        let p24 = QuantPolicy {
            recipe: QuantRecipe::KMixed(DType::Q4_K),
            ..QuantPolicy::uniform(DType::Q4_K, DType::F32, 24)
        };
        let v: Vec<bool> = (0..24)
            .map(|l| p24.choose(TensorId::layer(Role::AttnV, l)) == DType::Q6_K)
            .collect();
        assert_eq!(v.iter().filter(|&&b| b).count(), 3 + 3 + 6);
        assert_eq!(fit_row(DType::Q4_K, 64), DType::Q5_0);
        assert_eq!(fit_row(DType::Q6_K, 64), DType::Q8_0);
        assert_eq!(fit_row(DType::Q4_0, 40), DType::F16);
    }
}
