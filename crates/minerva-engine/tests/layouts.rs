//! Checkpoint layouts the fixtures do not hold, made from the f32 fixtures by renaming and
//! re-laying out the same weights (as mlx-lm and other architectures store them). The same
//! weights must give the fixture's reference logits, on the CPU and (where an adapter exists,
//! always under CI) on the GPU backend.

use minerva_engine::gpu::{GpuBackend, GpuError, GpuOptions};
use minerva_engine::{Backend, CpuBackend, Model};
use minerva_formats::Checkpoint;
use safetensors::tensor::{serialize_to_file, Dtype, TensorView};
use safetensors::SafeTensors;
use std::collections::BTreeMap;
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

fn read(path: &Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, t)| {
            let v = t
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (name, (t.shape().to_vec(), v))
        })
        .collect()
}

/// Writes `tensors` and `config` as a model folder and runs the fixture prompt through it.
fn logits_of(tensors: &Tensors, config: &serde_json::Value, ids: &[u32]) -> Vec<f32> {
    let dir = tempfile::tempdir().unwrap();
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, (s, v))| {
            (
                n.clone(),
                s.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views = bytes.iter().map(|(n, s, b)| {
        (
            n.as_str(),
            TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
        )
    });
    serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_string(config).unwrap(),
    )
    .unwrap();
    let ckpt = Checkpoint::open(dir.path()).unwrap();
    let run = |backend: Box<dyn Backend>| {
        let mut model = Model::load(&ckpt, backend).unwrap();
        let mut cache = model.new_cache(ids.len()).unwrap();
        model.score(&mut cache, ids).unwrap()
    };
    let cpu = run(Box::new(CpuBackend::reference()));
    match GpuBackend::new(&GpuOptions {
        kv_f32: true,
        ..Default::default()
    }) {
        Ok(gpu) => assert_close(&run(Box::new(gpu)), &cpu, "GPU against CPU"),
        Err(e @ GpuError::NoAdapter(_)) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED on the GPU: no adapter ({e})")
        }
        Err(e) => panic!("GPU backend unavailable: {e}"),
    }
    cpu
}

/// The fixture's weights, config, prompt ids and reference logits.
fn fixture(name: &str) -> (Tensors, serde_json::Value, Vec<u32>, Vec<f32>) {
    let dir = Path::new(FIXTURES).join(name).join("f32");
    let tensors = read(&dir.join("model.safetensors"));
    let config =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let reference = read(&dir.join("reference.safetensors"));
    let bytes = std::fs::read(dir.join("reference.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let ids = st
        .tensor("input_ids")
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32)
        .collect();
    (tensors, config, ids, reference["logits"].1.clone())
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    let d = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(d < 1e-4, "{what}: logits differ by {d}");
}

/// `[rows, cols]` → `[cols, rows]`.
fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| v[r * cols + c]))
        .collect()
}

/// mlx-lm's mixtral layout: experts stacked as `block_sparse_moe.switch_mlp.*_proj`.
#[test]
fn mixtral_stacked_experts() {
    let (mut t, config, ids, want) = fixture("mixtral");
    let p = "model.layers.0.block_sparse_moe.";
    for (proj, w) in [("gate", "w1"), ("up", "w3"), ("down", "w2")] {
        let mut shape = vec![4];
        let mut data = Vec::new();
        for e in 0..4 {
            let (s, v) = t.remove(&format!("{p}experts.{e}.{w}.weight")).unwrap();
            shape = [vec![4], s].concat();
            data.extend(v);
        }
        t.insert(format!("{p}switch_mlp.{proj}_proj.weight"), (shape, data));
    }
    assert_close(&logits_of(&t, &config, &ids), &want, "mixtral switch_mlp");
}

