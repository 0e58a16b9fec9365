#!/usr/bin/env python3
"""Reference data for minerva-text's tokenizer tests, written under tests/fixtures/text/.

- hf_ids.json: for each fixture tokenizer.json (llama, qwen3, gpt_oss flavours), the ids that the
  Hugging Face `tokenizers` package gives for a set of test strings, with and without special
  tokens, and the decoded text.
- gguf_tokenizers.json: the `tokenizer.*` keys of the fixture GGUF files as read by gguf-py, so the
  GGUF-side tokenizer can be tested without a GGUF reader.
- pre_tokenizer_ids.json: a small byte-level BPE vocabulary (as GGUF metadata) and the ids
  `tokenizers` gives under the split regexes of the real Llama 3, Qwen2 and gpt-oss (o200k)
  tokenizer.json files, keyed by the `tokenizer.ggml.pre` names that select them.
- spm_llama.json: a small SentencePiece BPE vocabulary (byte fallback) trained here with the
  `sentencepiece` package, laid out as llama-style GGUF metadata, with the ids and text that
  `sentencepiece` itself gives for test strings.

Usage: pip install tokenizers sentencepiece gguf; python3 tools/dump_tokenizer_ids.py
"""
import io
import json
import os

import sentencepiece as spm
from gguf import GGUFReader
from tokenizers import Tokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
OUT = os.path.join(ROOT, "text")

LONG = ("The quick brown fox jumps over the lazy dog. 日本語 🦊 naïve café — 'quoted' \"text\"\n"
        "    for i in range(10): print(i ** 2)  # squares\n\t\t  \n") * 60

STRINGS = [
    "The quick brown fox jumps over the lazy dog.",
    "",
    " ",
    "Hello",
    " Hello world",
    "  two leading spaces",
    "trailing spaces   ",
    "a  b   c    d\t\te\n\nf\r\ng",
    "\n\n\n",
    "日本語のテキストです。中文也可以。",
    "한국어 텍스트",
    "Emoji: 👍🏽 👨‍👩‍👧 🦊🦊 ❤️",
    "Combining: e\u0301 a\u0308 n\u0303 Å",
    "naïve café résumé Straße",
    "def f(x):\n    return x ** 2  # square\n",
    "if (a && b) { return c->d[0]; }",
    "I'm sure they'll say it's fine, don't you think? We've SEEN IT'S done.",
    "Numbers: 1234567890 3.14159 -42 1e10 0x1F",
    "Mixed: <tag attr=\"v\">text</tag> &amp; 100%",
    "Ünïcödé ÀÉÎÕÜ ßøåæ",
    "Tab\tseparated\tvalues",
    "<s>hello</s> <|im_start|>user\nhi<|im_end|> <|start|>assistant<|channel|>final<|message|>ok<|return|>",
    LONG,
]


