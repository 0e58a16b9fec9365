//! Byte-level BPE pre-tokenizers chosen by a GGUF's `tokenizer.ggml.pre` name: the regex that
//! splits text into words before BPE runs on each word's bytes.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

/// Llama 3 (tiktoken cl100k-style): digits in groups of up to three.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2 / Qwen3: as Llama 3 but every digit on its own.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// o200k (GPT-4o, gpt-oss): case-aware words with attached contractions.
const O200K: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// How a named pre-tokenizer splits text, and whether whole words found in the vocabulary skip
/// the merges (tiktoken-derived vocabularies are encoded that way).
pub struct BpePre {
    pub pre_tokenizer: PreTokenizerWrapper,
    pub ignore_merges: bool,
}

/// The `tokenizer.ggml.pre` names understood here, for messages.
pub const KNOWN_NAMES: &[&str] = &[
    "default",
    "gpt-2",
    "gpt2",
    "llama3",
    "llama-v3",
    "llama-bpe",
    "qwen2",
    "deepseek-r1-qwen",
    "gpt-4o",
    "o200k",
];

/// The pre-tokenizer for a GGUF `tokenizer.ggml.pre` name. A missing name or `default` means
/// the GPT-2 byte-level split (the documented default); an unknown name gives None.
pub fn for_name(name: Option<&str>) -> Option<BpePre> {
    let regex = |pattern: &str, ignore_merges: bool| {
        let split = Split::new(
            SplitPattern::Regex(pattern.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .expect("built-in pre-tokenizer regexes compile");
        BpePre {
            pre_tokenizer: PreTokenizerWrapper::Sequence(Sequence::new(vec![
                PreTokenizerWrapper::Split(split),
                PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false)),
            ])),
            ignore_merges,
        }
    };
    match name.unwrap_or("default") {
        "default" | "gpt-2" | "gpt2" => Some(BpePre {
            pre_tokenizer: PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
            ignore_merges: false,
        }),
        "llama3" | "llama-v3" | "llama-bpe" => Some(regex(LLAMA3, true)),
        "qwen2" | "deepseek-r1-qwen" => Some(regex(QWEN2, false)),
        "gpt-4o" | "o200k" => Some(regex(O200K, true)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    fn words(name: &str, text: &str) -> Vec<String> {
        let pre = for_name(Some(name)).unwrap().pre_tokenizer;
        let mut s = PreTokenizedString::from(text);
        pre.pre_tokenize(&mut s).unwrap();
        s.get_splits(OffsetReferential::Original, OffsetType::Char)
            .into_iter()
            .map(|(w, _, _)| w.to_owned())
            .collect()
    }

    #[test]
    fn digits_group_by_three_in_llama3_and_singly_in_qwen2() {
        assert_eq!(words("llama3", "12345"), ["123", "45"]);
        assert_eq!(words("qwen2", "123"), ["1", "2", "3"]);
        assert_eq!(words("gpt-4o", "12345"), ["123", "45"]);
    }

    #[test]
    fn o200k_keeps_contractions_and_splits_case_runs() {
        // 'Ġ' is the byte-level form of a space.
        assert_eq!(words("gpt-4o", "I'm HELLOWorld"), ["I'm", "ĠHELLOWorld"]);
        assert_eq!(words("llama3", "I'm fine"), ["I", "'m", "Ġfine"]);
    }

    #[test]
    fn unknown_names_are_refused() {
        assert!(for_name(Some("no-such-pre")).is_none());
        assert!(for_name(None).is_some());
    }
}
