//! gpt-oss: attention with biases and per-head sinks, sliding window on alternate layers
//! (spec), YaRN RoPE by halves (spec), and a top-k MoE with biased router and experts and the
//! clamped SwiGLU (spec activation).
//!
//! Expert layouts differ by source:
//! - GGUF: `ffn_{gate,up,down}_exps` `[E, out, in]` with `.bias` `[E, out]` (MXFP4 blocks).
//! - MLX: `mlp.experts.{gate,up,down}_proj.weight` `[E, out, in]`, `.bias` `[E, out]`.
//! - Hugging Face: one `mlp.experts.gate_up_proj` with gate and up interleaved (gate at even,
//!   up at odd outputs). Dense checkpoints store it input-major `[E, hidden, 2·I]` and
//!   `down_proj` as `[E, I, hidden]`; MXFP4 checkpoints (`_blocks`/`_scales`) store
//!   output-major `[E, 2·I, hidden]` and `[E, hidden, I]`. Both are expressed as views (stride
//!   2, offset 0 or 1; input-major or not), never copied. Only the small interleaved
//!   `gate_up_proj_bias` is split on the CPU.

use super::{attention, norms, FfnWeights, LayerWeights, Loader};
use crate::backend::{GatedFfn, Linear, MatView, MoeBlock, VecRef};
use crate::error::Result;
use minerva_formats::DType;

pub fn layer(ld: &mut Loader, l: usize) -> Result<LayerWeights> {
    let attn = attention(ld, l)?;
    let (attn_norm, ffn_norm) = norms(ld, l, "post_attention_norm")?;
    let moe = ld.moe_spec()?;
    let (hidden, n_exp, width) = (ld.spec.hidden_size, moe.n_experts, moe.expert_ffn);
    let router = ld.linear(
        &ld.name(l, "ffn_gate_inp", "mlp.router"),
        n_exp,
        hidden,
        true,
    )?;
    let experts = if ld.is_gguf() {
        let names = ["gate", "up", "down"].map(|p| ld.name(l, &format!("ffn_{p}_exps"), ""));
        split_experts(ld, names, n_exp, width)?
    } else if ld.has(&ld.name(l, "", "mlp.experts.gate_proj.weight")) {
        let names =
            ["gate", "up", "down"].map(|p| ld.name(l, "", &format!("mlp.experts.{p}_proj")));
        split_experts(ld, names, n_exp, width)?
    } else {
        hf_fused_experts(ld, l, n_exp, width)?
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

/// Separate stacked gate/up/down weights `{base}.weight` with biases `{base}.bias`.
fn split_experts(
    ld: &mut Loader,
    names: [String; 3],
    n_exp: usize,
    width: usize,
) -> Result<Vec<GatedFfn>> {
    let hidden = ld.spec.hidden_size;
    let [g, u, d] = names;
    let gate = ld.stacked(&format!("{g}.weight"), n_exp, width, hidden, false)?;
    let up = ld.stacked(&format!("{u}.weight"), n_exp, width, hidden, false)?;
    let down = ld.stacked(&format!("{d}.weight"), n_exp, hidden, width, false)?;
    let gate_b = ld.stacked_vec(&format!("{g}.bias"), n_exp, width)?;
    let up_b = ld.stacked_vec(&format!("{u}.bias"), n_exp, width)?;
    let down_b = ld.stacked_vec(&format!("{d}.bias"), n_exp, hidden)?;
    Ok((0..n_exp)
        .map(|e| GatedFfn {
            gate: Linear {
                w: gate[e],
                bias: Some(gate_b[e]),
            },
            up: Linear {
                w: up[e],
                bias: Some(up_b[e]),
            },
            down: Linear {
                w: down[e],
                bias: Some(down_b[e]),
            },
        })
        .collect())
}

/// Hugging Face `gate_up_proj` (interleaved) and `down_proj`, dense or MXFP4.
fn hf_fused_experts(
    ld: &mut Loader,
    l: usize,
    n_exp: usize,
    width: usize,
) -> Result<Vec<GatedFfn>> {
    let hidden = ld.spec.hidden_size;
    let gu_name = ld.name(l, "", "mlp.experts.gate_up_proj");
    let down_name = ld.name(l, "", "mlp.experts.down_proj");
    let mxfp4 = ld
        .ckpt
        .tensor(&gu_name)
        .is_some_and(|t| t.dtype == DType::HfMxfp4);
    let input_major = !mxfp4;
    let gate_up = ld.stacked(&gu_name, n_exp, 2 * width, hidden, input_major)?;
    let down = ld.stacked(&down_name, n_exp, hidden, width, input_major)?;

    // The bias [E, 2·I] interleaves gate and up like the weight: split it on the CPU (small).
    let bias_name = format!("{gu_name}_bias");
    let (gu_bias, shape) = ld.read_small(&bias_name)?;
    if shape != [n_exp, 2 * width] {
        return Err(ld.error(format!(
            "tensor '{bias_name}' has shape {shape:?}, expected [{n_exp}, {}]",
            2 * width
        )));
    }
    let (gate_b, up_b): (Vec<f32>, Vec<f32>) =
        gu_bias.chunks_exact(2).map(|p| (p[0], p[1])).unzip();
    let gate_b = ld.upload_f32(&format!("{bias_name}.gate"), &[n_exp, width], &gate_b)?;
    let up_b = ld.upload_f32(&format!("{bias_name}.up"), &[n_exp, width], &up_b)?;
    let down_b = ld.stacked_vec(&format!("{down_name}_bias"), n_exp, hidden)?;

    let half = |m: MatView, offset: usize| MatView {
        offset,
        stride: 2,
        out_dim: width,
        ..m
    };
    Ok((0..n_exp)
        .map(|e| GatedFfn {
            gate: Linear {
                w: half(gate_up[e], 0),
                bias: Some(VecRef {
                    weight: gate_b,
                    row: e,
                    len: width,
                }),
            },
            up: Linear {
                w: half(gate_up[e], 1),
                bias: Some(VecRef {
                    weight: up_b,
                    row: e,
                    len: width,
                }),
            },
            down: Linear {
                w: down[e],
                bias: Some(down_b[e]),
            },
        })
        .collect())
}
