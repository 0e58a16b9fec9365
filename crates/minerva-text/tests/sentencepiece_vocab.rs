//! A llama-style (SentencePiece BPE, scores, byte fallback) GGUF vocabulary, trained with the
//! `sentencepiece` package by tools/dump_tokenizer_ids.py: ids, pieces and text must match what
//! `sentencepiece` itself gives, including '▁' leading spaces and <0xNN> byte tokens.

mod common;

use common::{ids, metadata_from_json, read_json};
use minerva_text::{Detokenizer, Tokenizer};

fn spm() -> (Tokenizer, serde_json::Value) {
    let data = read_json("text/spm_llama.json");
    let meta = metadata_from_json(&data["metadata"]);
    (
        Tokenizer::from_gguf_metadata(&meta, "spm_llama.json").unwrap(),
        data,
    )
}

#[test]
fn encode_and_decode_match_sentencepiece() {
    let (tok, data) = spm();
    for case in data["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let expected = ids(&case["ids"]);
        let (got, pieces) = tok.encode_with_tokens(text, false).unwrap();
        let want_pieces: Vec<&str> = case["pieces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(pieces, want_pieces, "pieces of {text:?}");
        assert_eq!(got, expected, "ids of {text:?}");
        // add_bos_token is set: BOS (id 1) comes first.
        let with_bos = tok.encode(text, true).unwrap();
        assert_eq!(with_bos[0], 1);
        assert_eq!(&with_bos[1..], expected.as_slice());
        let decoded = case["decoded"].as_str().unwrap();
        assert_eq!(
            tok.decode(&expected, true).unwrap(),
            decoded,
            "decode of {text:?}"
        );
        assert_eq!(
            tok.decode(&with_bos, true).unwrap(),
            decoded,
            "decode of {text:?} after BOS"
        );
    }
}

#[test]
fn byte_fallback_and_leading_spaces_by_hand() {
    let (tok, _) = spm();
    // 'é' is not a piece of this vocabulary: its two UTF-8 bytes become <0xC3> <0xA9>.
    let (_, pieces) = tok.encode_with_tokens("é", false).unwrap();
    assert_eq!(pieces, ["▁", "<0xC3>", "<0xA9>"]);
    // The dummy prefix '▁' is removed on decoding, spaces the text had are kept.
    let ids = tok.encode("  x", false).unwrap();
    assert_eq!(tok.decode(&ids, true).unwrap(), "  x");
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_ids(), [2]);
}

#[test]
fn streaming_keeps_spaces_and_byte_sequences() {
    let (tok, data) = spm();
    for case in data["cases"].as_array().unwrap() {
        let ids = ids(&case["ids"]);
        let mut d = Detokenizer::new(true);
        let mut pieces: Vec<String> = std::iter::once(1)
            .chain(ids.iter().copied())
            .map(|id| d.push(&tok, id).unwrap())
            .collect();
        pieces.push(d.finish(&tok).unwrap());
        assert_eq!(pieces.concat(), case["decoded"].as_str().unwrap());
        assert!(
            pieces.iter().all(|p| !p.contains('\u{FFFD}')),
            "split character: {pieces:?}"
        );
    }
}