def dump_hf():
    out = {"strings": STRINGS, "tokenizers": {}}
    for flavour in ["llama", "qwen3", "gpt_oss"]:
        tok = Tokenizer.from_file(os.path.join(ROOT, flavour, "f32", "tokenizer.json"))
        cases = []
        for s in STRINGS:
            with_special = tok.encode(s, add_special_tokens=True).ids
            plain = tok.encode(s, add_special_tokens=False)
            cases.append({
                "ids": with_special,
                "ids_no_special": plain.ids,
                "tokens_no_special": plain.tokens if len(s) < 1000 else None,
                "decoded": tok.decode(with_special, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(with_special, skip_special_tokens=True),
            })
        out["tokenizers"][flavour] = cases
    return out


# Split regexes as the models' own tokenizer.json files hold them, and their BPE ignore_merges.
PRE_SPLITS = {
    "llama-bpe": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+", True),
    "qwen2": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+", False),
    "gpt-4o": ("|".join([
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]), True),
}


# Where the split regexes differ: digit runs, case runs, contractions, newlines, slashes.
PRE_EXTRA = [
    "0 00 000 0000 00000 1 12 123 1234 12345 2024-06-28 x=100000*99+0.5",
    "HELLOWorld CamelCase iPhone ABCdef XMLHttpRequest",
    "it's IT'S They'LL we'd You'Re",
    "def f():\n\n\n    return 1\n  \n\t\tpass\r\n",
    "a/b/c\n/ d //e ///\n",
    "self.assertEqual(x, 0)\n        self.x = None  # 10000 items",
]


def dump_pre_tokenizers():
    """A byte-level BPE trained on text split at whitespace only, so its merges cross the places
    where the split regexes differ; then ids under each regex."""
    from tokenizers import models, pre_tokenizers, trainers

    corpus = PRE_EXTRA * 3 + [SPM_TRAIN] * 2 + STRINGS[:21]
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<|endoftext|>", "<|im_start|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    trainer_tok.train_from_iterator(corpus, trainer)
    tj = json.loads(trainer_tok.to_str())
    vocab = tj["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
    meta = {
        "general.architecture": "qwen2",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3 if t.startswith("<|") and len(t) > 2 else 1 for t in tokens],
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.eos_token_id": 0,
    }
    strings = STRINGS[:-1] + PRE_EXTRA
    out = {"metadata": meta, "strings": strings, "ids": {}}
    for name, (regex, ignore_merges) in PRE_SPLITS.items():
        tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ]}
        tj["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        tj["model"]["ignore_merges"] = ignore_merges
        tok = Tokenizer.from_str(json.dumps(tj))
        out["ids"][name] = [tok.encode(s, add_special_tokens=False).ids for s in strings]
    return out


def field_value(field):
    v = field.contents()
    return v


def dump_gguf():
    files = {
        "llama": "llama/gguf-f32/llama-F32.gguf",
        "qwen3": "qwen3/gguf-q8_0/qwen3-Q8_0.gguf",
        "gpt_oss": "gpt_oss/gguf-mxfp4_moe/gpt_oss-MXFP4_MOE.gguf",
    }
    out = {}
    for flavour, rel in files.items():
        r = GGUFReader(os.path.join(ROOT, rel))
        meta = {k: field_value(f) for k, f in r.fields.items() if k.startswith("tokenizer.")}
        meta["general.architecture"] = r.fields["general.architecture"].contents()
        out[flavour] = meta
    return out


SPM_TRAIN = """The quick brown fox jumps over the lazy dog. A small language model reads text.
Tokenizers split words into pieces; the pieces are merged by score. Hello world, hello there!
She sells sea shells by the sea shore. The shells she sells are surely sea shells.
Peter Piper picked a peck of pickled peppers. How many pickled peppers did Peter Piper pick?
numbers like 12 and 345 appear; so do names like Alice, Bob and Carol.
    indented line with spaces and a colon: value
"""

SPM_STRINGS = [
    "Hello world",
    "hello there",
    "The quick brown fox",
    " leading space",
    "  two leading spaces",
    "a  b   c",
    "trailing ",
    "line one\nline two",
    "日本語",
    "café naïve",
    "emoji 🦊 end",
    "peppers picked by Peter",
    "unknownwordzzq",
    "",
    "x",
]


def dump_spm():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SPM_TRAIN.splitlines() * 4),
        model_writer=model,
        model_type="bpe",
        vocab_size=400,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        split_digits=False,
        character_coverage=1.0,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    n = sp.get_piece_size()
    tokens, scores, types = [], [], []
    for i in range(n):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        else:
            types.append(1)
    meta = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
    }
    cases = []
    for s in SPM_STRINGS:
        ids = sp.encode(s)
        cases.append({
            "text": s,
            "ids": ids,
            "pieces": [sp.id_to_piece(i) for i in ids],
            "decoded": sp.decode(ids),
        })
    return {"metadata": meta, "cases": cases}


def write(name, data, indent=1):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=indent)
        f.write("\n")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    write("hf_ids.json", dump_hf(), indent=None)
    write("gguf_tokenizers.json", dump_gguf())
    write("pre_tokenizer_ids.json", dump_pre_tokenizers(), indent=None)
    write("spm_llama.json", dump_spm())
