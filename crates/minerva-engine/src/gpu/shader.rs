//! WGSL sources and the small preprocessor that composes kernel variants from them:
//! `#include "file.wgsl"`, `#ifdef NAME` / `#ifndef NAME` / `#else` / `#endif`, and defines whose
//! names are replaced by their values as whole words.

use std::collections::BTreeMap;

/// Every WGSL file, by the name `#include` uses.
const SOURCES: &[(&str, &str)] = &[
    ("common.wgsl", include_str!("kernels/common.wgsl")),
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
    ("unit.wgsl", include_str!("kernels/unit.wgsl")),
    ("product.wgsl", include_str!("kernels/product.wgsl")),
    ("matmul.wgsl", include_str!("kernels/matmul.wgsl")),
    (
        "matmul_tiles.wgsl",
        include_str!("kernels/matmul_tiles.wgsl"),
    ),
    ("embed.wgsl", include_str!("kernels/embed.wgsl")),
    ("norm.wgsl", include_str!("kernels/norm.wgsl")),
    ("rope.wgsl", include_str!("kernels/rope.wgsl")),
    ("elementwise.wgsl", include_str!("kernels/elementwise.wgsl")),
    ("attention.wgsl", include_str!("kernels/attention.wgsl")),
    ("moe.wgsl", include_str!("kernels/moe.wgsl")),
    ("select.wgsl", include_str!("kernels/select.wgsl")),
    (
        "matvec_multi.wgsl",
        include_str!("kernels/matvec_multi.wgsl"),
    ),
];

fn source(name: &str) -> Option<&'static str> {
    SOURCES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
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
    Ok(out)
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

    #[test]
    fn substitutes_whole_words_only() {
        let d = defines(&[("WG", "64u".into())]);
        let mut out = String::new();
        substitute("var a: array<f32, WG>; let WGX = 0x1Fu + WG;", &d, &mut out);
        assert_eq!(out, "var a: array<f32, 64u>; let WGX = 0x1Fu + 64u;");
    }
}
