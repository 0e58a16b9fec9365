//! gpt-oss as OpenAI publishes it: experts as MXFP4 `_blocks`/`_scales` ([E, 2F, hidden/32, 16],
//! gate and up interleaved by row, even elements in low nibbles). Converted to GGUF (element j
//! low, j+16 high; gate and up split) and MLX, the experts keep exactly the same values; written
//! back as SafeTensors mxfp4, they are that layout again.

use minerva_formats::names::{self, Role, TensorId};
use minerva_formats::quantize::encode_rows;
use minerva_formats::write::from_checkpoint::model_from_checkpoint;
use minerva_formats::write::model::parse_target;
use minerva_formats::write::safetensors::write_safetensors;
use minerva_formats::write::{OutTensor, Source};
use minerva_formats::{dequantize, Architecture, Checkpoint, DType, TensorData};
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

/// The fixture's dense experts re-laid out as the original checkpoint's MXFP4 blocks.
fn write_original_layout(dir: &Path) {
    let src = Checkpoint::open(Path::new(FIXTURES).join("gpt_oss/f32")).unwrap();
    let mut packed: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut plain = Vec::new();
    for t in src.tensors() {
        let name = t.name.to_string();
        if name.ends_with("mlp.experts.gate_up_proj") || name.ends_with("mlp.experts.down_proj") {
            // Dense [E, in, out] → rows [E, out, in].
            let (e, i, o) = (t.shape[0], t.shape[1], t.shape[2]);
            let x = dequantize(&t).unwrap();
            let mut rows = vec![0f32; x.len()];
            for ex in 0..e {
                for r in 0..o {
                    for c in 0..i {
                        rows[(ex * o + r) * i + c] = x[(ex * i + c) * o + r];
                    }
                }
            }
            // MLX mxfp4 packs use the same nibble order and scale bytes as these blocks.
            let (mut w, mut s) = (vec![0u8; rows.len() / 2], vec![0u8; rows.len() / 32]);
            encode_rows(DType::MlxMxfp4, &rows, i, &mut [&mut w, &mut s]).unwrap();
            packed.push((format!("{name}_blocks"), vec![e, o, i / 32, 16], w));
            packed.push((format!("{name}_scales"), vec![e, o, i / 32], s));
        } else {
            plain.push(t);
        }
    }
    let mut out: Vec<OutTensor> = plain
        .iter()
        .map(|t| {
            let TensorData::Plain(b) = t.data else {
                panic!("plain fixture")
            };
            OutTensor::new(t.name, t.shape.clone(), t.dtype, Source::Stored(vec![b]))
        })
        .collect();
    for (name, shape, bytes) in &packed {
        out.push(OutTensor::new(
            name.clone(),
            shape.clone(),
            DType::U8,
            Source::Stored(vec![bytes.as_slice()]),
        ));
    }
    write_safetensors(dir, &out, 1 << 30, "pt", false, &|_| {}).unwrap();
    for f in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    ] {
        std::fs::copy(Path::new(FIXTURES).join("gpt_oss/f32").join(f), dir.join(f)).unwrap();
    }
}

#[test]
fn original_mxfp4_experts_keep_their_values_in_gguf_and_mlx() {
    let tmp = tempfile::tempdir().unwrap();
    let orig = tmp.path().join("orig");
    std::fs::create_dir(&orig).unwrap();
    write_original_layout(&orig);
    let ck = Checkpoint::open(&orig).unwrap();
    let gu = ck
        .tensor("model.layers.0.mlp.experts.gate_up_proj")
        .unwrap();
    assert_eq!(gu.dtype, DType::HfMxfp4);
    let model = model_from_checkpoint(&ck).unwrap();
    let (gguf, mlx) = (tmp.path().join("o.gguf"), tmp.path().join("mlx"));
    model
        .write(
            &parse_target(&model, "gguf", Some("mxfp4"), None).unwrap(),
            &gguf,
            &|_| {},
        )
        .unwrap();
    model
        .write(
            &parse_target(&model, "mlx", Some("mxfp4"), None).unwrap(),
            &mlx,
            &|_| {},
        )
        .unwrap();
    let (g, m) = (
        Checkpoint::open(&gguf).unwrap(),
        Checkpoint::open(&mlx).unwrap(),
    );
    for layer in 0..2 {
        let base = format!("model.layers.{layer}.mlp.experts");
        let gate_up = dequantize(&ck.tensor(&format!("{base}.gate_up_proj")).unwrap()).unwrap();
        let down = dequantize(&ck.tensor(&format!("{base}.down_proj")).unwrap()).unwrap();
        let (e, two_f, hidden) = (4, 128, 256);
        let f = two_f / 2;
        for (role, pick) in [
            (Role::ExpGate, Some(0)),
            (Role::ExpUp, Some(1)),
            (Role::ExpDown, None),
        ] {
            let want: Vec<f32> = match pick {
                Some(p) => (0..e)
                    .flat_map(|x| (0..f).flat_map(move |r| (0..hidden).map(move |c| (x, r, c))))
                    .map(|(x, r, c)| gate_up[(x * two_f + 2 * r + p) * hidden + c])
                    .collect(),
                None => down.clone(),
            };
            let id = TensorId::layer(role, layer);
            let gt = g
                .tensor(&names::gguf_name(Architecture::GptOss, id).unwrap())
                .unwrap();
            assert_eq!(gt.dtype, DType::MXFP4);
            assert!(
                dequantize(&gt).unwrap() == want,
                "GGUF {role:?} layer {layer}"
            );
            let mt = m
                .tensor(&names::mlx_name(Architecture::GptOss, id).unwrap())
                .unwrap();
            assert_eq!(mt.dtype, DType::MlxMxfp4);
            assert!(
                dequantize(&mt).unwrap() == want,
                "MLX {role:?} layer {layer}"
            );
        }
    }
}

#[test]
fn safetensors_mxfp4_writes_the_original_layout_back() {
    let tmp = tempfile::tempdir().unwrap();
    let orig = tmp.path().join("orig");
    std::fs::create_dir(&orig).unwrap();
    write_original_layout(&orig);
    let ck = Checkpoint::open(&orig).unwrap();
    let model = model_from_checkpoint(&ck).unwrap();
    let out = tmp.path().join("st");
    let target = parse_target(&model, "safetensors", Some("mxfp4"), None).unwrap();
    model.write(&target, &out, &|_| {}).unwrap();
    let back = Checkpoint::open(&out).unwrap();
    for layer in 0..2 {
        for name in ["gate_up_proj", "down_proj"] {
            let name = format!("model.layers.{layer}.mlp.experts.{name}");
            let (a, b) = (ck.tensor(&name).unwrap(), back.tensor(&name).unwrap());
            assert_eq!((b.dtype, &b.shape), (DType::HfMxfp4, &a.shape), "{name}");
            assert!(dequantize(&a).unwrap() == dequantize(&b).unwrap(), "{name}");
        }
        let q = back
            .tensor(&format!("model.layers.{layer}.self_attn.q_proj.weight"))
            .unwrap();
        assert_eq!(q.dtype, DType::BF16);
    }
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["quantization_config"]["quant_method"], "mxfp4");
    // Only gpt-oss has this layout.
    let llama = Checkpoint::open(Path::new(FIXTURES).join("llama/f32")).unwrap();
    let llama = model_from_checkpoint(&llama).unwrap();
    let Err(err) = parse_target(&llama, "safetensors", Some("mxfp4"), None) else {
        panic!("llama written as SafeTensors mxfp4")
    };
    assert!(err.contains("gpt-oss"), "{err}");
}
