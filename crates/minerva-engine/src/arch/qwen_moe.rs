//! Qwen2-MoE and Qwen3-MoE: top-k experts with a softmax over all router logits (optionally
//! renormalized), and for Qwen2-MoE a shared expert scaled by σ(shared_expert_gate(x)).
//! Experts are per expert in Hugging Face folders (`mlp.experts.E.*_proj`), stacked in GGUF
//! (`ffn_*_exps`, shared `ffn_*_shexp`, `ffn_gate_inp_shexp`) and MLX (`mlp.switch_mlp.*`).
//! Layers without a router (Qwen2-MoE `mlp_only_layers`) are dense.

use super::{attention, dense_ffn, norms, stacked_experts, FfnWeights, LayerWeights, Loader};
use crate::backend::{GatedFfn, MoeBlock};
use crate::error::Result;

pub fn layer(ld: &mut Loader, l: usize) -> Result<LayerWeights> {
    let attn = attention(ld, l)?;
    let (attn_norm, ffn_norm) = norms(ld, l, "ffn_norm")?;
    let moe = ld.moe_spec()?;
    let (hidden, n_exp, width) = (ld.spec.hidden_size, moe.n_experts, moe.expert_ffn);
    let router_name = ld.name(l, "ffn_gate_inp", "mlp.gate");
    if !ld.has(&format!("{router_name}.weight")) {
        let ffn = dense_ffn(ld, l, ld.spec.ffn, "", "mlp")?;
        return Ok(LayerWeights {
            attn_norm,
            attn,
            ffn_norm,
            ffn: FfnWeights::Dense(ffn),
        });
    }
    let router = ld.linear(&router_name, n_exp, hidden, false)?;
    let experts = if ld.is_gguf() {
        let names = ["gate", "up", "down"].map(|p| ld.name(l, &format!("ffn_{p}_exps.weight"), ""));
        stacked_experts(ld, names, n_exp, width)?
    } else if ld.has(&ld.name(l, "", "mlp.switch_mlp.gate_proj.weight")) {
        let names = ["gate", "up", "down"]
            .map(|p| ld.name(l, "", &format!("mlp.switch_mlp.{p}_proj.weight")));
        stacked_experts(ld, names, n_exp, width)?
    } else {
        (0..n_exp)
            .map(|e| {
                let base = |p: &str| ld.name(l, "", &format!("mlp.experts.{e}.{p}_proj"));
                let (g, u, d) = (base("gate"), base("up"), base("down"));
                Ok(GatedFfn {
                    gate: ld.linear(&g, width, hidden, false)?,
                    up: ld.linear(&u, width, hidden, false)?,
                    down: ld.linear(&d, hidden, width, false)?,
                })
            })
            .collect::<Result<Vec<_>>>()?
    };
    let shared = match moe.shared_expert_ffn {
        Some(w) => {
            let ffn = dense_ffn(ld, l, w, "_shexp", "mlp.shared_expert")?;
            let gate = ld.linear(
                &ld.name(l, "ffn_gate_inp_shexp", "mlp.shared_expert_gate"),
                1,
                hidden,
                false,
            )?;
            Some((ffn, gate))
        }
        None => None,
    };
    let block = MoeBlock {
        router,
        experts,
        routing: ld.routing(&moe),
        activation: ld.spec.activation,
        shared,
    };
    Ok(LayerWeights {
        attn_norm,
        attn,
        ffn_norm,
        ffn: FfnWeights::Moe(Box::new(block)),
    })
}
