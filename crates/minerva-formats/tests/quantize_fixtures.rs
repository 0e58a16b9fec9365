//! Quantizers against llama.cpp's own output on the fixtures: Q8_0 and Q4_0 bytes must be
//! identical; K-quants and MXFP4 must reconstruct the f32 originals at least as well.

use minerva_formats::names::{self, TensorId};
use minerva_formats::quantize::{encode_rows, row_buffer_bytes};
use minerva_formats::{Architecture, DType};
use std::collections::HashMap;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

/// A GGUF tensor table read just far enough to find each tensor's bytes.
struct GgufTensors {
    bytes: Vec<u8>,
    tensors: HashMap<String, (Vec<usize>, u32, usize)>,
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        self.pos += n;
        &self.b[self.pos - n..self.pos]
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> usize {
        u64::from_le_bytes(self.take(8).try_into().unwrap()) as usize
    }
    fn string(&mut self) -> String {
        let n = self.u64();
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }
    fn skip_value(&mut self, ty: u32) {
        const FIXED: [usize; 13] = [1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8];
        match ty {
            8 => {
                self.string();
            }
            9 => {
                let ety = self.u32();
                for _ in 0..self.u64() {
                    self.skip_value(ety);
                }
            }
            t => {
                self.take(FIXED[t as usize]);
            }
        }
    }
}

fn read_gguf(rel: &str) -> GgufTensors {
    let bytes = std::fs::read(format!("{FIXTURES}/{rel}")).unwrap();
    assert_eq!(&bytes[..4], b"GGUF");
    let mut c = Cursor { b: &bytes, pos: 8 };
    let n_tensors = c.u64();
    let n_kv = c.u64();
    let mut alignment = 32;
    for _ in 0..n_kv {
        let key = c.string();
        let ty = c.u32();
        if key == "general.alignment" {
            alignment = u32::from_le_bytes(c.b[c.pos..c.pos + 4].try_into().unwrap()) as usize;
        }
        c.skip_value(ty);
    }
    let mut tensors = HashMap::new();
    for _ in 0..n_tensors {
        let name = c.string();
        let nd = c.u32() as usize;
        let mut shape: Vec<usize> = (0..nd).map(|_| c.u64()).collect();
        shape.reverse();
        let ty = c.u32();
        let off = c.u64();
        tensors.insert(name, (shape, ty, off));
    }
    let data_start = c.pos.div_ceil(alignment) * alignment;
    for t in tensors.values_mut() {
        t.2 += data_start;
    }
    GgufTensors { bytes, tensors }
}

impl GgufTensors {
    fn get(&self, name: &str) -> (Vec<usize>, DType, &[u8]) {
        let (shape, ty, off) = &self.tensors[name];
        let dtype = DType::from_ggml_type(*ty).unwrap();
        let row = *shape.last().unwrap();
        let rows: usize = shape.iter().product::<usize>() / row;
        let len = rows * dtype.row_bytes(row).unwrap();
        (shape.clone(), dtype, &self.bytes[*off..*off + len])
    }
}

fn f32_tensors(rel: &str) -> HashMap<String, (Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(format!("{FIXTURES}/{rel}")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, v)| {
            let data = v
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (name, (v.shape().to_vec(), data))
        })
        .collect()
}

/// llama.cpp's q/k permutation for GGUF `llama`: row h·d + 2i + j ← HF row h·d + j·d/2 + i.
fn permute_rows(w: &[f32], row_len: usize, n_head: usize) -> Vec<f32> {
    let rows = w.len() / row_len;
    let d = rows / n_head;
    let mut out = vec![0f32; w.len()];
    for h in 0..n_head {
        for i in 0..d / 2 {
            for j in 0..2 {
                let dst = h * d + 2 * i + j;
                let src = h * d + j * d / 2 + i;
                out[dst * row_len..(dst + 1) * row_len]
                    .copy_from_slice(&w[src * row_len..(src + 1) * row_len]);
            }
        }
    }
    out
}

fn quantize(dtype: DType, x: &[f32], row_len: usize) -> Vec<u8> {
    let per_row = row_buffer_bytes(dtype, row_len).unwrap();
    let mut out = vec![0u8; per_row[0] * x.len() / row_len];
    encode_rows(dtype, x, row_len, &mut [&mut out]).unwrap();
    out
}

/// The f32 original of a GGUF tensor of the llama or mixtral fixtures, in GGUF row order.
fn original(
    f32s: &HashMap<String, (Vec<usize>, Vec<f32>)>,
    arch: Architecture,
    gguf: &str,
    heads: (usize, usize),
) -> Vec<f32> {
    let id: TensorId = names::parse_gguf(arch, gguf).unwrap();
    use names::Role::*;
    if matches!(id.role, ExpGate | ExpUp | ExpDown) {
        let layer = id.layer.unwrap();
        return (0..)
            .map_while(|e| names::hf_mixtral_expert(layer, id.role, e).and_then(|n| f32s.get(&n)))
            .flat_map(|(_, d)| d.iter().copied())
            .collect();
    }
    let (shape, data) = &f32s[&names::hf_name(arch, id).unwrap()];
    match id.role {
        AttnQ if names::gguf_permutes_qk(arch) => permute_rows(data, shape[1], heads.0),
        AttnK if names::gguf_permutes_qk(arch) => permute_rows(data, shape[1], heads.1),
        _ => data.clone(),
    }
}

