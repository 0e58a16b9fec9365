//! WGSL sources and the small preprocessor that composes kernel variants from them:
//! `#include "file.wgsl"`, `#ifdef NAME` / `#ifndef NAME` / `#else` / `#endif`, and defines whose
//! names are replaced by their values as whole words.

use std::collections::BTreeMap;

/// Every WGSL file, by the name `#include` uses.
const SOURCES: &[(&str, &str)] = &[
    ("common.wgsl", include_str!("kernels/common.wgsl")),
    ("angle.wgsl", include_str!("kernels/angle.wgsl")),
    ("weights.wgsl", include_str!("kernels/weights.wgsl")),
    (
        "blocks_float.wgsl",
        include_str!("kernels/blocks_float.wgsl"),
    ),
    ("blocks_ggml.wgsl", include_str!("kernels/blocks_ggml.wgsl")),
    (
        "blocks_kquant.wgsl",
        include_str!("kernels/blocks_kquant.wgsl"),
    ),
    ("blocks_mx.wgsl", include_str!("kernels/blocks_mx.wgsl")),
    ("blocks_mlx.wgsl", include_str!("kernels/blocks_mlx.wgsl")),
    ("matvec.wgsl", include_str!("kernels/matvec.wgsl")),
    ("quantize_x.wgsl", include_str!("kernels/quantize_x.wgsl")),
    ("x_quant.wgsl", include_str!("kernels/x_quant.wgsl")),
    ("route.wgsl", include_str!("kernels/route.wgsl")),
    ("x_read.wgsl", include_str!("kernels/x_read.wgsl")),
    ("unit.wgsl", include_str!("kernels/unit.wgsl")),
    ("product.wgsl", include_str!("kernels/product.wgsl")),
    ("matmul.wgsl", include_str!("kernels/matmul.wgsl")),
    ("coop_params.wgsl", include_str!("kernels/coop_params.wgsl")),
    ("matmul_coop.wgsl", include_str!("kernels/matmul_coop.wgsl")),
    (
        "matmul_staged.wgsl",
        include_str!("kernels/matmul_staged.wgsl"),
    ),
    ("coop_splits.wgsl", include_str!("kernels/coop_splits.wgsl")),
    (
        "coop_weights.wgsl",
        include_str!("kernels/coop_weights.wgsl"),
    ),
    ("coop_inputs.wgsl", include_str!("kernels/coop_inputs.wgsl")),
    (
        "matmul_tiles.wgsl",
        include_str!("kernels/matmul_tiles.wgsl"),
    ),
    ("embed.wgsl", include_str!("kernels/embed.wgsl")),
    ("norm.wgsl", include_str!("kernels/norm.wgsl")),
    ("rope.wgsl", include_str!("kernels/rope.wgsl")),
    ("elementwise.wgsl", include_str!("kernels/elementwise.wgsl")),
    ("step.wgsl", include_str!("kernels/step.wgsl")),
    ("attention.wgsl", include_str!("kernels/attention.wgsl")),
    (
        "attention_decode.wgsl",
        include_str!("kernels/attention_decode.wgsl"),
    ),
    (
        "attention_coop.wgsl",
        include_str!("kernels/attention_coop.wgsl"),
    ),
    (
        "attention_coop_params.wgsl",
        include_str!("kernels/attention_coop_params.wgsl"),
    ),
    (
        "attention_softmax.wgsl",
        include_str!("kernels/attention_softmax.wgsl"),
    ),
    ("moe.wgsl", include_str!("kernels/moe.wgsl")),
    ("select.wgsl", include_str!("kernels/select.wgsl")),
    ("sample.wgsl", include_str!("kernels/sample.wgsl")),
    ("moe_coop.wgsl", include_str!("kernels/moe_coop.wgsl")),
    (
        "matvec_multi.wgsl",
        include_str!("kernels/matvec_multi.wgsl"),
    ),
];

fn source(name: &str) -> Option<&'static str> {
    SOURCES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// A hash of every kernel source, so that what was recorded of one build's kernels
/// (`kernel_list`) is not taken for another's.
pub fn sources_hash() -> u64 {
    static HASH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HASH.get_or_init(|| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        SOURCES.hash(&mut h);
        h.finish()
    })
}

/// Defines for one variant: name → replacement text (an empty value only marks it defined).
pub type Defines = BTreeMap<String, String>;

/// Expands `entry` with `defines`. Errors name the file and line (sources are ours, so an
/// error here is a bug in the kernels, reported rather than panicking).
pub fn compose(entry: &str, defines: &Defines) -> Result<String, String> {
    let mut out = String::new();
    let mut seen = Vec::new();
    expand(entry, defines, &mut out, &mut seen)?;
    Ok(out)
}

