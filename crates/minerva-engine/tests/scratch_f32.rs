use minerva_engine::{CpuBackend, Model};
use minerva_formats::checkpoint::*;
use minerva_formats::*;
use std::path::Path;

const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn open_st(dir: &Path) -> Checkpoint {
    let path = dir.join("model.safetensors");
    let map = map_file(&path).unwrap();
    let n = u64::from_le_bytes(map[..8].try_into().unwrap()) as usize;
    let h: serde_json::Value = serde_json::from_slice(&map[8..8 + n]).unwrap();
    let mut entries = vec![];
    for (k, v) in h.as_object().unwrap() {
        if k == "__metadata__" {
            continue;
        }
        let off = v["data_offsets"].as_array().unwrap();
        entries.push(TensorEntry {
            name: k.clone(),
            shape: v["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect(),
            dtype: DType::from_safetensors(v["dtype"].as_str().unwrap()).unwrap(),
            layout: Layout::Plain,
            spans: vec![Span {
                file: 0,
                start: 8 + n + off[0].as_u64().unwrap() as usize,
                end: 8 + n + off[1].as_u64().unwrap() as usize,
            }],
        });
    }
    let size = map.len() as u64;
    Checkpoint::from_parts(
        Format::Safetensors,
        dir.to_path_buf(),
        vec![ModelFile { path, size }],
        vec![map],
        entries,
        Metadata::default(),
        None,
    )
    .unwrap()
}

fn spec(arch: &str) -> ModelSpec {
    let base = ModelSpec {
        architecture: Architecture::Llama,
        hidden_size: 256,
        n_layers: 2,
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: 32,
        vocab_size: 512,
        ffn: 512,
        moe: None,
        rope: RopeSpec {
            theta: 10000.0,
            style: RopeStyle::Halves,
            dim: 32,
            scaling: RopeScaling::None,
        },
        norm_eps: 1e-5,
        sliding_window: None,
        sliding_layers: vec![false, false],
        attention_sinks: false,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        qk_norm: false,
        tie_embeddings: false,
        activation: Activation::Silu,
        context_length: 256,
        bos_token_id: None,
        eos_token_ids: vec![],
        pad_token_id: None,
    };
    match arch {
        "llama" => base,
        "qwen3" => ModelSpec {
            architecture: Architecture::Qwen3,
            head_dim: 64,
            ffn: 256,
            rope: RopeSpec {
                theta: 1e6,
                dim: 64,
                ..base.rope
            },
            norm_eps: 1e-6,
            qk_norm: true,
            tie_embeddings: true,
            ..base
        },
        "mixtral" => ModelSpec {
            architecture: Architecture::Mixtral,
            n_layers: 1,
            ffn: 0,
            sliding_layers: vec![false],
            rope: RopeSpec {
                theta: 1e6,
                ..base.rope
            },
            moe: Some(MoeSpec {
                n_experts: 4,
                experts_per_token: 2,
                expert_ffn: 256,
                shared_expert_ffn: None,
                norm_topk_prob: true,
                softmax_after_topk: true,
            }),
            ..base
        },
        "gpt_oss" => ModelSpec {
            architecture: Architecture::GptOss,
            n_heads: 4,
            head_dim: 64,
            ffn: 0,
            rope: RopeSpec {
                theta: 150000.0,
                style: RopeStyle::Halves,
                dim: 64,
                scaling: RopeScaling::Yarn {
                    factor: 8.0,
                    original_max_position: 32,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    truncate: false,
                    attention_factor: None,
                },
            },
            sliding_window: Some(8),
            sliding_layers: vec![true, false],
            attention_sinks: true,
            qkv_bias: true,
            o_bias: true,
            mlp_bias: true,
            activation: Activation::GptOssClamped {
                alpha: 1.702,
                limit: 7.0,
            },
            moe: Some(MoeSpec {
                n_experts: 4,
                experts_per_token: 2,
                expert_ffn: 64,
                shared_expert_ffn: None,
                norm_topk_prob: true,
                softmax_after_topk: true,
            }),
            ..base
        },
        _ => panic!(),
    }
}

#[test]
fn f32_fixtures() {
    for arch in ["llama", "qwen3", "mixtral", "gpt_oss"] {
        let dir = Path::new(FIX).join(arch).join("f32");
        let ck = open_st(&dir);
        let mut m = Model::load_with_spec(&ck, spec(arch), Box::new(CpuBackend::new())).unwrap();
        let refb = std::fs::read(dir.join("reference.safetensors")).unwrap();
        let r = safetensors::SafeTensors::deserialize(&refb).unwrap();
        let ids: Vec<u32> = r
            .tensor("input_ids")
            .unwrap()
            .data()
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32)
            .collect();
        let want: Vec<f32> = r
            .tensor("logits")
            .unwrap()
            .data()
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let mut cache = m.new_cache(64).unwrap();
        let got = m.score(&mut cache, &ids).unwrap();
        let d = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let dl = got[got.len() - 512..]
            .iter()
            .zip(&want[want.len() - 512..])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let d0 = got[..512]
            .iter()
            .zip(&want[..512])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        println!("{arch}: max abs diff {d} first row {d0} last row {dl}");
    }
}
