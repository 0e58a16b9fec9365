//! Tokenizers beside the weights: GGUF `tokenizer.ggml.*` metadata from a byte-level BPE
//! tokenizer.json (llama.cpp's `gpt2` model), and a tokenizer.json rebuilt from that metadata
//! with the pre-tokenizer its `tokenizer.ggml.pre` names.

use crate::error::{FormatError, Result};
use crate::gguf::pre_tokenizers::{self, Alphabet, PreSplit};
use crate::metadata::{MetaValue, Metadata};
use serde_json::{json, Map, Value};
use std::path::Path;

/// llama.cpp token types.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// Special ids and flags that live in config files rather than in tokenizer.json.
#[derive(Debug, Clone, Default)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    pub add_bos: bool,
}

fn merges_of(model: &Value) -> Vec<String> {
    model["merges"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|x| match x {
                    Value::String(s) => Some(s.clone()),
                    Value::Array(p) if p.len() == 2 => {
                        Some(format!("{} {}", p[0].as_str()?, p[1].as_str()?))
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `tokenizer.ggml.*` (and `tokenizer.chat_template`) for a BPE tokenizer.json, padded to
/// `vocab_size` entries with `[PADn]` tokens as llama.cpp's converter does.
pub fn gguf_tokenizer_kv(
    tokenizer: &Value,
    vocab_size: usize,
    ids: &SpecialIds,
    chat_template: Option<&str>,
    path: &Path,
) -> Result<Vec<(String, MetaValue)>> {
    let model = &tokenizer["model"];
    if model["type"].as_str() != Some("BPE") {
        return Err(FormatError::unsupported(
            path,
            format!(
                "tokenizer model {} (only byte-level BPE goes into GGUF)",
                model["type"]
            ),
        ));
    }
    let vocab = model["vocab"].as_object().ok_or_else(|| {
        FormatError::malformed(path, "tokenizer.json: model.vocab is not an object")
    })?;
    let mut tokens: Vec<Option<(String, i32)>> = Vec::new();
    let mut put = |id: usize, s: &str, ty: i32| {
        if id >= tokens.len() {
            tokens.resize(id + 1, None);
        }
        tokens[id] = Some((s.to_string(), ty));
    };
    for (s, id) in vocab {
        let id = id.as_u64().ok_or_else(|| {
            FormatError::malformed(path, format!("tokenizer.json: id of '{s}' is not a number"))
        })?;
        if id > 16_000_000 {
            return Err(FormatError::malformed(
                path,
                format!("tokenizer.json: id {id} of '{s}' is implausibly large"),
            ));
        }
        put(id as usize, s, NORMAL);
    }
    for t in tokenizer["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(s)) = (t["id"].as_u64(), t["content"].as_str()) else {
            continue;
        };
        if id > 16_000_000 {
            return Err(FormatError::malformed(
                path,
                format!("tokenizer.json: added token id {id} is implausibly large"),
            ));
        }
        put(
            id as usize,
            s,
            if t["special"].as_bool() == Some(true) {
                CONTROL
            } else {
                USER_DEFINED
            },
        );
    }
    let n = tokens.len().max(vocab_size);
    let (mut names, mut types) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        match tokens.get(i).cloned().flatten() {
            Some((s, t)) => {
                names.push(MetaValue::String(s));
                types.push(MetaValue::I32(t));
            }
            None => {
                names.push(MetaValue::String(format!("[PAD{i}]")));
                types.push(MetaValue::I32(UNUSED));
            }
        }
    }
    let mut kv = vec![
        (
            "tokenizer.ggml.model".to_string(),
            MetaValue::String("gpt2".into()),
        ),
        (
            "tokenizer.ggml.pre".to_string(),
            MetaValue::String("gpt-2".into()),
        ),
        ("tokenizer.ggml.tokens".to_string(), MetaValue::Array(names)),
        (
            "tokenizer.ggml.token_type".to_string(),
            MetaValue::Array(types),
        ),
        (
            "tokenizer.ggml.merges".to_string(),
            MetaValue::Array(
                merges_of(model)
                    .into_iter()
                    .map(MetaValue::String)
                    .collect(),
            ),
        ),
    ];
    for (key, v) in [
        ("bos", ids.bos),
        ("eos", ids.eos),
        ("unknown", ids.unk),
        ("padding", ids.pad),
    ] {
        if let Some(v) = v {
            kv.push((format!("tokenizer.ggml.{key}_token_id"), MetaValue::U32(v)));
        }
    }
    kv.push((
        "tokenizer.ggml.add_bos_token".into(),
        MetaValue::Bool(ids.add_bos),
    ));
    kv.push((
        "tokenizer.ggml.add_eos_token".into(),
        MetaValue::Bool(false),
    ));
    if let Some(t) = chat_template {
        kv.push((
            "tokenizer.chat_template".into(),
            MetaValue::String(t.to_string()),
        ));
    }
    Ok(kv)
}

/// The tokenizer.json `pre_tokenizer` of a `tokenizer.ggml.pre` table row, as a Hugging Face
/// tokenizer.json writes it (and as minerva-text builds it from the same row): one
/// Split(expression, Isolated) per expression as Oniguruma runs it, then, for byte-level rows,
/// ByteLevel without its own regex.
pub fn pre_tokenizer_json(row: &PreSplit) -> Value {
    let mut steps: Vec<Value> = row
        .onig_exprs()
        .into_iter()
        .map(|e| {
            json!({"type": "Split", "pattern": {"Regex": e}, "behavior": "Isolated", "invert": false})
        })
        .collect();
    if row.alphabet == Alphabet::ByteLevel {
        steps.push(json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}));
    }
    json!({"type": "Sequence", "pretokenizers": steps})
}