/// A kernel reading several weights, each through its own decoder: `common.wgsl` once, then
/// each decoder (`defines` of `weights[i]`, with its DECODER) as an instance whose globals and
/// functions get the suffix `_i` and whose bindings move up by 10·i, then `entry`.
pub fn compose_multi(
    entry: &str,
    defines: &Defines,
    weights: &[Defines],
) -> Result<String, String> {
    let mut out = String::new();
    let mut seen = Vec::new();
    expand("common.wgsl", defines, &mut out, &mut seen)?;
    for (i, dec) in weights.iter().enumerate() {
        let file = dec.get("DECODER").ok_or("a weight without a DECODER")?;
        let mut inst = String::new();
        let mut inst_seen = vec!["common.wgsl".to_string()];
        expand(file, dec, &mut inst, &mut inst_seen)?;
        out.push_str(&instance(&inst, &format!("_{i}"), 10 * i as u32));
    }
    seen.retain(|s| s == "common.wgsl");
    expand(entry, defines, &mut out, &mut seen)?;
    Ok(enables_first(&out))
}

/// `src` with its `enable` directives first, each once: WGSL wants them before any
/// declaration, and an entry file's own (cooperative matrices) come after the decoders.
fn enables_first(src: &str) -> String {
    let mut enables: Vec<&str> = Vec::new();
    let mut rest = String::with_capacity(src.len());
    for line in src.lines() {
        if line.starts_with("enable ") {
            if !enables.contains(&line) {
                enables.push(line);
            }
        } else {
            rest.push_str(line);
            rest.push('\n');
        }
    }
    let mut out = enables.join("\n");
    out.push('\n');
    out + &rest
}

/// Renames what `src` declares at module scope (functions, constants, variables, aliases) with
/// `suffix`, and shifts its `@binding(n)` by `offset`.
fn instance(src: &str, suffix: &str, offset: u32) -> String {
    let mut names = Defines::new();
    for line in src.lines() {
        // Module-scope declarations start in column 0.
        let decl = ["fn ", "const ", "alias "]
            .iter()
            .find_map(|k| line.strip_prefix(k))
            .or_else(|| {
                line.starts_with("@group")
                    .then(|| line.split("> ").nth(1))
                    .flatten()
            });
        if let Some(rest) = decl {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name.clone(), format!("{name}{suffix}"));
            }
        }
    }
    let mut out = String::new();
    for line in src.lines() {
        let mut l = String::new();
        substitute(line, &names, &mut l);
        if let Some(at) = l.find("@binding(") {
            let rest = &l[at + 9..];
            if let Some(end) = rest.find(')') {
                if let Ok(n) = rest[..end].parse::<u32>() {
                    l = format!("{}@binding({}){}", &l[..at], n + offset, &rest[end + 1..]);
                }
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn expand(
    name: &str,
    defines: &Defines,
    out: &mut String,
    seen: &mut Vec<String>,
) -> Result<(), String> {
    // Each file is included once, so shared snippets can include what they need.
    if seen.iter().any(|s| s == name) {
        return Ok(());
    }
    seen.push(name.to_string());
    let text = source(name).ok_or_else(|| format!("no WGSL source named {name}"))?;
    // Stack of (branch taken, some earlier branch of this #if was taken).
    let mut stack: Vec<(bool, bool)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = || format!("{name}:{}", i + 1);
        let active = stack.iter().all(|(on, _)| *on);
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("#ifdef ") {
            let on = defines.contains_key(rest.trim());
            stack.push((on, on));
        } else if let Some(rest) = t.strip_prefix("#ifndef ") {
            let on = !defines.contains_key(rest.trim());
            stack.push((on, on));
        } else if t.starts_with("#else") {
            let top = stack
                .last_mut()
                .ok_or_else(|| format!("{}: #else without #ifdef", at()))?;
            *top = (!top.1, true);
        } else if t.starts_with("#endif") {
            stack
                .pop()
                .ok_or_else(|| format!("{}: #endif without #ifdef", at()))?;
        } else if let Some(rest) = t.strip_prefix("#include ") {
            if active {
                let inc = rest.trim().trim_matches('"');
                let inc = defines.get(inc).map(String::as_str).unwrap_or(inc);
                expand(inc, defines, out, seen)?;
            }
        } else if t.starts_with('#') {
            return Err(format!("{}: unknown directive {t}", at()));
        } else if active {
            substitute(line, defines, out);
            out.push('\n');
        }
    }
    if !stack.is_empty() {
        return Err(format!("{name}: unterminated #ifdef"));
    }
    Ok(())
}

/// Copies `line` replacing identifiers that are defines with their values.
fn substitute(line: &str, defines: &Defines, out: &mut String) {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &line[start..i];
            match defines.get(word) {
                Some(v) if !v.is_empty() => out.push_str(v),
                _ => out.push_str(word),
            }
        } else if c.is_ascii_digit() {
            // Numbers such as 0x1Fu stay whole: their letters are not identifiers.
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                i += 1;
            }
            out.push_str(&line[start..i]);
        } else {
            let start = i;
            i += 1;
            while i < bytes.len() && !line.is_char_boundary(i) {
                i += 1;
            }
            out.push_str(&line[start..i]);
        }
    }
}

