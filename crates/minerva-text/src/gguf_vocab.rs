//! A tokenizer built from a GGUF file's embedded vocabulary (`tokenizer.ggml.*`): BPE with merges
//! (`gpt2`: byte-level, or raw UTF-8 with byte fallback for a few `tokenizer.ggml.pre` names) or
//! SentencePiece-style BPE with scores and byte fallback (`llama`).

use crate::error::{Result, TextError};
use crate::pretokenizer::{self, Alphabet};
use minerva_formats::{MetaValue, Metadata};
use std::collections::HashMap;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab as BpeVocab, BPE};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

/// GGUF token types (llama.cpp's `llama_token_type`).
pub mod token_type {
    pub const NORMAL: i64 = 1;
    pub const UNKNOWN: i64 = 2;
    pub const CONTROL: i64 = 3;
    pub const USER_DEFINED: i64 = 4;
    pub const UNUSED: i64 = 5;
    pub const BYTE: i64 = 6;
}

/// What the GGUF says about special tokens, ids checked against the vocabulary.
#[derive(Debug, Clone, Default)]
pub struct GgufSpecials {
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
}

/// The vocabulary arrays of the metadata, lengths checked against each other.
struct Vocab<'a> {
    tokens: Vec<&'a str>,
    types: Vec<i64>,
    scores: Option<Vec<f32>>,
}

fn read_vocab<'a>(meta: &'a Metadata, origin: &str) -> Result<Vocab<'a>> {
    let bad = |what: String| TextError::malformed(origin, what);
    let tokens = match meta.get("tokenizer.ggml.tokens") {
        None => {
            return Err(TextError::missing(
                origin,
                "no tokenizer.ggml.tokens in the GGUF metadata",
            ))
        }
        Some(v) => v
            .as_array()
            .and_then(|a| a.iter().map(MetaValue::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| bad("tokenizer.ggml.tokens is not an array of strings".into()))?,
    };
    if tokens.is_empty() || tokens.len() > u32::MAX as usize {
        return Err(bad(format!(
            "tokenizer.ggml.tokens holds {} tokens",
            tokens.len()
        )));
    }
    let n = tokens.len();
    let types = match meta.get("tokenizer.ggml.token_type") {
        None => vec![token_type::NORMAL; n],
        Some(v) => {
            let a = v
                .as_array()
                .and_then(|a| a.iter().map(MetaValue::as_i64).collect::<Option<Vec<_>>>())
                .ok_or_else(|| {
                    bad("tokenizer.ggml.token_type is not an array of integers".into())
                })?;
            if a.len() != n {
                return Err(bad(format!(
                    "tokenizer.ggml.token_type has {} entries for {n} tokens",
                    a.len()
                )));
            }
            a
        }
    };
    let scores = match meta.get("tokenizer.ggml.scores") {
        None => None,
        Some(v) => {
            let a = v
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(|x| x.as_f64().map(|f| f as f32))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| bad("tokenizer.ggml.scores is not an array of numbers".into()))?;
            if a.len() != n {
                return Err(bad(format!(
                    "tokenizer.ggml.scores has {} entries for {n} tokens",
                    a.len()
                )));
            }
            Some(a)
        }
    };
    Ok(Vocab {
        tokens,
        types,
        scores,
    })
}

/// A token id key: absent is fine, present must name a token of the vocabulary.
fn token_id(meta: &Metadata, key: &str, n: usize, origin: &str) -> Result<Option<u32>> {
    let Some(v) = meta.get(key) else {
        return Ok(None);
    };
    // llama.cpp writes -1 (as a signed type) for "no such token".
    if v.as_i64().is_some_and(|i| i < 0) {
        return Ok(None);
    }
    match v.as_u64() {
        Some(id) if (id as usize) < n => Ok(Some(id as u32)),
        Some(id) => Err(TextError::malformed(
            origin,
            format!("{key} = {id} is outside the vocabulary of {n} tokens"),
        )),
        None => Err(TextError::malformed(
            origin,
            format!("{key} is a {}, not a token id", v.type_name()),
        )),
    }
}

fn flag(meta: &Metadata, key: &str, default: bool, origin: &str) -> Result<bool> {
    match meta.get(key) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| {
            TextError::malformed(origin, format!("{key} is a {}, not a bool", v.type_name()))
        }),
    }
}

fn tokenizer_error(origin: &str, e: impl std::fmt::Display) -> TextError {
    TextError::malformed(origin, format!("cannot build the tokenizer: {e}"))
}

