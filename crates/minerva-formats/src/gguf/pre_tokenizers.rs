//! What a GGUF's `tokenizer.ggml.pre` means: every name llama.cpp knows, with llama.cpp's split
//! expressions (src/llama-vocab.cpp, `llm_tokenizer_bpe`) and its ignore_merges, as data. The
//! expressions are llama.cpp's strings exactly; the few that Oniguruma must not run as written
//! are in [`ONIG_REWRITES`]. minerva-text builds its in-memory pre-tokenizer from this table and
//! the tokenizer.json writer (`write::tokenizer`) writes the same steps; minerva-text's
//! tests/pre_tokenizer_table.rs checks the table against llama.cpp's source and the Hugging Face
//! `tokenizers` package (tests/fixtures/text/pre_tokenizer_splits.json).

use std::sync::LazyLock;

/// Names that llama.cpp treats alike: the same expressions and the same flags.
pub struct PreSplit {
    /// `tokenizer.ggml.pre` values: llama.cpp's, plus Minerva's older spellings `gpt2`, `o200k`.
    pub names: &'static [&'static str],
    /// Applied one after another: each later expression splits the pieces of the earlier ones,
    /// keeping both what it matches and the text between matches as pieces.
    pub exprs: &'static [&'static str],
    /// A piece that is itself a token skips the merges (tiktoken-style vocabularies).
    pub ignore_merges: bool,
    pub alphabet: Alphabet,
}

/// What BPE sees of a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alphabet {
    /// GPT-2 byte-level: each byte as one printable character.
    ByteLevel,
    /// Raw UTF-8, unknown bytes as `<0xXX>` tokens; with `escape_spaces`, spaces are written '▁'
    /// before splitting (SentencePiece-style vocabularies stored as `gpt2`, e.g. Gemma 4).
    Utf8 { escape_spaces: bool },
}

const fn bytes(
    names: &'static [&'static str],
    exprs: &'static [&'static str],
    ignore_merges: bool,
) -> PreSplit {
    PreSplit {
        names,
        exprs,
        ignore_merges,
        alphabet: Alphabet::ByteLevel,
    }
}

const fn utf8(
    names: &'static [&'static str],
    exprs: &'static [&'static str],
    escape_spaces: bool,
) -> PreSplit {
    PreSplit {
        names,
        exprs,
        ignore_merges: false,
        alphabet: Alphabet::Utf8 { escape_spaces },
    }
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` as llama.cpp spells it (its std::regex has no `(?i:)`).
macro_rules! contractions {
    () => {
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    };
}

/// o200k's words: a run of upper-case letters then lower-case ones, or upper-case ones then
/// lower-case ones, each with a contraction after it.
macro_rules! cased_words {
    () => {
        concat!(
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
            contractions!(),
            r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
            contractions!(),
            "?"
        )
    };
}

// Digits.
const DIGIT: &str = r"\p{N}";
const DIGITS: &str = r"\p{N}+";
const DIGITS_1_3: &str = r"\p{N}{1,3}";
const ASCII_DIGITS_3: &str = r"[0-9][0-9][0-9]";

/// GPT-2: contractions, words, numbers and punctuation runs each with one leading space, spaces.
/// (The original ends in `|\s+`; text no expression matches is a piece anyway.)
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const DEFAULT_PUNCT: &str = r"[\p{P}\$\+<=>\^~\|]+";
const FALCON_PUNCT: &str = r"[\p{P}\$\+<=>\^~\|`]+";

/// Llama 3 (tiktoken cl100k): words with one leading non-letter, digits by up to three,
/// punctuation runs with their newlines, newline runs, spaces.
const LLAMA3: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Qwen2: Llama 3 with every digit on its own.
const QWEN2: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Qwen3.5: Qwen2 with combining marks inside words.
const QWEN35: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// MiniCPM5: Llama 3 with whole digit runs (split by three beforehand).
const MINICPM5: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Jais 2: Llama 3 with spaces in runs of powers of two.
const JAIS2: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+",
    r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)",
    r"|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}"
);
/// Seed-Coder: Qwen2 with newlines never attached to punctuation.
const SEED_CODER: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// EXAONE MoE: words may run on over single spaces; one newline or slash after punctuation.
const EXAONE_MOE: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?",
    r"|\s*[\r\n]|\s+(?!\S)|\s+"
);
/// Ling (bailingmoe): Qwen2 with one newline per piece (the original's possessive `?+`/`++`,
/// which llama.cpp made greedy, split the same here).
const BAILINGMOE: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
/// Qwen2 without the English contractions, so Turkish suffixes after an apostrophe stay on.
const UFAKZEKA: &str =
    r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const NEWLINE_RUNS: &str = r"[^\n]+|[\n]+";

