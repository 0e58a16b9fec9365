//! Weight maps: from a checkpoint's tensor names to the canonical roles the transformer reads.
//!
//! The pieces most architectures share (embeddings, the llama-style attention block and norms,
//! a dense gated FFN, stacked or per-expert MoE weights) are here, written once for every
//! naming scheme: Hugging Face names for SafeTensors and MLX folders, llama.cpp names for GGUF.
//! Each `arch/<name>.rs` assembles one layer from them and fixes its checkpoint's quirks.

mod gpt_oss;
mod llama;
mod mistral;
mod mixtral;
mod qwen2;
mod qwen3;
mod qwen_moe;

use crate::backend::{Backend, GatedFfn, Linear, MatView, MoeBlock, Routing, VecRef, WeightId};
use crate::error::{EngineError, Result};
use minerva_formats::{Architecture, Checkpoint, Format, ModelSpec, MoeSpec};
use std::collections::HashMap;

/// The attention weights of one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionWeights {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    /// Per-head RMSNorm weights of q and k (qwen3).
    pub q_norm: Option<VecRef>,
    pub k_norm: Option<VecRef>,
    /// One sink logit per head (gpt-oss).
    pub sinks: Option<VecRef>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FfnWeights {
    Dense(GatedFfn),
    Moe(Box<MoeBlock>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights {
    pub attn_norm: VecRef,
    pub attn: AttentionWeights,
    pub ffn_norm: VecRef,
    pub ffn: FfnWeights,
}

/// Every weight of a model, by role, as handles into the backend.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelWeights {
    /// `[vocab, hidden]`.
    pub embed: WeightId,
    pub output_norm: VecRef,
    /// `[vocab, hidden]`; the embedding itself when tied.
    pub output: Linear,
    pub layers: Vec<LayerWeights>,
    /// Per-frequency divisors of the RoPE inverse frequencies: llama.cpp stores llama3-style
    /// scaling as a `rope_freqs.weight` tensor instead of metadata.
    pub rope_factors: Option<Vec<f32>>,
}

/// Maps and uploads every weight of `ckpt` for `spec`'s architecture.
pub fn load_weights(
    ckpt: &Checkpoint,
    spec: &ModelSpec,
    backend: &mut dyn Backend,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<ModelWeights> {
    let mut ld = Loader {
        ckpt,
        spec,
        backend,
        uploaded: HashMap::new(),
        progress,
    };
    let layer_fn: fn(&mut Loader, usize) -> Result<LayerWeights> = match spec.architecture {
        Architecture::Llama => llama::layer,
        Architecture::Mistral => mistral::layer,
        Architecture::Qwen2 => qwen2::layer,
        Architecture::Qwen3 => qwen3::layer,
        Architecture::Mixtral => mixtral::layer,
        Architecture::Qwen2Moe | Architecture::Qwen3Moe => qwen_moe::layer,
        Architecture::GptOss => gpt_oss::layer,
        other => {
            return Err(ld.error(format!(
                "architecture {} is not supported by the engine",
                other.name()
            )))
        }
    };
    let (vocab, hidden) = (spec.vocab_size, spec.hidden_size);
    let embed_name = ld.global("token_embd.weight", "model.embed_tokens.weight");
    let embed = ld.mat(&embed_name, vocab, hidden)?;
    let output_norm = ld.vec(
        &ld.global("output_norm.weight", "model.norm.weight"),
        hidden,
    )?;
    // Tied models store no output matrix (GGUF converters omit it as well): reuse the embedding.
    let out_name = ld.global("output.weight", "lm_head.weight");
    let output = if ld.has(&out_name) {
        Linear {
            w: ld.mat(&out_name, vocab, hidden)?,
            bias: None,
        }
    } else {
        Linear {
            w: embed,
            bias: None,
        }
    };
    let layers = (0..spec.n_layers)
        .map(|l| layer_fn(&mut ld, l))
        .collect::<Result<Vec<_>>>()?;
    let rope_factors = match ckpt.tensor("rope_freqs.weight") {
        Some(view) if view.elements() == spec.rope.dim / 2 => {
            Some(minerva_formats::dequantize(&view).map_err(|e| ld.error(e.to_string()))?)
        }
        Some(view) => {
            return Err(ld.error(format!(
                "rope_freqs.weight has {} values, RoPE over {} dims needs {}",
                view.elements(),
                spec.rope.dim,
                spec.rope.dim / 2
            )))
        }
        None => None,
    };
    Ok(ModelWeights {
        embed: embed.weight,
        output_norm,
        output,
        layers,
        rope_factors,
    })
}

/// Uploads tensors by name (each once) and checks their shapes against the spec.
pub struct Loader<'a> {
    pub ckpt: &'a Checkpoint,
    pub spec: &'a ModelSpec,
    backend: &'a mut dyn Backend,
    uploaded: HashMap<String, (WeightId, Vec<usize>)>,
    /// Told the stored bytes of each tensor once uploaded; false cancels the load.
    progress: &'a mut dyn FnMut(u64) -> bool,
}

impl Loader<'_> {
    pub fn error(&self, what: impl Into<String>) -> EngineError {
        EngineError::Weights {
            model: self.ckpt.main_path().display().to_string(),
            what: what.into(),
        }
    }

    pub fn is_gguf(&self) -> bool {
        self.ckpt.format == Format::Gguf
    }

    pub fn has(&self, name: &str) -> bool {
        self.ckpt.contains(name)
    }

    /// A model-wide tensor's name in this checkpoint's naming scheme.
    pub fn global(&self, gguf: &str, hf: &str) -> String {
        if self.is_gguf() { gguf } else { hf }.to_string()
    }

    /// A per-layer tensor's name: `blk.{l}.{gguf}` or `model.layers.{l}.{hf}`.
    pub fn name(&self, l: usize, gguf: &str, hf: &str) -> String {
        if self.is_gguf() {
            format!("blk.{l}.{gguf}")
        } else {
            format!("model.layers.{l}.{hf}")
        }
    }

    /// Uploads a tensor once; returns its handle and stored shape.
    pub fn weight(&mut self, name: &str) -> Result<(WeightId, Vec<usize>)> {
        if let Some(w) = self.uploaded.get(name) {
            return Ok(w.clone());
        }
        let view = self
            .ckpt
            .tensor(name)
            .ok_or_else(|| self.error(format!("tensor '{name}' is missing")))?;
        let id = self.backend.upload(&view)?;
        self.uploaded
            .insert(name.to_string(), (id, view.shape.clone()));
        if !(self.progress)(view.stored_bytes() as u64) {
            return Err(EngineError::Cancelled);
        }
        Ok((id, view.shape))
    }

    /// Uploads a small tensor fixed up on the CPU.
    pub fn upload_f32(&mut self, name: &str, shape: &[usize], data: &[f32]) -> Result<WeightId> {
        self.backend.upload_f32(name, shape, data)
    }

    /// The whole tensor as f32 (only for small tensors that need a fix on the CPU).
    pub fn read_small(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>)> {
        let view = self
            .ckpt
            .tensor(name)
            .ok_or_else(|| self.error(format!("tensor '{name}' is missing")))?;
        Ok((minerva_formats::dequantize(&view)?, view.shape.clone()))
    }

    fn shape_error(&self, name: &str, shape: &[usize], want: String) -> EngineError {
        self.error(format!(
            "tensor '{name}' has shape {shape:?}, expected {want}"
        ))
    }

    /// A 2-D `[out, in]` weight.
    pub fn mat(&mut self, name: &str, out: usize, inp: usize) -> Result<MatView> {
        let (id, shape) = self.weight(name)?;
        if shape != [out, inp] {
            return Err(self.shape_error(name, &shape, format!("[{out}, {inp}]")));
        }
        Ok(MatView::plain(id, out, inp))
    }

    /// A 1-D weight of `len` values.
    pub fn vec(&mut self, name: &str, len: usize) -> Result<VecRef> {
        let (id, shape) = self.weight(name)?;
        if shape != [len] {
            return Err(self.shape_error(name, &shape, format!("[{len}]")));
        }
        Ok(VecRef {
            weight: id,
            row: 0,
            len,
        })
    }

    /// `{base}.weight` `[out, in]` and, when `bias`, `{base}.bias` `[out]`.
    pub fn linear(&mut self, base: &str, out: usize, inp: usize, bias: bool) -> Result<Linear> {
        let w = self.mat(&format!("{base}.weight"), out, inp)?;
        let bias = if bias {
            Some(self.vec(&format!("{base}.bias"), out)?)
        } else {
            None
        };
        Ok(Linear { w, bias })
    }

    /// The experts of a stacked `[n_expert, out, in]` weight (or `[n_expert, in, out]` when
    /// `input_major`), each a view of one matrix.
    pub fn stacked(
        &mut self,
        name: &str,
        n_exp: usize,
        out: usize,
        inp: usize,
        input_major: bool,
    ) -> Result<Vec<MatView>> {
        let (id, shape) = self.weight(name)?;
        let want = if input_major {
            [n_exp, inp, out]
        } else {
            [n_exp, out, inp]
        };
        if shape != want {
            return Err(self.shape_error(name, &shape, format!("{want:?}")));
        }
        Ok((0..n_exp)
            .map(|e| MatView {
                weight: id,
                matrix: e,
                input_major,
                offset: 0,
                stride: 1,
                out_dim: out,
                in_dim: inp,
            })
            .collect())
    }

    /// The rows of a stacked `[n_expert, len]` bias.
    pub fn stacked_vec(&mut self, name: &str, n_exp: usize, len: usize) -> Result<Vec<VecRef>> {
        let (id, shape) = self.weight(name)?;
        if shape != [n_exp, len] {
            return Err(self.shape_error(name, &shape, format!("[{n_exp}, {len}]")));
        }
        Ok((0..n_exp)
            .map(|row| VecRef {
                weight: id,
                row,
                len,
            })
            .collect())
    }

    pub fn moe_spec(&self) -> Result<MoeSpec> {
        self.spec
            .moe
            .clone()
            .ok_or_else(|| self.error("a mixture-of-experts architecture without expert settings"))
    }

    pub fn routing(&self, moe: &MoeSpec) -> Routing {
        Routing {
            top_k: moe.experts_per_token,
            softmax_after_topk: moe.softmax_after_topk,
            norm_topk_prob: moe.norm_topk_prob,
        }
    }
}

