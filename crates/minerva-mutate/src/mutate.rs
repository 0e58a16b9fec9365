//! The mutations: each case damages one file of one seed, by a named kind, so the campaign can
//! count what each kind reached.

use crate::gguf_fields::{Field, Kind};
use crate::rng::Rng;
use crate::seeds::{Seed, SeedFormat};
use serde_json::Value;

/// One damaged file: which seed, which file of it, its new bytes, and how it was made.
pub struct Case {
    pub seed: usize,
    pub file: String,
    pub bytes: Vec<u8>,
    pub kind: &'static str,
}

/// The case a generator in this state makes.
pub fn make(seeds: &[Seed], rng: &mut Rng) -> Case {
    let seed_index = rng.below(seeds.len());
    let seed = &seeds[seed_index];
    let (file, bytes, kind) = match seed.format {
        SeedFormat::Gguf => {
            let (fields, end) = seed.gguf.as_ref().expect("GGUF seeds carry their fields");
            let (b, kind) = gguf(&seed.files[0].1, fields, *end, rng);
            (seed.files[0].0.clone(), b, kind)
        }
        _ => folder(seed, rng),
    };
    Case {
        seed: seed_index,
        file,
        bytes,
        kind,
    }
}

fn put(b: &mut [u8], f: &Field, v: u64) {
    b[f.pos..f.pos + f.width].copy_from_slice(&v.to_le_bytes()[..f.width]);
}

fn get(b: &[u8], f: &Field) -> u64 {
    let mut v = [0u8; 8];
    v[..f.width].copy_from_slice(&b[f.pos..f.pos + f.width]);
    u64::from_le_bytes(v)
}

fn pick_field<'a>(
    fields: &'a [Field],
    rng: &mut Rng,
    want: impl Fn(Kind) -> bool,
) -> Option<&'a Field> {
    let matching: Vec<&Field> = fields.iter().filter(|f| want(f.kind)).collect();
    (!matching.is_empty()).then(|| *rng.pick(&matching))
}

/// A value near the field's own, or one an attacker would pick.
fn integer(rng: &mut Rng, old: u64) -> u64 {
    if rng.chance(25) {
        old.wrapping_add(rng.below(7) as u64).wrapping_sub(3)
    } else {
        rng.count()
    }
}

fn float_bits(rng: &mut Rng, width: usize) -> u64 {
    let v = rng.float();
    if width == 4 {
        u64::from((v as f32).to_bits())
    } else {
        v.to_bits()
    }
}

fn gguf(
    seed: &[u8],
    fields: &[Field],
    header_end: usize,
    rng: &mut Rng,
) -> (Vec<u8>, &'static str) {
    let mut b = seed.to_vec();
    let choice = rng.below(11);
    let stacked = choice == 10;
    let rounds = if stacked { 2 + rng.below(3) } else { 1 };
    let mut kind = "gguf-stacked";
    for _ in 0..rounds {
        let c = if stacked { rng.below(10) } else { choice };
        let (k, field): (&'static str, Option<&Field>) = match c {
            0 => ("gguf-count", pick_field(fields, rng, |k| k == Kind::Count)),
            1 => {
                let array = rng.chance(15);
                let f = pick_field(
                    fields,
                    rng,
                    |k| matches!(k, Kind::Number { array: a, .. } if a == array),
                );
                ("gguf-meta-value", f)
            }
            2 => (
                "gguf-type-tag",
                pick_field(fields, rng, |k| k == Kind::ValueType),
            ),
            3 => (
                "gguf-length",
                pick_field(fields, rng, |k| {
                    matches!(k, Kind::Length | Kind::ItemLength | Kind::ArrayLength)
                }),
            ),
            4 => ("gguf-dtype", pick_field(fields, rng, |k| k == Kind::DType)),
            5 => (
                "gguf-offset",
                pick_field(fields, rng, |k| k == Kind::Offset),
            ),
            6 => (
                "gguf-shape",
                pick_field(fields, rng, |k| matches!(k, Kind::NDims | Kind::Dim)),
            ),
            7 => {
                let at = if rng.chance(60) {
                    rng.below(header_end + 1)
                } else {
                    rng.below(b.len() + 1)
                };
                b.truncate(at);
                ("truncate", None)
            }
            _ => {
                flip(&mut b, header_end, rng);
                ("bitflip", None)
            }
        };
        if let Some(f) = field {
            if f.pos + f.width <= b.len() {
                let old = get(&b, f);
                let v = match f.kind {
                    Kind::Number { float: true, .. } => float_bits(rng, f.width),
                    Kind::ValueType | Kind::DType if rng.chance(70) => rng.below(45) as u64,
                    _ => integer(rng, old),
                };
                put(&mut b, f, v);
            }
        }
        if !stacked {
            kind = k;
        }
    }
    (b, kind)
}