// DeepSeek LLM and Coder: newlines alone, then letters, punctuation, CJK and digits in turn.
// The letter class is llama.cpp's list of cased-letter ranges.
const CR_LF: &str = "[\r\n]";
const DEEPSEEK_LETTERS: &str = r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
const DEEPSEEK_PUNCT: &str = "\\s?[!-/:-~！-／：-～‘-‟\u{3000}-。]+";
const DEEPSEEK_CJK: &str = "[一-龥ࠀ-一가-\u{D7FF}]+";
// DeepSeek V3 and kin: digits by three, then CJK and kana runs, then words (llama.cpp writes
// CR and LF themselves into these, not `\r\n`).
const KANA_CJK: &str = "[一-龥\u{3040}-ゟ゠-ヿ]+";
const DEEPSEEK3: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const SPARK2_5: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+";
const YOUTU_CJK: &str =
    "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥\u{3040}-ゟ゠-ヿ]+";
const YOUTU: &str = concat!(
    cased_words!(),
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// o200k (GPT-4o) as llama.cpp writes it: `((?=[\p{L}])([^a-z]))` stands in for the upper-case
/// classes its std::regex lacks. Runs as [`O200K`].
const GPT4O: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+",
    contractions!(),
    r"?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*",
    contractions!(),
    r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// o200k as its tokenizer.json has it (quoted in llama.cpp next to [`GPT4O`]).
const O200K: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Mistral Tekken: o200k without contractions and with single digits, as llama.cpp writes it.
/// Runs as [`TEKKEN_ORIGINAL`].
const TEKKEN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+",
    r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*",
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Tekken as its tokenizer.json has it (quoted in llama.cpp next to [`TEKKEN`]).
const TEKKEN_ORIGINAL: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// llama.cpp's own o200k variant for Granite multilingual embeddings: marks count as letters.
const GRANITE_EMB_MULTI: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+",
    contractions!(),
    r"?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*",
    contractions!(),
    r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Tiny Aya: digit runs in threes from the right, then o200k (Oniguruma runs this tokenizer.json
/// regex itself; llama.cpp runs hand-written code for it).
const TINY_AYA_DIGITS: &str = r"\d{1,3}(?=(?:\d{3})*\b)";
const TINY_AYA: &str = concat!(
    cased_words!(),
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// Kimi K2: llama.cpp's trigger for hand-written code. Runs as [`K2`].
const K2_TRIGGER: &str = r"\p{Han}+";
/// Kimi K2's pattern (tokenization_kimi.py, quoted in llama.cpp's unicode.cpp): Han runs, then
/// o200k words without Han letters.
const K2: &str = concat!(
    r"[\p{Han}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// AFMoE: llama.cpp's trigger for hand-written digit grouping. Runs as [`AFMOE_DIGITS`].
const AFMOE_TRIGGER: &str = r"\p{AFMoE_digits}";
/// What that code does: a digit run gives its first (length mod 3) digits, if any, then groups
/// of three, each piece taking the text before it since the last one.
const AFMOE_DIGITS: &str = r"\P{N}*\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))";
const AFMOE_CJK: &str = "[一-鿿㐀-䶿豈-\u{FAFF}\u{3040}-ゟ゠-ヿ･-ﾟ⼀-\u{2FDF}เ-\u{0E7F}\u{0E80}-\u{0EFF}ក-\u{17FF}က-႟ꩠ-ꩿꧠ-\u{A9FF}가-\u{D7AF}ᄀ-ᇿ]+";
const AFMOE: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// BLOOM: anything but spaces and sentence punctuation, with one leading space.
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";

/// llama.cpp expressions that Oniguruma must not run as written, and what runs instead.
pub const ONIG_REWRITES: &[(&str, &str)] = &[
    // A trigger for llama.cpp's hand-written code (alone, `\p{Han}+` would leave all other text
    // as one piece); the pattern that code implements runs instead.
    (K2_TRIGGER, K2),
    // Not a regex at all (Oniguruma: "invalid character property name").
    (AFMOE_TRIGGER, AFMOE_DIGITS),
    // llama.cpp's stand-ins for \p{Lu}/\p{Ll} split differently: they leave combining marks out
    // of words (Devanagari vowel signs, decomposed accents) and take non-ASCII lower-case
    // letters for upper-case. Oniguruma has the classes, so the tokenizer.json regex runs, as in
    // Hugging Face `tokenizers` and tiktoken.
    (GPT4O, O200K),
    (TEKKEN, TEKKEN_ORIGINAL),
];

/// The table, in llama.cpp's groups (its LLAMA_VOCAB_PRE_TYPE_* names in the comments).
#[rustfmt::skip]
pub const TABLE: &[PreSplit] = &[
    // DEFAULT; also what a GGUF without tokenizer.ggml.pre gets.
    bytes(&["default"], &[DEFAULT_PUNCT, GPT2, DIGITS, ASCII_DIGITS_3], false),
    // GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING.
    bytes(
        &[
            "gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
            "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code",
            "roberta-bpe", "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling",
        ],
        &[GPT2],
        false,
    ),
    // STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2: single digits.
    bytes(
        &[
            "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
            "mellum2",
        ],
        &[DIGIT, GPT2],
        false,
    ),
    // FALCON
    bytes(&["falcon"], &[FALCON_PUNCT, GPT2, ASCII_DIGITS_3], false),
    // LLAMA3
    bytes(
        &[
            "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
            "lfm2", "jina-v5-nano",
        ],
        &[LLAMA3],
        true,
    ),
    // DBRX, SMAUG, CHATGLM4 (glm4 and glm5 ignore merges)
    bytes(&["dbrx", "smaug-bpe", "chatglm-bpe"], &[LLAMA3], false),
    bytes(&["glm4", "glm5"], &[LLAMA3], true),
    // JAIS2
    bytes(&["jais-2"], &[JAIS2], false),
    // MINICPM5
    bytes(&["minicpm5"], &[DIGITS_1_3, MINICPM5], true),
    // QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN, GROK_2
    bytes(
        &[
            "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
            "solar-open", "grok-2",
        ],
        &[QWEN2],
        false,
    ),
    // QWEN35, UFAKZEKA, BAILINGMOE, SEED_CODER, EXAONE_MOE, LAGUNA
    bytes(&["qwen35"], &[QWEN35], false),
    bytes(&["ufakzeka"], &[UFAKZEKA], false),
    bytes(&["bailingmoe", "bailingmoe2", "llada-moe"], &[BAILINGMOE], false),
    bytes(&["seed-coder"], &[SEED_CODER], false),
    bytes(&["exaone-moe"], &[EXAONE_MOE], false),
    bytes(&["laguna"], &[NEWLINE_RUNS, QWEN2], false),
    // DEEPSEEK_LLM, DEEPSEEK_CODER
    bytes(
        &["deepseek-llm"],
        &[CR_LF, DEEPSEEK_LETTERS, DEEPSEEK_PUNCT, r"\s+$", DEEPSEEK_CJK, DIGITS],
        false,
    ),
    bytes(&["deepseek-coder"], &[CR_LF, r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, DIGIT], false),
    // DEEPSEEK3_LLM, HUNYUAN_DENSE, JOYAI_LLM, HY_V4; SPARK2_5; YOUTU
    bytes(
        &["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
        &[DIGITS_1_3, KANA_CJK, DEEPSEEK3],
        false,
    ),
    bytes(&["spark2_5"], &[DIGITS_1_3, KANA_CJK, SPARK2_5, DIGIT], false),
    bytes(&["youtu"], &[YOUTU_CJK, YOUTU], true),
    // GPT4O, MINIMAX_M2 ("o200k" is Minerva's own spelling)
    bytes(&["gpt-4o", "o200k", "llama4", "kanana2", "talkie", "minimax-m2"], &[GPT4O], false),
    // TEKKEN, GRANITE_EMB_MULTI, TINY_AYA, KIMI_K2, AFMOE, SUPERBPE
    bytes(&["tekken"], &[TEKKEN], true),
    bytes(&["granite-embed-multi-97m"], &[GRANITE_EMB_MULTI], true),
    bytes(&["tiny_aya", "cohere2moe"], &[TINY_AYA_DIGITS, TINY_AYA], false),
    bytes(&["kimi-k2"], &[K2_TRIGGER], false),
    bytes(&["afmoe"], &[AFMOE_TRIGGER, AFMOE_CJK, AFMOE], false),
    bytes(&["superbpe"], &[DIGITS, r"(?=(\d{3})+(?!\d))"], false),
    // BLOOM, GPT3_FINNISH, PORO; VIKING
    bytes(&["bloom", "gpt3-finnish", "poro-chat"], &[BLOOM], false),
    bytes(&["viking"], &[BLOOM, DIGIT], false),
    // CHAMELEON: sentinel and image tokens, tabs, newlines and space pairs, digits and
    // punctuation alone, then GPT-2.
    bytes(
        &["chameleon"],
        &[
            r"<sentinel:[0-9]+>",
            r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            r"([\t\n]|    |  )",
            DIGIT,
            r"[\p{P}!-/:-@\[-`{-~]",
            GPT2,
        ],
        false,
    ),
    // GEMMA4, SARVAM_MOE: spaces as '▁', BPE over whole lines of raw UTF-8.
    utf8(&["gemma4", "granite-embed-multi-311m", "sarvam-moe"], &[NEWLINE_RUNS], true),
    // WHITESPACE
    utf8(&["whitespace"], &[r"\S+"], false),
];

impl PreSplit {
    /// The expressions as Oniguruma runs them (Hugging Face `tokenizers` too): llama.cpp's, but
    /// for [`ONIG_REWRITES`].
    pub fn onig_exprs(&self) -> Vec<&'static str> {
        self.exprs
            .iter()
            .map(|e| {
                ONIG_REWRITES
                    .iter()
                    .find(|(llama, _)| llama == e)
                    .map_or(*e, |(_, onig)| *onig)
            })
            .collect()
    }
}

/// The table row of a GGUF `tokenizer.ggml.pre` name; a missing name is llama.cpp's `default`.
/// An unknown name gives None.
pub fn row(name: Option<&str>) -> Option<&'static PreSplit> {
    let name = name.unwrap_or("default");
    TABLE.iter().find(|row| row.names.contains(&name))
}

/// Every `tokenizer.ggml.pre` name of the table, for messages.
pub static KNOWN_NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    TABLE
        .iter()
        .flat_map(|row| row.names.iter().copied())
        .collect()
});