/// The mixtral weights as a Qwen2-MoE checkpoint: same routing with `norm_topk_prob`, zero
/// q/k/v biases, and a shared expert whose output is zero (its path still runs).
#[test]
fn qwen2_moe_with_shared_expert() {
    let (src, mut config, ids, want) = fixture("mixtral");
    let mut t = Tensors::new();
    for (name, val) in src {
        let name = name
            .replace("block_sparse_moe.gate.", "mlp.gate.")
            .replace("block_sparse_moe.experts.", "mlp.experts.")
            .replace(".w1.", ".gate_proj.")
            .replace(".w3.", ".up_proj.")
            .replace(".w2.", ".down_proj.");
        t.insert(name, val);
    }
    let l = "model.layers.0.";
    for (proj, n) in [("q", 256), ("k", 64), ("v", 64)] {
        t.insert(
            format!("{l}self_attn.{proj}_proj.bias"),
            (vec![n], vec![0.0; n]),
        );
    }
    let sh = 32;
    t.insert(
        format!("{l}mlp.shared_expert.gate_proj.weight"),
        (vec![sh, 256], vec![0.1; sh * 256]),
    );
    t.insert(
        format!("{l}mlp.shared_expert.up_proj.weight"),
        (vec![sh, 256], vec![0.1; sh * 256]),
    );
    t.insert(
        format!("{l}mlp.shared_expert.down_proj.weight"),
        (vec![256, sh], vec![0.0; sh * 256]),
    );
    t.insert(
        format!("{l}mlp.shared_expert_gate.weight"),
        (vec![1, 256], vec![0.3; 256]),
    );
    let c = config.as_object_mut().unwrap();
    c.insert("model_type".into(), "qwen2_moe".into());
    c.insert("num_experts".into(), 4.into());
    c.insert("moe_intermediate_size".into(), 256.into());
    c.insert("shared_expert_intermediate_size".into(), sh.into());
    c.insert("norm_topk_prob".into(), true.into());
    assert_close(&logits_of(&t, &config, &ids), &want, "qwen2_moe");
}

/// mlx-lm's gpt-oss layout: separate `mlp.experts.{gate,up,down}_proj` `[E, out, in]` with
/// separate biases, instead of the interleaved input-major `gate_up_proj`.
#[test]
fn gpt_oss_split_experts() {
    let (mut t, config, ids, want) = fixture("gpt_oss");
    let (e_n, hidden, width) = (4, 256, 64);
    for l in 0..2 {
        let p = format!("model.layers.{l}.mlp.experts.");
        let (_, gu) = t.remove(&format!("{p}gate_up_proj")).unwrap();
        let (_, gub) = t.remove(&format!("{p}gate_up_proj_bias")).unwrap();
        let (_, down) = t.remove(&format!("{p}down_proj")).unwrap();
        let (_, db) = t.remove(&format!("{p}down_proj_bias")).unwrap();
        let (mut gate, mut up, mut dn) = (Vec::new(), Vec::new(), Vec::new());
        for e in 0..e_n {
            // [hidden, 2·I] input-major → [I, hidden] per half.
            let m = transpose(
                &gu[e * hidden * 2 * width..(e + 1) * hidden * 2 * width],
                hidden,
                2 * width,
            );
            for (j, row) in m.chunks_exact(hidden).enumerate() {
                if j % 2 == 0 {
                    gate.extend(row)
                } else {
                    up.extend(row)
                }
            }
            dn.extend(transpose(
                &down[e * width * hidden..(e + 1) * width * hidden],
                width,
                hidden,
            ));
        }
        let (gb, ub): (Vec<f32>, Vec<f32>) = gub.chunks_exact(2).map(|c| (c[0], c[1])).unzip();
        t.insert(
            format!("{p}gate_proj.weight"),
            (vec![e_n, width, hidden], gate),
        );
        t.insert(format!("{p}up_proj.weight"), (vec![e_n, width, hidden], up));
        t.insert(
            format!("{p}down_proj.weight"),
            (vec![e_n, hidden, width], dn),
        );
        t.insert(format!("{p}gate_proj.bias"), (vec![e_n, width], gb));
        t.insert(format!("{p}up_proj.bias"), (vec![e_n, width], ub));
        t.insert(format!("{p}down_proj.bias"), (vec![e_n, hidden], db));
    }
    assert_close(
        &logits_of(&t, &config, &ids),
        &want,
        "gpt-oss split experts",
    );
}

/// The llama weights as Mistral with a window longer than the prompt: the same logits.
#[test]
fn mistral_is_llama_with_a_window() {
    let (t, mut config, ids, want) = fixture("llama");
    let c = config.as_object_mut().unwrap();
    c.insert("model_type".into(), "mistral".into());
    c.insert("sliding_window".into(), 64.into());
    assert_close(&logits_of(&t, &config, &ids), &want, "mistral");
}