/// Builds the tokenizer a GGUF describes. `origin` names the file in messages.
pub fn build(meta: &Metadata, origin: &str) -> Result<(HfTokenizer, GgufSpecials)> {
    let model = meta.get_str("tokenizer.ggml.model").ok_or_else(|| {
        TextError::missing(origin, "no tokenizer.ggml.model in the GGUF metadata")
    })?;
    let vocab = read_vocab(meta, origin)?;
    let n = vocab.tokens.len();
    let is_spm = match model {
        "gpt2" => false,
        "llama" => true,
        other => {
            return Err(TextError::unsupported(
                origin,
                format!("tokenizer.ggml.model '{other}' (supported: gpt2, llama)"),
            ))
        }
    };
    let mut specials = GgufSpecials {
        bos: token_id(meta, "tokenizer.ggml.bos_token_id", n, origin)?,
        pad: token_id(meta, "tokenizer.ggml.padding_token_id", n, origin)?,
        unk: token_id(meta, "tokenizer.ggml.unknown_token_id", n, origin)?,
        add_bos: flag(meta, "tokenizer.ggml.add_bos_token", is_spm, origin)?,
        add_eos: flag(meta, "tokenizer.ggml.add_eos_token", false, origin)?,
        eos: Vec::new(),
    };
    // End of generation: EOS, and the end-of-turn / end-of-message tokens llama.cpp also stops on.
    for key in [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ] {
        if let Some(id) = token_id(meta, key, n, origin)? {
            if !specials.eos.contains(&id) {
                specials.eos.push(id);
            }
        }
    }
    if specials.unk.is_none() && is_spm {
        specials.unk = vocab
            .types
            .iter()
            .position(|&t| t == token_type::UNKNOWN)
            .map(|i| i as u32);
    }

    let mut ids: HashMap<String, u32> = HashMap::with_capacity(n);
    for (i, t) in vocab.tokens.iter().enumerate() {
        // A repeated token string keeps its first id, as llama.cpp's token-to-id map does.
        ids.entry((*t).to_owned()).or_insert(i as u32);
    }

    let mut tokenizer = if is_spm {
        spm_tokenizer(meta, &vocab, &ids, &specials, origin)?
    } else {
        gpt2_tokenizer(meta, &vocab, &ids, origin)?
    };

    // Control and user-defined tokens are matched whole in the input text; control tokens are
    // the special ones (skipped when decoding with skip_special).
    let added: Vec<AddedToken> = vocab
        .tokens
        .iter()
        .zip(&vocab.types)
        .enumerate()
        .filter(|(i, (t, &ty))| {
            !t.is_empty()
                && (ty == token_type::CONTROL || ty == token_type::USER_DEFINED)
                && ids.get(**t) == Some(&(*i as u32))
        })
        .map(|(_, (t, &ty))| AddedToken::from(*t, ty == token_type::CONTROL).normalized(false))
        .collect();
    tokenizer.add_special_tokens(&added);

    if specials.add_bos || specials.add_eos {
        let name = |id: Option<u32>, what: &str| -> Result<String> {
            id.map(|i| vocab.tokens[i as usize].to_owned())
                .ok_or_else(|| {
                    TextError::malformed(
                        origin,
                        format!("add_{what}_token is set but no {what} token id is given"),
                    )
                })
        };
        let mut single = Vec::new();
        let mut named = Vec::new();
        if specials.add_bos {
            let bos = name(specials.bos, "bos")?;
            single.push(bos.clone());
            named.push((bos, specials.bos.unwrap()));
        }
        single.push("$A".to_owned());
        if specials.add_eos {
            let eos = name(specials.eos.first().copied(), "eos")?;
            single.push(eos.clone());
            named.push((eos, specials.eos[0]));
        }
        let post = TemplateProcessing::builder()
            .try_single(single)
            .map_err(|e| tokenizer_error(origin, e))?
            .special_tokens(named)
            .build()
            .map_err(|e| tokenizer_error(origin, e))?;
        tokenizer.with_post_processor(Some(post));
    }
    Ok((tokenizer, specials))
}

/// Splits a GGUF merge line "left right" at the first space after its first character (a
/// merge's left part may itself be a space in non-byte-level vocabularies).
fn split_merge(line: &str) -> Option<(&str, &str)> {
    let first = line.chars().next()?.len_utf8();
    let at = line[first..].find(' ')? + first;
    Some((&line[..at], &line[at + 1..]))
}