/// A BPE tokenizer.json from GGUF `gpt2` tokenizer metadata, pre-tokenized as its
/// `tokenizer.ggml.pre` says (byte-level, or raw UTF-8 with byte fallback for the rows that
/// llama.cpp runs that way); None when the GGUF has no such tokenizer. A pre-tokenizer name that
/// is not in the table is an error (`path` names the GGUF): GPT-2's split in its place would
/// tokenize differently from the GGUF.
pub fn tokenizer_json_from_gguf(md: &Metadata, path: &Path) -> Result<Option<Value>> {
    if md.get_str("tokenizer.ggml.model") != Some("gpt2") {
        return Ok(None);
    }
    let Some(tokens) = md.get_str_array("tokenizer.ggml.tokens") else {
        return Ok(None);
    };
    let pre_name = md.get_str("tokenizer.ggml.pre");
    let row = pre_tokenizers::row(pre_name).ok_or_else(|| {
        FormatError::unsupported(
            path,
            format!(
                "tokenizer.ggml.pre '{}' has no known pre-tokenizer, so no tokenizer.json can be \
                 written (known: {})",
                pre_name.unwrap_or_default(),
                pre_tokenizers::KNOWN_NAMES.join(", ")
            ),
        )
    })?;
    let types: Vec<i64> = md
        .get_array("tokenizer.ggml.token_type")
        .map(|a| a.iter().map(|v| v.as_i64().unwrap_or(1)).collect())
        .unwrap_or_default();
    let merges: Vec<&str> = md
        .get_str_array("tokenizer.ggml.merges")
        .unwrap_or_default();
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        // A repeated token string keeps its first id, as llama.cpp's token-to-id map does.
        if vocab.contains_key(*t) {
            continue;
        }
        match types.get(i).copied().unwrap_or(NORMAL as i64) as i32 {
            UNUSED => {}
            ty @ (CONTROL | USER_DEFINED) => {
                added.push(json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": ty == CONTROL}));
                vocab.insert(t.to_string(), json!(i));
            }
            _ => {
                vocab.insert(t.to_string(), json!(i));
            }
        }
    }
    let byte_level = row.alphabet == Alphabet::ByteLevel;
    let (normalizer, decoder, plain_post) = match row.alphabet {
        Alphabet::ByteLevel => {
            let b = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
            (Value::Null, b.clone(), b)
        }
        // Raw UTF-8 pieces with `<0xXX>` byte tokens, spaces perhaps written '▁' before
        // splitting (llama.cpp escapes the text first, as a normalizer does here).
        Alphabet::Utf8 { escape_spaces } => {
            let mut dec = Vec::new();
            let mut norm = Value::Null;
            if escape_spaces {
                norm = json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"});
                dec.push(json!({"type": "Replace", "pattern": {"String": "▁"}, "content": " "}));
            }
            dec.push(json!({"type": "ByteFallback"}));
            dec.push(json!({"type": "Fuse"}));
            (
                norm,
                json!({"type": "Sequence", "decoders": dec}),
                Value::Null,
            )
        }
    };
    let bos = md
        .get_u64("tokenizer.ggml.bos_token_id")
        .and_then(|b| tokens.get(b as usize).map(|s| (b, s.to_string())));
    let post = match (md.get_bool("tokenizer.ggml.add_bos_token"), bos) {
        (Some(true), Some((id, s))) => json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": s, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": s, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": s, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {s.clone(): {"id": s, "ids": [id], "tokens": [s]}}
        }),
        _ => plain_post,
    };
    Ok(Some(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer_json(row),
        "post_processor": post,
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": !byte_level, "ignore_merges": row.ignore_merges, "vocab": vocab, "merges": merges}
    })))
}