fn assert_bytes_equal(gguf_rel: &str, want: DType) {
    let g = read_gguf(gguf_rel);
    let f32s = f32_tensors("llama/f32/model.safetensors");
    let mut checked = 0;
    for name in g.tensors.keys() {
        let (shape, dtype, bytes) = g.get(name);
        if dtype != want {
            continue;
        }
        let x = original(&f32s, Architecture::Llama, name, (8, 2));
        let ours = quantize(dtype, &x, *shape.last().unwrap());
        let diff = ours.iter().zip(bytes).filter(|(a, b)| a != b).count();
        assert_eq!(
            diff,
            0,
            "{name}: {diff} of {} bytes differ from llama.cpp's {}",
            bytes.len(),
            dtype.name()
        );
        checked += 1;
    }
    assert!(
        checked >= 15,
        "only {checked} {} tensors compared",
        want.name()
    );
}

#[test]
fn q8_0_bytes_equal_llama_cpp_converter() {
    assert_bytes_equal("llama/gguf-q8_0/llama-Q8_0.gguf", DType::Q8_0);
}

#[test]
fn q4_0_bytes_equal_llama_quantize() {
    assert_bytes_equal("llama/gguf-q4_0/llama-Q4_0.gguf", DType::Q4_0);
}

/// gpt-oss HF experts → GGUF rows: gate/up de-interleaved from `gate_up_proj` [E, hidden, 2F]
/// and transposed; `down_proj` [E, F, hidden] transposed.
fn gpt_oss_expert(
    f32s: &HashMap<String, (Vec<usize>, Vec<f32>)>,
    layer: usize,
    role: names::Role,
) -> (Vec<f32>, usize) {
    let fused = |n: &str| &f32s[&format!("model.layers.{layer}.mlp.experts.{n}")];
    let (shape, data, pick): (&Vec<usize>, &Vec<f32>, Option<usize>) = match role {
        names::Role::ExpGate => (&fused("gate_up_proj").0, &fused("gate_up_proj").1, Some(0)),
        names::Role::ExpUp => (&fused("gate_up_proj").0, &fused("gate_up_proj").1, Some(1)),
        _ => (&fused("down_proj").0, &fused("down_proj").1, None),
    };
    let (e, rows_in, cols) = (shape[0], shape[1], shape[2]);
    let out_rows = if pick.is_some() { cols / 2 } else { cols };
    let mut out = Vec::with_capacity(e * out_rows * rows_in);
    for x in 0..e {
        for o in 0..out_rows {
            let col = pick.map_or(o, |p| 2 * o + p);
            for i in 0..rows_in {
                out.push(data[(x * rows_in + i) * cols + col]);
            }
        }
    }
    (out, rows_in)
}

/// Compares our quantization of each tensor of `want` type with llama.cpp's bytes; returns
/// (tensors, tensors byte-identical).
fn compare_kind(
    gguf_rel: &str,
    f32_rel: &str,
    arch: Architecture,
    heads: (usize, usize),
    want: DType,
) -> (usize, usize) {
    let g = read_gguf(gguf_rel);
    let f32s = f32_tensors(f32_rel);
    let (mut n, mut same) = (0, 0);
    for name in g.tensors.keys() {
        let (shape, dtype, bytes) = g.get(name);
        if dtype != want {
            continue;
        }
        let id = names::parse_gguf(arch, name).unwrap();
        let x = if arch == Architecture::GptOss
            && matches!(
                id.role,
                names::Role::ExpGate | names::Role::ExpUp | names::Role::ExpDown
            ) {
            gpt_oss_expert(&f32s, id.layer.unwrap(), id.role).0
        } else {
            original(&f32s, arch, name, heads)
        };
        let ours = quantize(dtype, &x, *shape.last().unwrap());
        n += 1;
        if ours == bytes {
            same += 1;
        } else {
            let d = ours.iter().zip(bytes).filter(|(a, b)| a != b).count();
            eprintln!(
                "{name} {}: {d} of {} bytes differ",
                dtype.name(),
                bytes.len()
            );
        }
    }
    (n, same)
}

/// The K-quant search and MXFP4 rounding reproduce llama.cpp's bytes on every fixture tensor,
/// so their reconstruction error equals llama.cpp's (the brief asks for no worse).
#[test]
fn k_quants_and_mxfp4_bytes_equal_llama_quantize() {
    let mixtral = (
        "mixtral/gguf-q4_k_m/mixtral-Q4_K_M.gguf",
        "mixtral/f32/model.safetensors",
        Architecture::Mixtral,
        (8, 2),
    );
    let gpt_oss = (
        "gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf",
        "gpt_oss/f32/model.safetensors",
        Architecture::GptOss,
        (4, 2),
    );
    let llama = (
        "llama/gguf-q4_0/llama-Q4_0.gguf",
        "llama/f32/model.safetensors",
        Architecture::Llama,
        (8, 2),
    );
    for ((g, f, arch, heads), dtype, count) in [
        (mixtral, DType::Q4_K, 6),
        (mixtral, DType::Q6_K, 3),
        (gpt_oss, DType::MXFP4, 6),
        (gpt_oss, DType::Q8_0, 10),
        (llama, DType::Q6_K, 1),
    ] {
        assert_eq!(
            compare_kind(g, f, arch, heads, dtype),
            (count, count),
            "{g} {}",
            dtype.name()
        );
    }
}
