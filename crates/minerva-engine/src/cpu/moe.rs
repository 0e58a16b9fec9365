//! The mixture-of-experts block on the CPU: router, top-k per token, each chosen expert run
//! over the tokens routed to it, results combined with the routing weights.

use crate::backend::{GatedFfn, MoeBlock, Routing};
use crate::cpu::{glu_into, Weights};
use crate::error::Result;

/// Chosen experts and their weights for one token's router logits.
pub fn route(logits: &[f32], r: &Routing) -> Vec<(usize, f32)> {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    // Stable sort: on equal logits the lower expert index wins, as with a first-max argmax.
    order.sort_by(|&a, &b| {
        logits[b]
            .partial_cmp(&logits[a])
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    order.truncate(r.top_k.min(logits.len()));
    let softmax = |xs: &[f32]| -> Vec<f32> {
        let m = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = xs.iter().map(|x| (x - m).exp()).collect();
        let s: f32 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    };
    let weights = if r.softmax_after_topk {
        softmax(&order.iter().map(|&e| logits[e]).collect::<Vec<_>>())
    } else {
        let all = softmax(logits);
        let mut w: Vec<f32> = order.iter().map(|&e| all[e]).collect();
        if r.norm_topk_prob {
            let s: f32 = w.iter().sum();
            w.iter_mut().for_each(|x| *x /= s);
        }
        w
    };
    order.into_iter().zip(weights).collect()
}

/// One gated FFN over `n` rows of `x` (`[n, hidden]`), result `[n, hidden]`.
pub fn gated_ffn(
    ws: &Weights,
    f: &GatedFfn,
    x: &[f32],
    n: usize,
    act: minerva_formats::Activation,
) -> Result<Vec<f32>> {
    let width = f.gate.out_dim();
    let mut gate = vec![0f32; n * width];
    let mut up = vec![0f32; n * width];
    ws.linear(x, n, &f.gate, &mut gate)?;
    ws.linear(x, n, &f.up, &mut up)?;
    glu_into(&mut gate, &up, act);
    let mut out = vec![0f32; n * f.down.out_dim()];
    ws.linear(&gate, n, &f.down, &mut out)?;
    Ok(out)
}

pub fn moe(
    ws: &Weights,
    block: &MoeBlock,
    x: &[f32],
    n: usize,
    hidden: usize,
    out: &mut [f32],
) -> Result<()> {
    let n_exp = block.experts.len();
    let mut logits = vec![0f32; n * n_exp];
    ws.linear(x, n, &block.router, &mut logits)?;
    // For each expert, the tokens routed to it and their weights.
    let mut routed: Vec<Vec<(usize, f32)>> = vec![Vec::new(); n_exp];
    for t in 0..n {
        for (e, w) in route(&logits[t * n_exp..(t + 1) * n_exp], &block.routing) {
            routed[e].push((t, w));
        }
    }
    let out = &mut out[..n * hidden];
    out.fill(0.0);
    for (e, toks) in routed.iter().enumerate().filter(|(_, t)| !t.is_empty()) {
        let xe: Vec<f32> = toks
            .iter()
            .flat_map(|&(t, _)| x[t * hidden..(t + 1) * hidden].iter().copied())
            .collect();
        let ye = gated_ffn(ws, &block.experts[e], &xe, toks.len(), block.activation)?;
        for (i, &(t, w)) in toks.iter().enumerate() {
            for (o, y) in out[t * hidden..(t + 1) * hidden]
                .iter_mut()
                .zip(&ye[i * hidden..(i + 1) * hidden])
            {
                *o += w * y;
            }
        }
    }
    if let Some((shared, gate)) = &block.shared {
        let ys = gated_ffn(ws, shared, x, n, block.activation)?;
        let mut g = vec![0f32; n];
        ws.linear(x, n, gate, &mut g)?;
        for t in 0..n {
            let s = 1.0 / (1.0 + (-g[t]).exp());
            for (o, y) in out[t * hidden..(t + 1) * hidden]
                .iter_mut()
                .zip(&ys[t * hidden..(t + 1) * hidden])
            {
                *o += s * y;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_variants() {
        let logits = [0.0, 2.0, 1.0, -1.0];
        let after = Routing {
            top_k: 2,
            softmax_after_topk: true,
            norm_topk_prob: false,
        };
        let r = route(&logits, &after);
        assert_eq!(r[0].0, 1);
        assert_eq!(r[1].0, 2);
        let e = (-1f32).exp();
        assert!((r[0].1 - 1.0 / (1.0 + e)).abs() < 1e-6);
        let plain = Routing {
            top_k: 2,
            softmax_after_topk: false,
            norm_topk_prob: false,
        };
        let r2 = route(&logits, &plain);
        let z: f32 = logits.iter().map(|x| x.exp()).sum();
        assert!((r2[0].1 - 2f32.exp() / z).abs() < 1e-6);
        let norm = Routing {
            norm_topk_prob: true,
            ..plain
        };
        let r3 = route(&logits, &norm);
        assert!((r3[0].1 - r[0].1).abs() < 1e-6);
    }
}