/// tokenizer_config.json for a GGUF's tokenizer: special tokens, BOS flag, chat template.
pub fn tokenizer_config_from_gguf(md: &Metadata) -> Value {
    let tokens = md
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap_or_default();
    let tok = |key: &str| {
        md.get_u64(key)
            .and_then(|i| tokens.get(i as usize))
            .map(|s| Value::String(s.to_string()))
            .unwrap_or(Value::Null)
    };
    let mut c = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tok("tokenizer.ggml.bos_token_id"),
        "eos_token": tok("tokenizer.ggml.eos_token_id"),
        "pad_token": tok("tokenizer.ggml.padding_token_id"),
        "add_bos_token": md.get_bool("tokenizer.ggml.add_bos_token").unwrap_or(false),
        "clean_up_tokenization_spaces": false,
    });
    if let Some(t) = md.get_str("tokenizer.chat_template") {
        c["chat_template"] = Value::String(t.to_string());
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny byte-level `gpt2` vocabulary as GGUF metadata, with the given pre-tokenizer name.
    fn gguf_meta(pre: Option<&str>) -> Metadata {
        let strs = |v: &[&str]| {
            MetaValue::Array(v.iter().map(|s| MetaValue::String((*s).into())).collect())
        };
        let mut m = Metadata::default();
        let mut put = |k: &str, v: MetaValue| {
            m.0.insert(k.to_string(), v);
        };
        put("tokenizer.ggml.model", MetaValue::String("gpt2".into()));
        put(
            "tokenizer.ggml.tokens",
            strs(&["<s>", "a", "b", "ab", "1", "Ġ"]),
        );
        put(
            "tokenizer.ggml.token_type",
            MetaValue::Array(
                [3, 1, 1, 1, 1, 1]
                    .iter()
                    .map(|&t| MetaValue::I32(t))
                    .collect(),
            ),
        );
        put("tokenizer.ggml.merges", strs(&["a b"]));
        if let Some(p) = pre {
            put("tokenizer.ggml.pre", MetaValue::String(p.into()));
        }
        m
    }

    fn json_of(pre: Option<&str>) -> Value {
        tokenizer_json_from_gguf(&gguf_meta(pre), Path::new("m.gguf"))
            .unwrap()
            .unwrap()
    }

    fn split(e: &str) -> Value {
        json!({"type": "Split", "pattern": {"Regex": e}, "behavior": "Isolated", "invert": false})
    }

    const BYTE_LEVEL: &str =
        r#"{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}"#;

    #[test]
    fn llama_bpe_and_qwen2_get_their_splits_then_byte_level() {
        let llama3 = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        let qwen2 = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        let byte_level: Value = serde_json::from_str(BYTE_LEVEL).unwrap();
        for (pre, expr, ignore_merges) in [("llama-bpe", llama3, true), ("qwen2", qwen2, false)] {
            let t = json_of(Some(pre));
            assert_eq!(
                t["pre_tokenizer"],
                json!({"type": "Sequence", "pretokenizers": [split(expr), byte_level.clone()]}),
                "{pre}"
            );
            assert_eq!(t["model"]["ignore_merges"], ignore_merges, "{pre}");
            assert_eq!(t["model"]["byte_fallback"], false, "{pre}");
            assert_eq!(t["normalizer"], Value::Null, "{pre}");
            assert_eq!(t["decoder"]["type"], "ByteLevel", "{pre}");
        }
    }

    #[test]
    fn smollm_splits_digits_first_and_a_missing_name_is_default() {
        let gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
        let steps = json_of(Some("smollm"))["pre_tokenizer"]["pretokenizers"].clone();
        assert_eq!(steps[0], split(r"\p{N}"));
        assert_eq!(steps[1], split(gpt2));
        assert_eq!(steps.as_array().unwrap().len(), 3);
        let default = pre_tokenizers::row(Some("default")).unwrap();
        assert_eq!(json_of(None)["pre_tokenizer"], pre_tokenizer_json(default));
    }

    #[test]
    fn rewritten_expressions_are_written_as_oniguruma_runs_them() {
        let row = pre_tokenizers::row(Some("gpt-4o")).unwrap();
        let (llama, onig) = pre_tokenizers::ONIG_REWRITES
            .iter()
            .find(|(l, _)| *l == row.exprs[0])
            .unwrap();
        assert_ne!(llama, onig);
        let t = json_of(Some("gpt-4o"));
        assert_eq!(t["pre_tokenizer"]["pretokenizers"][0], split(onig));
    }

    #[test]
    fn utf8_rows_escape_spaces_and_fall_back_to_bytes() {
        let t = json_of(Some("gemma4"));
        assert_eq!(
            t["pre_tokenizer"],
            json!({"type": "Sequence", "pretokenizers": [split(r"[^\n]+|[\n]+")]})
        );
        assert_eq!(
            t["normalizer"],
            json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})
        );
        assert_eq!(
            t["decoder"],
            json!({"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"}
            ]})
        );
        assert_eq!(t["model"]["byte_fallback"], true);
        assert_eq!(t["post_processor"], Value::Null);
        let w = json_of(Some("whitespace"));
        assert_eq!(w["normalizer"], Value::Null);
        assert_eq!(
            w["decoder"]["decoders"],
            json!([{"type": "ByteFallback"}, {"type": "Fuse"}])
        );
    }

    #[test]
    fn an_unknown_pre_name_is_an_error_naming_it() {
        let e = tokenizer_json_from_gguf(&gguf_meta(Some("no-such-pre")), Path::new("m.gguf"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("m.gguf") && e.contains("'no-such-pre'"), "{e}");
        assert!(e.contains("smollm"), "{e}");
    }

    #[test]
    fn every_table_name_writes_a_tokenizer() {
        for row in pre_tokenizers::TABLE {
            for name in row.names {
                let t = json_of(Some(name));
                assert_eq!(t["pre_tokenizer"], pre_tokenizer_json(row), "{name}");
                assert_eq!(t["model"]["ignore_merges"], row.ignore_merges, "{name}");
            }
        }
    }
}