/// Builds a define map from pairs.
pub fn defines(pairs: &[(&str, String)]) -> Defines {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_composes_with_its_defines() {
        for (name, _) in SOURCES {
            let d = defines(&[
                ("DECODER", "blocks_float.wgsl".into()),
                ("DT_F32", String::new()),
            ]);
            compose(name, &d).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// Every decoder's defines, as `GpuWeight::decoder` gives them, plus an input-major one.
    fn every_decoder() -> Vec<Defines> {
        use crate::gpu::weights::decoder_defines;
        use minerva_formats::DType;
        let mut out: Vec<Defines> = [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q8_0,
            DType::MXFP4,
            DType::Q2_K,
            DType::Q3_K,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
            DType::MlxMxfp4,
            DType::HfMxfp4,
        ]
        .into_iter()
        .filter_map(|dt| decoder_defines(dt, None))
        .collect();
        for bits in [2, 3, 4, 5, 6, 8] {
            for scale in [DType::F16, DType::BF16, DType::F32] {
                let dt = DType::MlxAffine { bits, group: 64 };
                out.extend(decoder_defines(dt, Some(scale)));
            }
        }
        let mut input_major = decoder_defines(DType::BF16, None).unwrap();
        input_major.insert("INPUT_MAJOR".into(), String::new());
        input_major.insert("IN_STRIDE".into(), "71u".into());
        out.push(input_major);
        out
    }

    /// `file` with `d` parsed, validated (cooperative matrices, f16, subgroups) and translated to
    /// SPIR-V as wgpu does on Vulkan (bounds checks restricting indices); the SPIR-V words.
    fn spirv(file: &str, d: &Defines) -> Vec<u32> {
        spirv_entry(file, d, "main")
    }

    /// `spirv` of one entry point.
    fn spirv_entry(file: &str, d: &Defines, entry_point: &str) -> Vec<u32> {
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        use wgpu::naga;
        let caps = Capabilities::COOPERATIVE_MATRIX
            | Capabilities::SHADER_FLOAT16
            | Capabilities::SHADER_FLOAT16_IN_FLOAT32
            | Capabilities::SUBGROUP;
        let src = compose(file, d).unwrap_or_else(|e| panic!("{e}"));
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{file} {d:?}: {}", e.emit_to_string(&src)));
        let info = Validator::new(ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{file} {d:?}: {}", e.emit_to_string(&src)));
        let entry = naga::back::spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: entry_point.into(),
        };
        let restrict = naga::proc::BoundsCheckPolicy::Restrict;
        let options = naga::back::spv::Options {
            lang_version: (1, 6),
            bounds_check_policies: naga::proc::BoundsCheckPolicies {
                index: restrict,
                buffer: restrict,
                image_load: restrict,
                binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
            },
            ..Default::default()
        };
        naga::back::spv::write_vec(&module, &info, &options, Some(&entry))
            .unwrap_or_else(|e| panic!("{file} {d:?}: SPIR-V: {e}"))
    }

    /// The memory layouts of a SPIR-V module's cooperative-matrix loads and stores, in order:
    /// (load or store, whether row-major).
    fn matrix_accesses(words: &[u32]) -> Vec<(&'static str, bool)> {
        const OP_CONSTANT: u32 = 43;
        const OP_LOAD: u32 = 4457;
        const OP_STORE: u32 = 4458;
        const ROW_MAJOR: u32 = 0;
        let mut constants = BTreeMap::new();
        let mut out = Vec::new();
        let mut at = 5;
        while at < words.len() {
            let (op, len) = (words[at] & 0xFFFF, (words[at] >> 16) as usize);
            let args = &words[at + 1..at + len];
            match op {
                OP_CONSTANT if args.len() == 3 => {
                    constants.insert(args[1], args[2]);
                }
                // Result type, result, pointer, layout, ...
                OP_LOAD => out.push(("load", constants[&args[3]] == ROW_MAJOR)),
                // Pointer, object, layout, ...
                OP_STORE => out.push(("store", constants[&args[2]] == ROW_MAJOR)),
                _ => {}
            }
            at += len.max(1);
        }
        out
    }

    /// The matrix-core product and the two kernels feeding it compile for every decoder, with
    /// and without a bias, as wgpu compiles them on Vulkan: CI's lavapipe has no matrix cores,
    /// so this is where CI sees the product's kernel. Its weight loads are row-major and its
    /// input loads, bias loads and stores column-major, as its layout comments say.
    #[test]
    fn matrix_core_kernels_compile_for_every_decoder() {
        let decoders = every_decoder();
        assert_eq!(decoders.len(), 16 + 18 + 1);
        for dec in decoders {
            for bias in [false, true] {
                let mut d = super::super::ops::coop_weight_defines(dec.clone());
                if bias {
                    d.insert("BIAS".into(), String::new());
                }
                spirv("coop_weights.wgsl", &d);
            }
        }
        spirv("coop_inputs.wgsl", &Defines::new());
        for d in [Defines::new(), defines(&[("BIAS", String::new())])] {
            spirv("coop_splits.wgsl", &d);
        }
        for bias in [false, true] {
            let mut d = Defines::new();
            if bias {
                d.insert("BIAS".into(), String::new());
            }
            spirv_entry("moe_coop.wgsl", &d, "gather");
            spirv_entry("moe_coop.wgsl", &d, "scatter");
        }
        let column = ("load", false);
        let row = ("load", true);
        let store = ("store", false);
        // 32 outputs per workgroup, then 64 (two more row blocks: weight loads and stores).
        let coop = |rows: u32, bias: bool| {
            let (d, _) = super::super::ops::coop_defines(rows, bias);
            matrix_accesses(&spirv("matmul_coop.wgsl", &d))
        };
        assert_eq!(
            coop(32, false),
            [row, row, column, column, store, store, store, store]
        );
        assert_eq!(
            coop(32, true),
            [column, column, row, row, column, column, store, store, store, store]
        );
        let stores = [store; 8];
        let mut plain = vec![row, row, column, column, row, row];
        plain.extend(stores);
        assert_eq!(coop(64, false), plain);
        let mut biased = vec![
            column, column, column, column, row, row, column, column, row, row,
        ];
        biased.extend(stores);
        assert_eq!(coop(64, true), biased);
        // 64 rows × 64 tokens: two more input loads and eight more stores.
        let wide = |bias: bool| {
            let (mut d, per_group) = super::super::ops::coop_defines(64, bias);
            assert_eq!(super::super::ops::coop_tokens(&mut d, per_group, 64), 64);
            matrix_accesses(&spirv("matmul_coop.wgsl", &d))
        };
        plain.truncate(6);
        plain.extend([column, column]);
        plain.extend([store; 16]);
        assert_eq!(wide(false), plain);
        biased.truncate(10);
        biased.extend([column, column]);
        biased.extend([store; 16]);
        assert_eq!(wide(true), biased);
        let (mut d, per_group) = super::super::ops::coop_defines(32, false);
        assert_eq!(super::super::ops::coop_tokens(&mut d, per_group, 64), 32);
        let (mut d, per_group) = super::super::ops::coop_defines(64, false);
        assert_eq!(super::super::ops::coop_tokens(&mut d, per_group, 96), 32);
        // Mixture-of-experts prefill: the plain kernel's accesses, behind its tile's exit (64
        // tokens: a pair of tiles).
        for mut d in super::super::ops::coop_block_defines() {
            let plain = matrix_accesses(&spirv("matmul_coop.wgsl", &d));
            d.insert("EXPERTS".into(), String::new());
            d.insert("MOE_COOP_TILES".into(), "4096u".into());
            assert_eq!(matrix_accesses(&spirv("matmul_coop.wgsl", &d)), plain);
        }
    }

    /// The matrix-core prefill attention compiles as wgpu compiles it on Vulkan (CI's lavapipe
    /// has no matrix cores). Scores: keys row-major, queries column-major, four stores; values:
    /// values and weights column-major, eight stores.
    #[test]
    fn matrix_core_attention_compiles_with_its_layouts() {
        let column = ("load", false);
        let row = ("load", true);
        let store = ("store", false);
        let plain = Defines::new();
        let scores = matrix_accesses(&spirv_entry("attention_coop.wgsl", &plain, "scores"));
        assert_eq!(
            scores,
            [row, row, column, column, store, store, store, store]
        );
        let values = matrix_accesses(&spirv_entry("attention_coop.wgsl", &plain, "values"));
        let mut want = vec![column; 6];
        want.extend([store; 8]);
        assert_eq!(values, want);
        for d in [plain.clone(), defines(&[("SINKS", String::new())])] {
            assert!(matrix_accesses(&spirv("attention_softmax.wgsl", &d)).is_empty());
        }
        assert!(
            matrix_accesses(&spirv_entry("attention_softmax.wgsl", &plain, "gather")).is_empty()
        );
    }

    #[test]
    fn substitutes_whole_words_only() {
        let d = defines(&[("WG", "64u".into())]);
        let mut out = String::new();
        substitute("var a: array<f32, WG>; let WGX = 0x1Fu + WG;", &d, &mut out);
        assert_eq!(out, "var a: array<f32, 64u>; let WGX = 0x1Fu + 64u;");
    }
}
