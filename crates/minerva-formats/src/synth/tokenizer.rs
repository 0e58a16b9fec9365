//! A synthetic byte-level BPE tokenizer of a given vocabulary size: the 256 byte symbols,
//! seeded merges of existing tokens up to the size, and the model's special tokens at their
//! real ids. It tokenizes any text (bytes are always reachable) like a trained tokenizer would.

use super::rng::Rng;
use serde_json::{json, Map, Value};
use std::collections::HashSet;

/// GPT-2's printable stand-ins for the 256 byte values.
pub fn byte_symbols() -> Vec<char> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut out = vec!['\0'; 256];
    for &b in &printable {
        out[b as usize] = char::from_u32(b).unwrap_or('?');
    }
    let mut extra = 0;
    for b in 0..256u32 {
        if !printable.contains(&b) {
            out[b as usize] = char::from_u32(256 + extra).unwrap_or('?');
            extra += 1;
        }
    }
    printable.clear();
    out
}

/// The tokenizer.json: `specials` are (id, text); ordinary tokens fill every other id below
/// `vocab` (ids above the last ordinary or special token stay unused, as in padded vocabularies).
pub fn tokenizer_json(
    vocab: usize,
    specials: &[(u32, String)],
    bos_prefix: Option<&str>,
    seed: u64,
) -> Value {
    let symbols = byte_symbols();
    let special_ids: HashSet<u32> = specials.iter().map(|s| s.0).collect();
    let n_ordinary = (0..vocab as u32)
        .filter(|i| !special_ids.contains(i))
        .count();
    let mut ordinary_ids = (0..vocab as u32).filter(|i| !special_ids.contains(i));
    let mut vocab_map = Map::new();
    let mut tokens: Vec<String> = Vec::with_capacity(n_ordinary);
    let mut seen = HashSet::with_capacity(n_ordinary);
    for &c in &symbols {
        let s = c.to_string();
        if let Some(id) = ordinary_ids.next() {
            vocab_map.insert(s.clone(), json!(id));
            seen.insert(s.clone());
            tokens.push(s);
        }
    }
    // Merges favour letters and a leading space ('Ġ') so tokens look like word pieces.
    let letters: Vec<usize> = (b'a'..=b'z')
        .map(|b| b as usize)
        .chain([b' ' as usize, b'e' as usize, b't' as usize])
        .collect();
    let mut merges = Vec::with_capacity(n_ordinary.saturating_sub(256));
    let mut rng = Rng::for_row(seed, u64::MAX, 0);
    let mut misses = 0;
    while tokens.len() < n_ordinary && misses < 1_000_000 {
        let r = rng.next_u64();
        let left = if r & 3 == 0 {
            symbols[letters[(r >> 8) as usize % letters.len()]].to_string()
        } else {
            tokens[(r >> 16) as usize % tokens.len()].clone()
        };
        let right =
            tokens[letters[(r >> 40) as usize % letters.len()].min(tokens.len() - 1)].clone();
        let right = if (r >> 60) & 1 == 0 {
            right
        } else {
            tokens[(r >> 24) as usize % tokens.len().min(4096)].clone()
        };
        let merged = format!("{left}{right}");
        if right.contains('Ġ') || merged.chars().count() > 16 || seen.contains(&merged) {
            misses += 1;
            continue;
        }
        let Some(id) = ordinary_ids.next() else { break };
        vocab_map.insert(merged.clone(), json!(id));
        merges.push(Value::String(format!("{left} {right}")));
        seen.insert(merged.clone());
        tokens.push(merged);
    }
    let added: Vec<Value> = specials
        .iter()
        .map(|(id, s)| json!({"id": id, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
        .collect();
    for (id, s) in specials {
        vocab_map.insert(s.clone(), json!(id));
    }
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let post = match bos_prefix.and_then(|b| specials.iter().find(|s| s.1 == b)) {
        Some((id, s)) => json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": s, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": s, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": s, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {s.clone(): {"id": s, "ids": [id], "tokens": [s]}}
        }),
        None => byte_level.clone(),
    };
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": post,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab_map, "merges": merges}
    })
}