/// 1 to 8 bit flips, mostly in the first `hot` bytes (a header), else anywhere.
fn flip(b: &mut [u8], hot: usize, rng: &mut Rng) {
    if b.is_empty() {
        return;
    }
    for _ in 0..1 + rng.below(8) {
        let range = if rng.chance(80) {
            hot.clamp(1, b.len())
        } else {
            b.len()
        };
        let i = rng.below(range);
        b[i] ^= 1 << rng.below(8);
    }
}

/// Damages one file of a model folder.
fn folder(seed: &Seed, rng: &mut Rng) -> (String, Vec<u8>, &'static str) {
    let roll = rng.below(100);
    let target = match roll {
        0..=39 => "model.safetensors",
        40..=69 => "config.json",
        70..=84 => "tokenizer.json",
        85..=89 if seed.file("model.safetensors.index.json").is_some() => {
            "model.safetensors.index.json"
        }
        85..=92 => "tokenizer_config.json",
        93..=96 => "generation_config.json",
        _ => "chat_template.jinja",
    };
    let Some(original) = seed.file(target) else {
        // A file the seed lacks: the case creates it from nothing.
        return (target.to_string(), random_text(rng), "new-file");
    };
    let (bytes, kind) = match target {
        "model.safetensors" => safetensors(original, rng),
        "config.json" => (json_file(original, rng, CONFIG_KEYS), "config"),
        "chat_template.jinja" => (text_edits(original, rng), "template"),
        "tokenizer.json" if rng.chance(40) => {
            // Cut anywhere, the late sections (decoder, model) included.
            let at = rng.below(original.len() + 1);
            (original[..at].to_vec(), "tokenizer-truncate")
        }
        "tokenizer.json" => (json_file(original, rng, &[]), "tokenizer"),
        "model.safetensors.index.json" => (json_file(original, rng, &[]), "index"),
        _ => (json_file(original, rng, &[]), "tokenizer-config"),
    };
    (target.to_string(), bytes, kind)
}

/// config.json keys that size or steer the model: set often, with hostile values.
const CONFIG_KEYS: &[&str] = &[
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "intermediate_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "partial_rotary_factor",
    "sliding_window",
    "layer_types",
    "num_local_experts",
    "num_experts_per_tok",
    "swiglu_limit",
    "swiglu_alpha",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "model_type",
    "quantization",
    "rope_scaling",
    "rope_parameters",
];

fn random_text(rng: &mut Rng) -> Vec<u8> {
    let n = rng.below(64);
    (0..n)
        .map(|_| *rng.pick(b"{}[]\":,0123456789-.eE truefalsn\\x"))
        .collect()
}

/// A hostile JSON value: huge, negative, fractional, non-finite-looking, of the wrong type.
fn hostile_value(rng: &mut Rng) -> Value {
    match rng.below(9) {
        0 | 1 | 2 => Value::from(rng.count()),
        3 => Value::from(-(rng.count() as i64).saturating_abs().max(1)),
        4 => serde_json::Number::from_f64(rng.float()).map_or(Value::Null, Value::Number),
        5 => Value::Null,
        6 => Value::from("x"),
        7 => Value::from(rng.chance(50)),
        _ => {
            if rng.chance(50) {
                Value::Array(vec![Value::from(rng.count()); rng.below(4)])
            } else {
                Value::Object(Default::default())
            }
        }
    }
}

