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

/// A few sentences of plain English to learn the first merges from.
const CORPUS: &str = "The model reads the prompt and writes an answer one token at a time. \
Each layer mixes information between the tokens with attention and then transforms every \
position on its own with a small network. The weights are stored in files that hold numbers in \
several formats, and the program that runs the model reads those files, turns the numbers into \
matrices and multiplies them with the input. People ask questions about the weather, about \
history, about cooking and about programming, and they expect clear answers that are correct. \
When the answer is long, the program shows the words as soon as they are ready, so that the \
reader does not wait. A good tokenizer splits common words into one piece and rare words into \
several pieces, which keeps the number of tokens small for ordinary text in English.";

/// BPE merges learned on `CORPUS` (GPT-2 style words: a leading space becomes 'Ġ'): repeatedly
/// the most frequent adjacent pair, ties broken by the pair's text, while a pair occurs twice.
fn trained_merges(symbols: &[char], limit: usize) -> Vec<(String, String)> {
    let mut counts: std::collections::BTreeMap<Vec<String>, usize> =
        std::collections::BTreeMap::new();
    for (i, w) in CORPUS.split_whitespace().enumerate() {
        let word: String = w.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        if word.is_empty() {
            continue;
        }
        let text = if i == 0 { word } else { format!(" {word}") };
        let pieces = text
            .bytes()
            .map(|b| symbols[b as usize].to_string())
            .collect();
        *counts.entry(pieces).or_default() += 1;
    }
    let mut words: Vec<(Vec<String>, usize)> = counts.into_iter().collect();
    let mut out = Vec::new();
    while out.len() < limit {
        let mut pairs: std::collections::BTreeMap<(String, String), usize> =
            std::collections::BTreeMap::new();
        for (w, n) in &words {
            for p in w.windows(2) {
                *pairs.entry((p[0].clone(), p[1].clone())).or_default() += n;
            }
        }
        let Some((best, n)) = pairs
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        else {
            break;
        };
        if n < 2 {
            break;
        }
        for (w, _) in words.iter_mut() {
            let mut i = 0;
            while i + 1 < w.len() {
                if w[i] == best.0 && w[i + 1] == best.1 {
                    let right = w.remove(i + 1);
                    w[i].push_str(&right);
                }
                i += 1;
            }
        }
        out.push(best);
    }
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
    let mut merges = Vec::with_capacity(n_ordinary.saturating_sub(256));
    let mut add = |left: &str, right: &str, tokens: &mut Vec<String>| -> bool {
        let merged = format!("{left}{right}");
        if seen.contains(&merged) {
            return false;
        }
        let Some(id) = ordinary_ids.next() else {
            return false;
        };
        vocab_map.insert(merged.clone(), json!(id));
        merges.push(Value::String(format!("{left} {right}")));
        seen.insert(merged.clone());
        tokens.push(merged);
        true
    };
    // First the merges real BPE training finds on a little English text, so common words and
    // word pieces become single tokens as in a trained vocabulary.
    for (l, r) in trained_merges(&symbols, n_ordinary.saturating_sub(tokens.len())) {
        add(&l, &r, &mut tokens);
    }
    // Then seeded merges of word-like tokens (optional leading 'Ġ', lowercase letters) with short
    // letter suffixes; any two tokens once those run out.
    let is_word = |t: &str| {
        let body = t.strip_prefix('Ġ').unwrap_or(t);
        !body.is_empty() && body.chars().all(|c| c.is_ascii_lowercase())
    };
    let mut words: Vec<usize> = (0..tokens.len()).filter(|&i| is_word(&tokens[i])).collect();
    let mut suffixes: Vec<usize> = words
        .iter()
        .copied()
        .filter(|&i| !tokens[i].starts_with('Ġ') && tokens[i].len() <= 3)
        .collect();
    let mut rng = Rng::for_row(seed, u64::MAX, 0);
    let mut misses = 0u32;
    while tokens.len() < n_ordinary {
        let r = rng.next_u64();
        let (l, rt) = if misses < 10_000 {
            (
                words[(r as usize) % words.len()],
                suffixes[((r >> 32) as usize) % suffixes.len()],
            )
        } else {
            (
                (r as usize) % tokens.len(),
                ((r >> 32) as usize) % tokens.len(),
            )
        };
        let (left, right) = (tokens[l].clone(), tokens[rt].clone());
        if right.contains('Ġ')
            || left.chars().count() + right.chars().count() > 16
            || !add(&left, &right, &mut tokens)
        {
            misses += 1;
            if misses > 1_000_000 {
                break;
            }
            continue;
        }
        misses = 0;
        let last = tokens.len() - 1;
        if is_word(&tokens[last]) {
            words.push(last);
            if tokens[last].len() <= 3 && !tokens[last].starts_with('Ġ') {
                suffixes.push(last);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_is_complete_and_every_merge_is_buildable() {
        let specials = vec![
            (0, "<unk>".to_string()),
            (1, "<s>".to_string()),
            (1999, "<|end|>".to_string()),
        ];
        let t = tokenizer_json(2000, &specials, Some("<s>"), 9);
        let vocab = t["model"]["vocab"].as_object().unwrap();
        let mut ids: Vec<u64> = vocab.values().map(|v| v.as_u64().unwrap()).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..2000).collect::<Vec<u64>>(),
            "every id below the size, once"
        );
        assert_eq!(vocab["<|end|>"], 1999);
        assert_eq!(
            vocab["Ġthe"].as_u64().map(|i| i < 300),
            Some(true),
            "common words merge early"
        );
        for m in t["model"]["merges"].as_array().unwrap() {
            let (l, r) = m.as_str().unwrap().split_once(' ').unwrap();
            let (il, ir, im) = (&vocab[l], &vocab[r], &vocab[&format!("{l}{r}")]);
            assert!(
                il.as_u64() < im.as_u64() && ir.as_u64() < im.as_u64(),
                "merge {l} {r}"
            );
        }
        assert_eq!(
            t,
            tokenizer_json(2000, &specials, Some("<s>"), 9),
            "deterministic for a seed"
        );
    }
}
