//! Canonical tensor roles and their names in each format: Hugging Face checkpoints, GGUF
//! (llama.cpp's names) and MLX folders (mlx-lm's names). Convert maps every tensor through a
//! role, so one table per format says where each piece of a model lives.

use crate::architecture::Architecture;

/// What a tensor does in the network, independent of any file's naming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    TokenEmbd,
    Output,
    OutputNorm,
    AttnNorm,
    /// The norm before the FFN (`post_attention_layernorm`).
    FfnNorm,
    AttnQ,
    AttnK,
    AttnV,
    AttnO,
    AttnQNorm,
    AttnKNorm,
    AttnSinks,
    FfnGate,
    FfnUp,
    FfnDown,
    /// MoE router (`ffn_gate_inp`).
    Router,
    /// Stacked expert weights, canonical shape [n_expert, out, in].
    ExpGate,
    ExpUp,
    ExpDown,
}

/// One tensor of a model: its role, its layer, and whether it is the role's bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId {
    pub role: Role,
    pub layer: Option<usize>,
    pub bias: bool,
}

impl TensorId {
    pub fn global(role: Role) -> Self {
        TensorId {
            role,
            layer: None,
            bias: false,
        }
    }
    pub fn layer(role: Role, layer: usize) -> Self {
        TensorId {
            role,
            layer: Some(layer),
            bias: false,
        }
    }
    pub fn bias(role: Role, layer: usize) -> Self {
        TensorId {
            role,
            layer: Some(layer),
            bias: true,
        }
    }

    /// A quantizable matrix (not a norm, bias, sink or embedding-free vector).
    pub fn is_matrix(&self) -> bool {
        !self.bias
            && !matches!(
                self.role,
                Role::OutputNorm
                    | Role::AttnNorm
                    | Role::FfnNorm
                    | Role::AttnQNorm
                    | Role::AttnKNorm
                    | Role::AttnSinks
            )
    }
}

/// GGUF `general.architecture` of a model family.
pub fn gguf_arch(arch: Architecture) -> &'static str {
    match arch {
        Architecture::Llama | Architecture::Mistral | Architecture::Mixtral => "llama",
        Architecture::Qwen2 => "qwen2",
        Architecture::Qwen3 => "qwen3",
        Architecture::Qwen2Moe => "qwen2moe",
        Architecture::Qwen3Moe => "qwen3moe",
        Architecture::GptOss => "gpt-oss",
        Architecture::Phi3 => "phi3",
    }
}

/// llama.cpp permutes Q/K rows to adjacent-pair RoPE for its `llama` architecture only.
pub fn gguf_permutes_qk(arch: Architecture) -> bool {
    gguf_arch(arch) == "llama"
}

const GGUF_GLOBAL: [(Role, &str); 3] = [
    (Role::TokenEmbd, "token_embd"),
    (Role::Output, "output"),
    (Role::OutputNorm, "output_norm"),
];

fn gguf_layer_stem(arch: Architecture, role: Role) -> Option<&'static str> {
    Some(match role {
        Role::AttnNorm => "attn_norm",
        Role::FfnNorm if arch == Architecture::GptOss => "post_attention_norm",
        Role::FfnNorm => "ffn_norm",
        Role::AttnQ => "attn_q",
        Role::AttnK => "attn_k",
        Role::AttnV => "attn_v",
        Role::AttnO => "attn_output",
        Role::AttnQNorm => "attn_q_norm",
        Role::AttnKNorm => "attn_k_norm",
        Role::AttnSinks => "attn_sinks",
        Role::FfnGate => "ffn_gate",
        Role::FfnUp => "ffn_up",
        Role::FfnDown => "ffn_down",
        Role::Router => "ffn_gate_inp",
        Role::ExpGate => "ffn_gate_exps",
        Role::ExpUp => "ffn_up_exps",
        Role::ExpDown => "ffn_down_exps",
        _ => return None,
    })
}