/// The llama-style attention block: q/k/v/o projections with the spec's biases, q/k norms
/// and sinks where the spec has them.
pub fn attention(ld: &mut Loader, l: usize) -> Result<AttentionWeights> {
    let s = ld.spec;
    let (hidden, hd) = (s.hidden_size, s.head_dim);
    let (q_dim, kv_dim) = (s.n_heads * hd, s.n_kv_heads * hd);
    let (qkv_bias, o_bias) = (s.qkv_bias, s.o_bias);
    let q = ld.linear(
        &ld.name(l, "attn_q", "self_attn.q_proj"),
        q_dim,
        hidden,
        qkv_bias,
    )?;
    let k = ld.linear(
        &ld.name(l, "attn_k", "self_attn.k_proj"),
        kv_dim,
        hidden,
        qkv_bias,
    )?;
    let v = ld.linear(
        &ld.name(l, "attn_v", "self_attn.v_proj"),
        kv_dim,
        hidden,
        qkv_bias,
    )?;
    let o = ld.linear(
        &ld.name(l, "attn_output", "self_attn.o_proj"),
        hidden,
        q_dim,
        o_bias,
    )?;
    let (q_norm, k_norm) = if s.qk_norm {
        let qn = ld.vec(
            &ld.name(l, "attn_q_norm.weight", "self_attn.q_norm.weight"),
            hd,
        )?;
        let kn = ld.vec(
            &ld.name(l, "attn_k_norm.weight", "self_attn.k_norm.weight"),
            hd,
        )?;
        (Some(qn), Some(kn))
    } else {
        (None, None)
    };
    let sinks = if s.attention_sinks {
        Some(ld.vec(
            &ld.name(l, "attn_sinks.weight", "self_attn.sinks"),
            s.n_heads,
        )?)
    } else {
        None
    };
    Ok(AttentionWeights {
        q,
        k,
        v,
        o,
        q_norm,
        k_norm,
        sinks,
    })
}

