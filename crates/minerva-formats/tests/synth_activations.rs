//! Synthetic weights give finite, non-degenerate activations through the network: a plain f32
//! forward pass (attention with GQA, sinks and qk-norm; SwiGLU or MoE) over a few tokens, on the
//! tiny shapes in full and on the first layers of real shapes, checking hidden-state RMS at
//! every layer and the spread of the logits. RoPE is left out: it rotates pairs and keeps norms.

use minerva_formats::names::{Role, TensorId};
use minerva_formats::synth::{self, shapes};
use minerva_formats::write::model::Model;

struct Net<'m> {
    m: &'m Model<'static>,
}

impl Net<'_> {
    fn tensor(&self, id: TensorId) -> Option<&minerva_formats::write::model::ModelTensor<'static>> {
        self.m.tensors.iter().find(|t| t.id == id)
    }
    fn rows(&self, id: TensorId, first: usize, n: usize) -> Vec<f32> {
        let t = self.tensor(id).unwrap_or_else(|| panic!("{id:?} missing"));
        let mut out = vec![0f32; n * t.shape.last().copied().unwrap_or(1)];
        (t.rows)(first, n, &mut out).unwrap();
        out
    }
    fn vector(&self, id: TensorId) -> Option<Vec<f32>> {
        self.tensor(id).map(|_| self.rows(id, 0, 1))
    }
    /// y = W[first..first+n] x
    fn matvec(&self, id: TensorId, first: usize, n: usize, x: &[f32]) -> Vec<f32> {
        let w = self.rows(id, first, n);
        let mut y: Vec<f32> = w
            .chunks_exact(x.len())
            .map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect();
        if id.role != Role::ExpGate && id.role != Role::ExpUp && id.role != Role::ExpDown {
            if let Some(b) = self.vector(TensorId { bias: true, ..id }) {
                y.iter_mut().zip(b).for_each(|(v, b)| *v += b);
            }
        }
        y
    }
}

fn rms(x: &[f32]) -> f32 {
    (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt()
}

fn rms_norm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let r = rms(x) + 1e-6;
    x.iter().zip(w).map(|(v, w)| v / r * w).collect()
}

fn softmax(x: &mut [f32]) {
    let m = x.iter().cloned().fold(f32::MIN, f32::max);
    let s: f32 = x
        .iter_mut()
        .map(|v| {
            *v = (*v - m).exp();
            *v
        })
        .sum();
    x.iter_mut().for_each(|v| *v /= s);
}