/// Every node of a JSON tree, as a path of keys and indexes.
fn paths(v: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                here.push(Step::Key(k.clone()));
                paths(c, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                here.push(Step::Index(i));
                paths(c, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn node<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, s| match s {
        Step::Key(k) => v.get_mut(k.as_str()),
        Step::Index(i) => v.get_mut(*i),
    })
}

/// Structural damage to a JSON file (a node replaced, removed, or a key set to a hostile
/// value), or byte-level damage to its text.
fn json_file(original: &[u8], rng: &mut Rng, keys: &[&str]) -> Vec<u8> {
    let parsed: Option<Value> = serde_json::from_slice(original).ok();
    let Some(mut v) = parsed.filter(|_| rng.chance(75)) else {
        return text_edits(original, rng);
    };
    if !keys.is_empty() && rng.chance(50) {
        if let Some(m) = v.as_object_mut() {
            let key = rng.pick(keys).to_string();
            if rng.chance(15) {
                m.remove(&key);
            } else {
                m.insert(key, hostile_value(rng));
            }
        }
    } else {
        let mut all = Vec::new();
        paths(&v, &mut Vec::new(), &mut all);
        let path = rng.pick(&all).clone();
        let remove = rng.chance(20);
        match (path.split_last(), remove) {
            (Some((Step::Key(k), parent)), true) => {
                if let Some(Value::Object(m)) = node(&mut v, parent) {
                    m.remove(k);
                }
            }
            _ => {
                let new = hostile_value(rng);
                if let Some(n) = node(&mut v, &path) {
                    *n = new;
                }
            }
        }
    }
    serde_json::to_vec(&v).unwrap_or_else(|_| original.to_vec())
}

/// 1 to 4 byte edits (delete, insert, replace, duplicate a span), or a cut.
fn text_edits(original: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = original.to_vec();
    if rng.chance(20) {
        b.truncate(rng.below(b.len() + 1));
        return b;
    }
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(b.len() + 1);
        match rng.below(4) {
            0 if i < b.len() => {
                b.remove(i);
            }
            1 => b.insert(i, *rng.pick(b"{}[]\":,0123456789-.eE \\x\n")),
            2 if i < b.len() => b[i] = rng.next() as u8,
            _ => {
                let len = rng.below(32).min(b.len() - i.min(b.len()));
                let span: Vec<u8> = b[i.min(b.len())..i.min(b.len()) + len].to_vec();
                let at = rng.below(b.len() + 1);
                b.splice(at..at, span);
            }
        }
    }
    b
}

/// Damage to a model.safetensors: its JSON header (shapes, dtypes, offsets, a repeated name,
/// text edits), its length field, a cut, or bit flips.
fn safetensors(original: &[u8], rng: &mut Rng) -> (Vec<u8>, &'static str) {
    let header_len = u64::from_le_bytes(original[..8].try_into().expect("8 bytes")) as usize;
    let json = &original[8..8 + header_len];
    let data = &original[8 + header_len..];
    let rebuild = |header: &[u8]| {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header);
        out.extend_from_slice(data);
        out
    };
    let mut header: serde_json::Map<String, Value> =
        serde_json::from_slice(json).expect("the seed's header is valid JSON");
    let names: Vec<String> = header
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    let name = rng.pick(&names).clone();
    match rng.below(9) {
        0 => {
            let entry = &mut header[&name];
            let shape = entry["shape"].as_array_mut().expect("a shape");
            match rng.below(3) {
                0 if !shape.is_empty() => {
                    let i = rng.below(shape.len());
                    shape[i] = Value::from(rng.count());
                }
                1 => shape.push(Value::from(rng.count())),
                _ => {
                    shape.pop();
                }
            }
            (
                rebuild(&serde_json::to_vec(&header).expect("json")),
                "st-shape",
            )
        }
        1 => {
            const DTYPES: [&str; 14] = [
                "F32", "F16", "BF16", "I8", "U8", "I16", "I32", "I64", "U32", "F64", "BOOL",
                "F8_E4M3", "F4", "Q4",
            ];
            header[&name]["dtype"] = Value::from(*rng.pick(&DTYPES));
            (
                rebuild(&serde_json::to_vec(&header).expect("json")),
                "st-dtype",
            )
        }
        2 => {
            let i = rng.below(2);
            let old = header[&name]["data_offsets"][i].as_u64().unwrap_or(0);
            header[&name]["data_offsets"][i] = Value::from(integer(rng, old));
            (
                rebuild(&serde_json::to_vec(&header).expect("json")),
                "st-offset",
            )
        }
        3 => {
            // The same name twice: a map-based reader keeps one and drops the other.
            let text = serde_json::to_string(&header).expect("json");
            let mut entry = header[&name].clone();
            if rng.chance(50) {
                entry["shape"] = Value::from(vec![1]);
            }
            let dup = format!("{}:{},", Value::from(name.clone()), entry);
            let patched = format!("{{{dup}{}", &text[1..]);
            (rebuild(patched.as_bytes()), "st-duplicate")
        }
        4 => {
            let mut b = original.to_vec();
            b[..8].copy_from_slice(&integer(rng, header_len as u64).to_le_bytes());
            (b, "st-header-length")
        }
        5 | 6 => (rebuild(&text_edits(json, rng)), "st-header-text"),
        7 => {
            let at = if rng.chance(50) {
                rng.below(8 + header_len + 1)
            } else {
                rng.below(original.len() + 1)
            };
            (original[..at].to_vec(), "truncate")
        }
        _ => {
            let mut b = original.to_vec();
            flip(&mut b, 8 + header_len, rng);
            (b, "bitflip")
        }
    }
}