/// The two RMSNorm weights of a layer; `gguf_post` names the second one in GGUF files
/// (`ffn_norm` for the llama family, `post_attention_norm` for gpt-oss).
pub fn norms(ld: &mut Loader, l: usize, gguf_post: &str) -> Result<(VecRef, VecRef)> {
    let hidden = ld.spec.hidden_size;
    let attn = ld.vec(
        &ld.name(l, "attn_norm.weight", "input_layernorm.weight"),
        hidden,
    )?;
    let post = ld.vec(
        &ld.name(
            l,
            &format!("{gguf_post}.weight"),
            "post_attention_layernorm.weight",
        ),
        hidden,
    )?;
    Ok((attn, post))
}

/// A dense gated FFN `mlp.{gate,up,down}_proj` / `ffn_{gate,up,down}`.
pub fn dense_ffn(
    ld: &mut Loader,
    l: usize,
    width: usize,
    gguf: &str,
    hf: &str,
) -> Result<GatedFfn> {
    let (hidden, bias) = (ld.spec.hidden_size, ld.spec.mlp_bias);
    let name = |ld: &Loader, proj: &str| {
        if ld.is_gguf() {
            ld.name(l, &format!("ffn_{proj}{gguf}"), "")
        } else {
            ld.name(l, "", &format!("{hf}.{proj}_proj"))
        }
    };
    Ok(GatedFfn {
        gate: ld.linear(&name(ld, "gate"), width, hidden, bias)?,
        up: ld.linear(&name(ld, "up"), width, hidden, bias)?,
        down: ld.linear(&name(ld, "down"), hidden, width, bias)?,
    })
}

