//! BPE pre-tokenizers chosen by a GGUF's `tokenizer.ggml.pre` name (`gpt2`-model vocabularies;
//! SentencePiece `llama` ones don't come here): llama.cpp's list of expressions, each splitting
//! the pieces of the one before, as `tokenizers` Split steps, then GPT-2's byte-level mapping.
//! The table of names and expressions is [`minerva_formats::gguf::pre_tokenizers`] (the
//! converter writes the same steps into tokenizer.json).

pub use minerva_formats::gguf::pre_tokenizers::{
    row, Alphabet, PreSplit, KNOWN_NAMES, ONIG_REWRITES, TABLE,
};

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

/// How a named pre-tokenizer splits text, and how BPE then treats the pieces.
pub struct BpePre {
    pub pre_tokenizer: PreTokenizerWrapper,
    pub ignore_merges: bool,
    pub alphabet: Alphabet,
}

/// Split(expression, Isolated) for each of the row's expressions in turn, then for byte-level
/// rows ByteLevel without its own regex: how a tokenizer.json writes such a pre-tokenizer.
pub fn pre_tokenizer(row: &PreSplit) -> PreTokenizerWrapper {
    let mut steps: Vec<PreTokenizerWrapper> = row
        .onig_exprs()
        .into_iter()
        .map(|e| {
            let split = Split::new(
                SplitPattern::Regex(e.to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .unwrap_or_else(|err| panic!("built-in pre-tokenizer regex {e:?}: {err}"));
            PreTokenizerWrapper::Split(split)
        })
        .collect();
    if row.alphabet == Alphabet::ByteLevel {
        steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, false, false,
        )));
    }
    PreTokenizerWrapper::Sequence(Sequence::new(steps))
}

/// The pre-tokenizer for a GGUF `tokenizer.ggml.pre` name; an unknown name gives None.
pub fn for_name(name: Option<&str>) -> Option<BpePre> {
    row(name).map(|row| BpePre {
        pre_tokenizer: pre_tokenizer(row),
        ignore_merges: row.ignore_merges,
        alphabet: row.alphabet,
    })
}

/// The pieces a named pre-tokenizer splits `text` into, as BPE then sees them (byte-level
/// rows write a space as 'Ġ'); None for an unknown name.
pub fn pieces(name: &str, text: &str) -> Option<Vec<String>> {
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
    let pre = for_name(Some(name))?.pre_tokenizer;
    let mut s = PreTokenizedString::from(text);
    pre.pre_tokenize(&mut s).ok()?;
    Some(
        s.get_splits(OffsetReferential::Original, OffsetType::Char)
            .into_iter()
            .map(|(w, _, _)| w.to_owned())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn words(name: &str, text: &str) -> Vec<String> {
        pieces(name, text).unwrap()
    }

    #[test]
    fn digits_group_by_three_in_llama3_and_singly_in_qwen2() {
        assert_eq!(words("llama3", "12345"), ["123", "45"]);
        assert_eq!(words("qwen2", "123"), ["1", "2", "3"]);
        assert_eq!(words("gpt-4o", "12345"), ["123", "45"]);
        assert_eq!(words("smollm", "12 345"), ["1", "2", "Ġ", "3", "4", "5"]);
    }

    #[test]
    fn o200k_keeps_contractions_and_splits_case_runs() {
        // 'Ġ' is the byte-level form of a space.
        assert_eq!(words("gpt-4o", "I'm HELLOWorld"), ["I'm", "ĠHELLOWorld"]);
        assert_eq!(words("llama3", "I'm fine"), ["I", "'m", "Ġfine"]);
    }

    #[test]
    fn every_row_builds_and_names_are_unique() {
        let mut seen = HashSet::new();
        for row in TABLE {
            assert!(!row.exprs.is_empty(), "{:?}", row.names);
            for name in row.names {
                assert!(seen.insert(*name), "'{name}' is in two rows");
                assert!(for_name(Some(name)).is_some());
            }
        }
        assert_eq!(KNOWN_NAMES.len(), seen.len());
        for (llama, _) in ONIG_REWRITES {
            assert!(TABLE.iter().any(|row| row.exprs.contains(llama)), "{llama}");
        }
    }

    #[test]
    fn unknown_names_are_refused() {
        assert!(for_name(Some("no-such-pre")).is_none());
        assert!(std::ptr::eq(
            row(None).unwrap(),
            row(Some("default")).unwrap()
        ));
    }
}