fn gpt2_tokenizer(
    meta: &Metadata,
    vocab: &Vocab,
    ids: &HashMap<String, u32>,
    origin: &str,
) -> Result<HfTokenizer> {
    let pre_name = meta.get_str("tokenizer.ggml.pre");
    let pre = pretokenizer::for_name(pre_name).ok_or_else(|| {
        TextError::unsupported(
            origin,
            format!(
                "tokenizer.ggml.pre '{}' (known: {})",
                pre_name.unwrap_or_default(),
                pretokenizer::KNOWN_NAMES.join(", ")
            ),
        )
    })?;
    let lines = match meta.get("tokenizer.ggml.merges") {
        None => {
            return Err(TextError::missing(
                origin,
                "a gpt2 tokenizer without tokenizer.ggml.merges",
            ))
        }
        Some(v) => v
            .as_array()
            .and_then(|a| a.iter().map(MetaValue::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| {
                TextError::malformed(origin, "tokenizer.ggml.merges is not an array of strings")
            })?,
    };
    let mut merges = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let (a, b) = split_merge(line).ok_or_else(|| {
            TextError::malformed(
                origin,
                format!("merge {i} '{line}' is not two tokens separated by a space"),
            )
        })?;
        for part in [a, b] {
            if !ids.contains_key(part) {
                return Err(TextError::malformed(
                    origin,
                    format!("merge {i} '{line}' names unknown token '{part}'"),
                ));
            }
        }
        if !ids.contains_key(&format!("{a}{b}")) {
            return Err(TextError::malformed(
                origin,
                format!("merge {i} '{line}' makes '{a}{b}', which is not a token"),
            ));
        }
        merges.push((a.to_owned(), b.to_owned()));
    }
    let byte_level = pre.alphabet == Alphabet::ByteLevel;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab_of_model(vocab, ids), merges)
        .ignore_merges(pre.ignore_merges)
        .byte_fallback(!byte_level)
        .build()
        .map_err(|e| tokenizer_error(origin, e))?;
    let mut t = HfTokenizer::new(bpe);
    t.with_pre_tokenizer(Some(pre.pre_tokenizer));
    match pre.alphabet {
        Alphabet::ByteLevel => {
            t.with_decoder(Some(ByteLevel::new(false, false, false)));
        }
        // Raw UTF-8 pieces with `<0xXX>` byte tokens, spaces perhaps written '▁' (llama.cpp
        // escapes the text before splitting, as a normalizer does here).
        Alphabet::Utf8 { escape_spaces } => {
            let mut dec = Vec::new();
            if escape_spaces {
                let space = Replace::new(" ", "▁").map_err(|e| tokenizer_error(origin, e))?;
                t.with_normalizer(Some(space));
                dec.push(DecoderWrapper::Replace(
                    Replace::new("▁", " ").map_err(|e| tokenizer_error(origin, e))?,
                ));
            }
            dec.push(DecoderWrapper::ByteFallback(ByteFallback::new()));
            dec.push(DecoderWrapper::Fuse(Fuse::new()));
            t.with_decoder(Some(DecoderSequence::new(dec)));
        }
    }
    Ok(t)
}

/// Every token string with its id (the first id of a repeated string).
fn vocab_of_model(vocab: &Vocab, ids: &HashMap<String, u32>) -> BpeVocab {
    vocab
        .tokens
        .iter()
        .map(|t| ((*t).to_owned(), ids[*t]))
        .collect()
}

/// SentencePiece BPE as BPE merges: every normal token that splits into two normal tokens gives
/// a merge, ranked by the merged token's score (higher first) and then by ids, so merging the
/// best-scoring adjacent pair first reproduces SentencePiece's own order.
fn spm_merges(vocab: &Vocab, ids: &HashMap<String, u32>, scores: &[f32]) -> Vec<(String, String)> {
    let normal = |t: &str| {
        ids.get(t)
            .is_some_and(|&i| vocab.types[i as usize] == token_type::NORMAL)
    };
    let mut ranked: Vec<(f32, u32, u32, u32)> = Vec::new();
    for (id, token) in vocab.tokens.iter().enumerate() {
        if vocab.types[id] != token_type::NORMAL || ids[*token] != id as u32 {
            continue;
        }
        for (at, _) in token.char_indices().skip(1) {
            let (l, r) = token.split_at(at);
            if normal(l) && normal(r) {
                ranked.push((scores[id], id as u32, ids[l], ids[r]));
            }
        }
    }
    ranked.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    ranked
        .into_iter()
        .map(|(_, _, l, r)| {
            (
                vocab.tokens[l as usize].to_owned(),
                vocab.tokens[r as usize].to_owned(),
            )
        })
        .collect()
}

fn spm_tokenizer(
    meta: &Metadata,
    vocab: &Vocab,
    ids: &HashMap<String, u32>,
    specials: &GgufSpecials,
    origin: &str,
) -> Result<HfTokenizer> {
    let scores = vocab.scores.as_deref().ok_or_else(|| {
        TextError::missing(
            origin,
            "a llama (SentencePiece) tokenizer without tokenizer.ggml.scores",
        )
    })?;
    let add_space_prefix = flag(meta, "tokenizer.ggml.add_space_prefix", true, origin)?;
    let merges = spm_merges(vocab, ids, scores);
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab_of_model(vocab, ids), merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = specials.unk {
        builder = builder.unk_token(vocab.tokens[unk as usize].to_owned());
    }
    let bpe = builder.build().map_err(|e| tokenizer_error(origin, e))?;
    let mut t = HfTokenizer::new(bpe);

    // SentencePiece writes spaces as '▁' and (with a dummy prefix) starts every text with one;
    // the prefix applies to each stretch of text between special tokens, as in llama.cpp.
    let space = Replace::new(" ", "▁").map_err(|e| tokenizer_error(origin, e))?;
    let mut norm = Vec::new();
    if add_space_prefix {
        norm.push(NormalizerWrapper::Prepend(Prepend::new("▁".to_owned())));
    }
    norm.push(NormalizerWrapper::Replace(space));
    t.with_normalizer(Some(NormalizerSequence::new(norm)));

    let unspace = tokenizers::decoders::DecoderWrapper::Replace(
        Replace::new("▁", " ").map_err(|e| tokenizer_error(origin, e))?,
    );
    let mut dec = vec![
        unspace,
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if add_space_prefix {
        dec.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    t.with_decoder(Some(DecoderSequence::new(dec)));
    Ok(t)
}