/// Stacked experts `{prefix}{gate,up,down}{suffix}` as one `[n_expert, out, in]` tensor per
/// projection (GGUF `ffn_*_exps`, MLX `switch_mlp.*_proj`), without biases.
pub fn stacked_experts(
    ld: &mut Loader,
    names: [String; 3],
    n_exp: usize,
    width: usize,
) -> Result<Vec<GatedFfn>> {
    let hidden = ld.spec.hidden_size;
    let [g, u, d] = names;
    let gate = ld.stacked(&g, n_exp, width, hidden, false)?;
    let up = ld.stacked(&u, n_exp, width, hidden, false)?;
    let down = ld.stacked(&d, n_exp, hidden, width, false)?;
    Ok((0..n_exp)
        .map(|e| GatedFfn {
            gate: Linear {
                w: gate[e],
                bias: None,
            },
            up: Linear {
                w: up[e],
                bias: None,
            },
            down: Linear {
                w: down[e],
                bias: None,
            },
        })
        .collect())
}

/// A layer of the llama family: attention, two norms and a dense FFN.
pub fn dense_layer(ld: &mut Loader, l: usize) -> Result<LayerWeights> {
    let attn = attention(ld, l)?;
    let (attn_norm, ffn_norm) = norms(ld, l, "ffn_norm")?;
    let ffn = dense_ffn(ld, l, ld.spec.ffn, "", "mlp")?;
    Ok(LayerWeights {
        attn_norm,
        attn,
        ffn_norm,
        ffn: FfnWeights::Dense(ffn),
    })
}