/// Runs `layers` layers over `tokens`; returns the per-layer hidden RMS (last token) and logits.
fn forward(m: &Model<'static>, layers: usize, tokens: &[usize]) -> (Vec<f32>, Vec<f32>) {
    let net = Net { m };
    let c = &m.config;
    let g = |k: &str| c[k].as_u64().unwrap_or(0) as usize;
    let (hidden, nh, nkv) = (
        g("hidden_size"),
        g("num_attention_heads"),
        g("num_key_value_heads"),
    );
    let hd = c["head_dim"].as_u64().map_or(hidden / nh, |v| v as usize);
    let (experts, top_k, ffn) = (
        g("num_local_experts"),
        g("num_experts_per_tok"),
        g("intermediate_size"),
    );
    let gpt_oss = c["model_type"] == "gpt_oss";
    let mut xs: Vec<Vec<f32>> = tokens
        .iter()
        .map(|&t| net.rows(TensorId::global(Role::TokenEmbd), t, 1))
        .collect();
    let mut stats = Vec::new();
    for l in 0..layers {
        let id = |r| TensorId::layer(r, l);
        let norm_w = net.vector(id(Role::AttnNorm)).unwrap();
        let (mut ks, mut vs) = (Vec::new(), Vec::new());
        let mut outs = Vec::new();
        for x in xs.iter() {
            let h = rms_norm(x, &norm_w);
            let mut q = net.matvec(id(Role::AttnQ), 0, nh * hd, &h);
            let mut k = net.matvec(id(Role::AttnK), 0, nkv * hd, &h);
            if let (Some(qn), Some(kn)) = (
                net.vector(id(Role::AttnQNorm)),
                net.vector(id(Role::AttnKNorm)),
            ) {
                q = q.chunks(hd).flat_map(|c| rms_norm(c, &qn)).collect();
                k = k.chunks(hd).flat_map(|c| rms_norm(c, &kn)).collect();
            }
            ks.push(k);
            vs.push(net.matvec(id(Role::AttnV), 0, nkv * hd, &h));
            let sinks = net.vector(id(Role::AttnSinks));
            let mut att = vec![0f32; nh * hd];
            for head in 0..nh {
                let kvh = head / (nh / nkv);
                let qh = &q[head * hd..(head + 1) * hd];
                let mut s: Vec<f32> = ks
                    .iter()
                    .map(|k| {
                        k[kvh * hd..(kvh + 1) * hd]
                            .iter()
                            .zip(qh)
                            .map(|(a, b)| a * b)
                            .sum::<f32>()
                            / (hd as f32).sqrt()
                    })
                    .collect();
                if let Some(sk) = &sinks {
                    s.push(sk[head]);
                }
                softmax(&mut s);
                for (p, v) in s.iter().zip(&vs) {
                    for i in 0..hd {
                        att[head * hd + i] += p * v[kvh * hd + i];
                    }
                }
            }
            outs.push(net.matvec(id(Role::AttnO), 0, hidden, &att));
        }
        let ffn_w = net.vector(id(Role::FfnNorm)).unwrap();
        for (x, o) in xs.iter_mut().zip(outs) {
            x.iter_mut().zip(o).for_each(|(a, b)| *a += b);
            let h = rms_norm(x, &ffn_w);
            let act = |gate: &[f32], up: &[f32]| -> Vec<f32> {
                gate.iter()
                    .zip(up)
                    .map(|(&gv, &uv)| {
                        if gpt_oss {
                            let (gv, uv) = (gv.min(7.0), uv.clamp(-7.0, 7.0));
                            (uv + 1.0) * gv / (1.0 + (-1.702 * gv).exp())
                        } else {
                            uv * gv / (1.0 + (-gv).exp())
                        }
                    })
                    .collect()
            };
            let y = if experts == 0 {
                let a = act(
                    &net.matvec(id(Role::FfnGate), 0, ffn, &h),
                    &net.matvec(id(Role::FfnUp), 0, ffn, &h),
                );
                net.matvec(id(Role::FfnDown), 0, hidden, &a)
            } else {
                let logits = net.matvec(id(Role::Router), 0, experts, &h);
                let mut order: Vec<usize> = (0..experts).collect();
                order.sort_by(|a, b| logits[*b].total_cmp(&logits[*a]));
                let mut w: Vec<f32> = order[..top_k].iter().map(|&e| logits[e]).collect();
                softmax(&mut w);
                let mut y = vec![0f32; hidden];
                for (&e, p) in order[..top_k].iter().zip(w) {
                    let bias = |r: Role, n: usize| {
                        net.tensor(TensorId::bias(r, l))
                            .map_or(vec![0f32; n], |_| net.rows(TensorId::bias(r, l), e, 1))
                    };
                    let add = |mut v: Vec<f32>, b: Vec<f32>| {
                        v.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                        v
                    };
                    let gate = add(
                        net.matvec(id(Role::ExpGate), e * ffn, ffn, &h),
                        bias(Role::ExpGate, ffn),
                    );
                    let up = add(
                        net.matvec(id(Role::ExpUp), e * ffn, ffn, &h),
                        bias(Role::ExpUp, ffn),
                    );
                    let d = add(
                        net.matvec(id(Role::ExpDown), e * hidden, hidden, &act(&gate, &up)),
                        bias(Role::ExpDown, hidden),
                    );
                    y.iter_mut().zip(d).for_each(|(a, b)| *a += p * b);
                }
                y
            };
            x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
        }
        stats.push(rms(xs.last().unwrap()));
    }
    let h = rms_norm(
        xs.last().unwrap(),
        &net.vector(TensorId::global(Role::OutputNorm)).unwrap(),
    );
    let out = if net.tensor(TensorId::global(Role::Output)).is_some() {
        Role::Output
    } else {
        Role::TokenEmbd
    };
    let vocab = g("vocab_size");
    let logits = net.matvec(TensorId::global(out), 0, vocab, &h);
    (stats, logits)
}

fn check(shape: &str, layers: Option<usize>) {
    let s = shapes::shape(shape).unwrap();
    let m = synth::model(&s, 3);
    let n_layers = s.config["num_hidden_layers"].as_u64().unwrap() as usize;
    let tokens: Vec<usize> = [1usize, 17, 200, 42, 99, 7]
        .into_iter()
        .map(|t| t % s.config["vocab_size"].as_u64().unwrap() as usize)
        .collect();
    let (stats, logits) = forward(&m, layers.unwrap_or(n_layers).min(n_layers), &tokens);
    for (l, r) in stats.iter().enumerate() {
        assert!(
            r.is_finite() && *r > 0.05 && *r < 50.0,
            "{shape}: hidden RMS {r} after layer {l}"
        );
    }
    assert!(
        logits.iter().all(|v| v.is_finite()),
        "{shape}: non-finite logits"
    );
    let mean = logits.iter().sum::<f32>() / logits.len() as f32;
    let std =
        (logits.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / logits.len() as f32).sqrt();
    assert!(std > 0.3 && std < 20.0, "{shape}: logit std {std}");
    eprintln!("{shape}: hidden RMS by layer {stats:?}; logit std {std}");
    let max = logits.iter().cloned().fold(f32::MIN, f32::max);
    assert!(
        max - mean < 12.0 * std,
        "{shape}: one logit dominates ({max} vs mean {mean}, std {std})"
    );
}

#[test]
fn tiny_shapes_have_healthy_activations_through_every_layer() {
    for shape in ["tiny-llama", "tiny-qwen3", "tiny-gpt-oss"] {
        check(shape, None);
    }
}

#[test]
fn real_shapes_have_healthy_activations_in_their_first_layers() {
    for shape in [
        "tinyllama-1.1b",
        "qwen3-0.6b",
        "mixtral-small",
        "gpt-oss-20b",
    ] {
        check(shape, Some(2));
    }
}