const LAYER_ROLES: [Role; 16] = [
    Role::AttnNorm,
    Role::FfnNorm,
    Role::AttnQ,
    Role::AttnK,
    Role::AttnV,
    Role::AttnO,
    Role::AttnQNorm,
    Role::AttnKNorm,
    Role::AttnSinks,
    Role::FfnGate,
    Role::FfnUp,
    Role::FfnDown,
    Role::Router,
    Role::ExpGate,
    Role::ExpUp,
    Role::ExpDown,
];

/// llama.cpp's tensor name (`blk.3.attn_q.weight`, `token_embd.weight`, ...).
pub fn gguf_name(arch: Architecture, id: TensorId) -> Option<String> {
    let suffix = if id.bias { "bias" } else { "weight" };
    match id.layer {
        None => GGUF_GLOBAL
            .iter()
            .find(|(r, _)| *r == id.role)
            .map(|(_, s)| format!("{s}.{suffix}")),
        Some(l) => gguf_layer_stem(arch, id.role).map(|s| format!("blk.{l}.{s}.{suffix}")),
    }
}

/// The role of a GGUF tensor name.
pub fn parse_gguf(arch: Architecture, name: &str) -> Option<TensorId> {
    let (stem, suffix) = name.rsplit_once('.')?;
    let bias = match suffix {
        "weight" => false,
        "bias" => true,
        _ => return None,
    };
    if let Some(rest) = stem.strip_prefix("blk.") {
        let (layer, stem) = rest.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        let role = LAYER_ROLES
            .into_iter()
            .find(|&r| gguf_layer_stem(arch, r) == Some(stem))?;
        return Some(TensorId {
            role,
            layer: Some(layer),
            bias,
        });
    }
    let role = GGUF_GLOBAL.iter().find(|(_, s)| *s == stem)?.0;
    Some(TensorId {
        role,
        layer: None,
        bias,
    })
}

/// Module path (without `.weight`/`.bias`) of a role in Hugging Face and MLX checkpoints.
/// Experts are named per format by the caller: HF mixtral keeps one tensor per expert, gpt-oss
/// fuses gate and up, MLX stacks them (see `hf_expert_name`, `mlx_name`).
fn module_path(arch: Architecture, role: Role, layer: Option<usize>) -> Option<String> {
    let l = |s: &str| layer.map(|n| format!("model.layers.{n}.{s}"));
    let moe = if arch == Architecture::Mixtral {
        "block_sparse_moe"
    } else {
        "mlp"
    };
    match role {
        Role::TokenEmbd => Some("model.embed_tokens".into()),
        Role::Output => Some("lm_head".into()),
        Role::OutputNorm => Some("model.norm".into()),
        Role::AttnNorm => l("input_layernorm"),
        Role::FfnNorm => l("post_attention_layernorm"),
        Role::AttnQ => l("self_attn.q_proj"),
        Role::AttnK => l("self_attn.k_proj"),
        Role::AttnV => l("self_attn.v_proj"),
        Role::AttnO => l("self_attn.o_proj"),
        Role::AttnQNorm => l("self_attn.q_norm"),
        Role::AttnKNorm => l("self_attn.k_norm"),
        Role::AttnSinks => l("self_attn.sinks"),
        Role::FfnGate => l("mlp.gate_proj"),
        Role::FfnUp => l("mlp.up_proj"),
        Role::FfnDown => l("mlp.down_proj"),
        Role::Router if arch == Architecture::GptOss => l("mlp.router"),
        Role::Router => l(&format!("{moe}.gate")),
        Role::ExpGate | Role::ExpUp | Role::ExpDown => {
            let p = match role {
                Role::ExpGate => "gate_proj",
                Role::ExpUp => "up_proj",
                _ => "down_proj",
            };
            if arch == Architecture::GptOss {
                l(&format!("mlp.experts.{p}"))
            } else {
                l(&format!("{moe}.switch_mlp.{p}"))
            }
        }
    }
}

