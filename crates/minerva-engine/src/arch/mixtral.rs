//! Mixtral: llama attention and a top-k mixture of SwiGLU experts. Experts are stored per
//! expert in Hugging Face folders (`block_sparse_moe.experts.E.w1/w3/w2` = gate/up/down),
//! stacked in GGUF (`ffn_{gate,up,down}_exps`) and MLX (`block_sparse_moe.switch_mlp.*`).

use super::{attention, norms, stacked_experts, FfnWeights, LayerWeights, Loader};
use crate::backend::{GatedFfn, MoeBlock};
use crate::error::Result;

pub fn layer(ld: &mut Loader, l: usize) -> Result<LayerWeights> {
    let attn = attention(ld, l)?;
    let (attn_norm, ffn_norm) = norms(ld, l, "ffn_norm")?;
    let moe = ld.moe_spec()?;
    let (hidden, n_exp, width) = (ld.spec.hidden_size, moe.n_experts, moe.expert_ffn);
    let router = ld.linear(
        &ld.name(l, "ffn_gate_inp", "block_sparse_moe.gate"),
        n_exp,
        hidden,
        false,
    )?;
    let experts = if ld.is_gguf() {
        let names = ["gate", "up", "down"].map(|p| ld.name(l, &format!("ffn_{p}_exps.weight"), ""));
        stacked_experts(ld, names, n_exp, width)?
    } else if ld.has(&ld.name(l, "", "block_sparse_moe.switch_mlp.gate_proj.weight")) {
        let names = ["gate", "up", "down"].map(|p| {
            ld.name(
                l,
                "",
                &format!("block_sparse_moe.switch_mlp.{p}_proj.weight"),
            )
        });
        stacked_experts(ld, names, n_exp, width)?
    } else {
        (0..n_exp)
            .map(|e| {
                let base = |w: &str| ld.name(l, "", &format!("block_sparse_moe.experts.{e}.{w}"));
                let (g, u, d) = (base("w1"), base("w3"), base("w2"));
                Ok(GatedFfn {
                    gate: ld.linear(&g, width, hidden, false)?,
                    up: ld.linear(&u, width, hidden, false)?,
                    down: ld.linear(&d, hidden, width, false)?,
                })
            })
            .collect::<Result<Vec<_>>>()?
    };
    let block = MoeBlock {
        router,
        experts,
        routing: ld.routing(&moe),
        activation: ld.spec.activation,
        shared: None,
    };
    Ok(LayerWeights {
        attn_norm,
        attn,
        ffn_norm,
        ffn: FfnWeights::Moe(Box::new(block)),
    })
}
