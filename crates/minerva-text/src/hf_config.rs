//! Special tokens of a Hugging Face / MLX folder: tokenizer_config.json, special_tokens_map.json,
//! generation_config.json and config.json, read in that order of precedence.

use crate::error::{Result, TextError};
use serde_json::Value;
use std::path::Path;

/// The special-token facts of a folder, as written (names are resolved to ids by the caller).
#[derive(Debug, Default, Clone)]
pub struct FolderSpecials {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
    pub bos_id: Option<u64>,
    /// Every EOS id named by generation_config.json and config.json (often several).
    pub eos_ids: Vec<u64>,
    pub pad_id: Option<u64>,
    /// `chat_template` of tokenizer_config.json (the default one when it holds a list).
    pub chat_template: Option<String>,
    /// `added_tokens_decoder` of tokenizer_config.json: (id, content, special), by id.
    pub added_tokens: Vec<(u32, String, bool)>,
}

/// Reads a JSON file if it exists.
pub fn read_json(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| TextError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| TextError::malformed(path.display(), format!("not valid JSON: {e}")))
}

/// A token named either as a plain string or as an AddedToken object `{"content": ...}`.
fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// One id or a list of ids (`eos_token_id: 2` or `eos_token_id: [1, 106]`).
fn ids(path: &Path, key: &str, v: Option<&Value>) -> Result<Vec<u64>> {
    let bad = || {
        TextError::malformed(
            path.display(),
            format!("'{key}' is not a token id or a list of ids"),
        )
    };
    match v {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Number(n)) => Ok(vec![n.as_u64().ok_or_else(bad)?]),
        Some(Value::Array(a)) => a.iter().map(|x| x.as_u64().ok_or_else(bad)).collect(),
        Some(_) => Err(bad()),
    }
}

fn template_text(path: &Path, v: Option<&Value>) -> Result<Option<String>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        // A list of named templates: the one named "default" is the chat template.
        Some(Value::Array(list)) => {
            let named = |want: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(want))
            };
            Ok(named("default")
                .or_else(|| list.first())
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
                .map(str::to_owned))
        }
        Some(_) => Err(TextError::malformed(
            path.display(),
            "'chat_template' is neither a string nor a list",
        )),
    }
}

/// `{"32000": {"content": "<tool>", "special": true, ...}, ...}`, sorted by id.
fn added_tokens(path: &Path, v: Option<&Value>) -> Result<Vec<(u32, String, bool)>> {
    let Some(Value::Object(map)) = v else {
        return Ok(vec![]);
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, entry) in map {
        let bad = || {
            TextError::malformed(
                path.display(),
                format!("added_tokens_decoder entry '{key}' is not an id with a content"),
            )
        };
        let id: u32 = key.parse().map_err(|_| bad())?;
        let content = entry
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(bad)?;
        let special = entry
            .get("special")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        out.push((id, content.to_owned(), special));
    }
    out.sort_by_key(|t| t.0);
    Ok(out)
}

pub fn read_folder_specials(dir: &Path) -> Result<FolderSpecials> {
    let mut s = FolderSpecials::default();
    let tc_path = dir.join("tokenizer_config.json");
    let sm_path = dir.join("special_tokens_map.json");
    let gc_path = dir.join("generation_config.json");
    let cfg_path = dir.join("config.json");
    let tc = read_json(&tc_path)?;
    let sm = read_json(&sm_path)?;
    let gc = read_json(&gc_path)?;
    let cfg = read_json(&cfg_path)?;

    for doc in [&tc, &sm].into_iter().flatten() {
        s.bos_token = s
            .bos_token
            .take()
            .or_else(|| token_text(doc.get("bos_token")));
        s.eos_token = s
            .eos_token
            .take()
            .or_else(|| token_text(doc.get("eos_token")));
        s.pad_token = s
            .pad_token
            .take()
            .or_else(|| token_text(doc.get("pad_token")));
        s.unk_token = s
            .unk_token
            .take()
            .or_else(|| token_text(doc.get("unk_token")));
    }
    if let Some(tc) = &tc {
        s.chat_template = template_text(&tc_path, tc.get("chat_template"))?;
        s.added_tokens = added_tokens(&tc_path, tc.get("added_tokens_decoder"))?;
    }
    for (path, doc) in [(&gc_path, &gc), (&cfg_path, &cfg)] {
        let Some(doc) = doc else { continue };
        if s.bos_id.is_none() {
            s.bos_id = ids(path, "bos_token_id", doc.get("bos_token_id"))?
                .first()
                .copied();
        }
        if s.pad_id.is_none() {
            s.pad_id = ids(path, "pad_token_id", doc.get("pad_token_id"))?
                .first()
                .copied();
        }
        for id in ids(path, "eos_token_id", doc.get("eos_token_id"))? {
            if !s.eos_ids.contains(&id) {
                s.eos_ids.push(id);
            }
        }
    }
    Ok(s)
}