/// mlx-lm's name of a tensor (stacked experts; `.weight` / `.bias`). Sinks have no suffix.
pub fn mlx_name(arch: Architecture, id: TensorId) -> Option<String> {
    let path = module_path(arch, id.role, id.layer)?;
    Some(match (id.role, id.bias) {
        (Role::AttnSinks, _) => path,
        (_, true) => format!("{path}.bias"),
        (_, false) => format!("{path}.weight"),
    })
}

/// Hugging Face name of a non-expert tensor (experts: `hf_expert_names`).
pub fn hf_name(arch: Architecture, id: TensorId) -> Option<String> {
    if matches!(id.role, Role::ExpGate | Role::ExpUp | Role::ExpDown) {
        return None;
    }
    mlx_name(arch, id)
}

/// The HF mixtral per-expert tensor of a stacked expert role: `w1` gate, `w3` up, `w2` down.
pub fn hf_mixtral_expert(layer: usize, role: Role, expert: usize) -> Option<String> {
    let w = match role {
        Role::ExpGate => "w1",
        Role::ExpUp => "w3",
        Role::ExpDown => "w2",
        _ => return None,
    };
    Some(format!(
        "model.layers.{layer}.block_sparse_moe.experts.{expert}.{w}.weight"
    ))
}

/// Every (role, bias) that may occur in a layer, for parsing names back.
fn candidates() -> impl Iterator<Item = (Role, bool)> {
    LAYER_ROLES
        .into_iter()
        .flat_map(|r| [(r, false), (r, true)])
}

/// The role of an MLX (or HF, for non-expert tensors) name.
pub fn parse_mlx(arch: Architecture, name: &str) -> Option<TensorId> {
    for role in [Role::TokenEmbd, Role::Output, Role::OutputNorm] {
        if mlx_name(arch, TensorId::global(role)).as_deref() == Some(name) {
            return Some(TensorId::global(role));
        }
    }
    let rest = name.strip_prefix("model.layers.")?;
    let layer: usize = rest.split('.').next()?.parse().ok()?;
    candidates()
        .map(|(role, bias)| TensorId {
            role,
            layer: Some(layer),
            bias,
        })
        .find(|&id| mlx_name(arch, id).as_deref() == Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names_round_trip() {
        let id = TensorId::layer(Role::FfnNorm, 3);
        assert_eq!(
            gguf_name(Architecture::GptOss, id).unwrap(),
            "blk.3.post_attention_norm.weight"
        );
        assert_eq!(
            gguf_name(Architecture::Llama, id).unwrap(),
            "blk.3.ffn_norm.weight"
        );
        for arch in [
            Architecture::Llama,
            Architecture::GptOss,
            Architecture::Qwen3,
        ] {
            for (role, bias) in candidates() {
                let id = TensorId {
                    role,
                    layer: Some(7),
                    bias,
                };
                let name = gguf_name(arch, id).unwrap();
                assert_eq!(parse_gguf(arch, &name), Some(id), "{name}");
            }
        }
        assert_eq!(
            parse_gguf(Architecture::Llama, "output.weight"),
            Some(TensorId::global(Role::Output))
        );
        assert_eq!(parse_gguf(Architecture::Llama, "blk.x.attn_q.weight"), None);
    }

    #[test]
    fn mlx_names() {
        let a = Architecture::GptOss;
        assert_eq!(
            mlx_name(a, TensorId::layer(Role::Router, 0)).unwrap(),
            "model.layers.0.mlp.router.weight"
        );
        assert_eq!(
            mlx_name(a, TensorId::layer(Role::AttnSinks, 1)).unwrap(),
            "model.layers.1.self_attn.sinks"
        );
        assert_eq!(
            mlx_name(Architecture::Mixtral, TensorId::layer(Role::ExpDown, 0)).unwrap(),
            "model.layers.0.block_sparse_moe.switch_mlp.down_proj.weight"
        );
        let id = TensorId::bias(Role::ExpUp, 2);
        assert_eq!(parse_mlx(a, &mlx_name(a, id).unwrap()), Some(id));
        assert_eq!(
            parse_mlx(a, "model.embed_tokens.weight"),
            Some(TensorId::global(Role::TokenEmbd))
        );
    }
}
