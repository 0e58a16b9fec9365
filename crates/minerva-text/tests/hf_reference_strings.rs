//! Many strings (multibyte, whitespace runs, code, empty, special tokens in text, a long input)
//! tokenized as the Hugging Face `tokenizers` package does (tests/fixtures/text/hf_ids.json),
//! by the tokenizer.json tokenizers and by the GGUF-built ones; and streamed back to text.

mod common;

use common::{fixtures, gguf_metadata, ids, read_json};
use minerva_text::{Detokenizer, Tokenizer};
use serde_json::Value;

const FLAVOURS: [&str; 3] = ["llama", "qwen3", "gpt_oss"];

fn tokenizers(flavour: &str) -> [(String, Tokenizer); 2] {
    [
        (
            format!("{flavour} tokenizer.json"),
            Tokenizer::from_folder(&fixtures().join(flavour).join("f32")).unwrap(),
        ),
        (
            format!("{flavour} gguf"),
            Tokenizer::from_gguf_metadata(&gguf_metadata(flavour), flavour).unwrap(),
        ),
    ]
}

fn short(s: &str) -> String {
    s.chars().take(40).collect()
}

#[test]
fn ids_and_text_match_hf_tokenizers() {
    let data = read_json("text/hf_ids.json");
    let strings: Vec<&str> = data["strings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(strings.len() >= 20 && strings.contains(&"") && strings.iter().any(|s| s.len() > 5000));
    for flavour in FLAVOURS {
        let cases = data["tokenizers"][flavour].as_array().unwrap();
        for (label, tok) in tokenizers(flavour) {
            for (s, case) in strings.iter().zip(cases) {
                let what = format!("{label} on {:?}", short(s));
                let with_special = ids(&case["ids"]);
                assert_eq!(tok.encode(s, true).unwrap(), with_special, "{what}: ids");
                let (plain, tokens) = tok.encode_with_tokens(s, false).unwrap();
                assert_eq!(
                    plain,
                    ids(&case["ids_no_special"]),
                    "{what}: ids without special"
                );
                if let Value::Array(expected) = &case["tokens_no_special"] {
                    let expected: Vec<&str> =
                        expected.iter().map(|t| t.as_str().unwrap()).collect();
                    assert_eq!(tokens, expected, "{what}: tokens");
                }
                assert_eq!(
                    tok.decode(&with_special, false).unwrap(),
                    case["decoded"].as_str().unwrap(),
                    "{what}: decode"
                );
                assert_eq!(
                    tok.decode(&with_special, true).unwrap(),
                    case["decoded_skip_special"].as_str().unwrap(),
                    "{what}: decode skipping special"
                );
            }
        }
    }
}

/// Streams ids one at a time; returns the pieces and checks they join into the full decode.
fn stream(tok: &Tokenizer, ids: &[u32], skip_special: bool) -> Vec<String> {
    let mut d = Detokenizer::new(skip_special);
    let mut pieces: Vec<String> = ids.iter().map(|&id| d.push(tok, id).unwrap()).collect();
    pieces.push(d.finish(tok).unwrap());
    pieces
}

#[test]
fn streaming_detokenizer_gives_whole_characters_and_the_full_text() {
    let data = read_json("text/hf_ids.json");
    for flavour in FLAVOURS {
        let cases = data["tokenizers"][flavour].as_array().unwrap();
        for (label, tok) in tokenizers(flavour) {
            for case in cases {
                for skip in [false, true] {
                    let ids = ids(&case["ids"]);
                    let pieces = stream(&tok, &ids, skip);
                    let key = if skip {
                        "decoded_skip_special"
                    } else {
                        "decoded"
                    };
                    let full = case[key].as_str().unwrap();
                    assert_eq!(pieces.concat(), full, "{label}: streamed text");
                    if !full.contains('\u{FFFD}') {
                        assert!(
                            pieces.iter().all(|p| !p.contains('\u{FFFD}')),
                            "{label}: a piece split a character: {pieces:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn multibyte_characters_split_over_tokens_come_out_whole() {
    // The byte-level fixture vocabularies spell CJK and emoji one byte per token.
    let tok = Tokenizer::from_folder(&fixtures().join("qwen3/f32")).unwrap();
    let ids = tok.encode("日本🦊", false).unwrap();
    assert!(ids.len() >= 10, "expected byte tokens, got {ids:?}");
    let pieces: Vec<String> = stream(&tok, &ids, true)
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    assert_eq!(pieces, ["日", "本", "🦊"]);
}

#[test]
fn stop_strings_spanning_tokens_are_held_back_and_cut() {
    let tok = Tokenizer::from_folder(&fixtures().join("llama/f32")).unwrap();
    let text = "The answer is 4.\nUser: and more";
    let ids = tok.encode(text, false).unwrap();
    let mut d = Detokenizer::new(true).with_stop_strings(["\nUser:"]);
    let mut out = String::new();
    for &id in &ids {
        let piece = d.push(&tok, id).unwrap();
        // Nothing of the stop string is ever shown, even while it is incomplete.
        assert!(!piece.contains('\n'), "held-back text leaked: {piece:?}");
        out.push_str(&piece);
    }
    out.push_str(&d.finish(&tok).unwrap());
    assert_eq!(out, "The answer is 4.");
    assert_eq!(d.stopped(), Some("\nUser:"));

    // A prefix of a stop string that never completes is released at the end.
    let ids = tok.encode("ends with \nUs", false).unwrap();
    let mut d = Detokenizer::new(true).with_stop_strings(["\nUser:"]);
    let mut out: String = ids.iter().map(|&id| d.push(&tok, id).unwrap()).collect();
    assert_eq!(out, "ends with ");
    out.push_str(&d.finish(&tok).unwrap());
    assert_eq!(out, "ends with \nUs");
    assert_eq!(d.stopped(), None);
}

#[test]
fn invalid_byte_sequences_are_not_held_forever() {
    // A lone UTF-8 lead byte followed by plain text: the text still streams, matching a full decode.
    let tok = Tokenizer::from_folder(&fixtures().join("gpt_oss/f32")).unwrap();
    let lead = tok.token_to_id("ã").expect("byte-level symbol of 0xE3");
    let mut ids = vec![lead];
    ids.extend(tok.encode(" and some more words after it", false).unwrap());
    let pieces = stream(&tok, &ids, true);
    assert_eq!(pieces.concat(), tok.decode(&ids, true).unwrap());
    assert!(
        pieces[..ids.len()].concat().contains("words"),
        "text was held until the end: {pieces:?}"
    );
    // Only lead bytes: everything comes out by the end.
    let ids = vec![lead; 3];
    assert_eq!(
        stream(&tok, &ids, true).concat(),
        tok.decode(&ids, true).unwrap()
    );
}
