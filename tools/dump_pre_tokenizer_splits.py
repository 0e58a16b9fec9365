#!/usr/bin/env python3
"""Reference splits for minerva-text's table of GGUF `tokenizer.ggml.pre` names, written to
tests/fixtures/text/pre_tokenizer_splits.json.

The names and expressions come from llama.cpp's own source, not from Minerva's table:
- src/llama-vocab.cpp, the vocabulary loader: which `tokenizer.ggml.pre` names select which
  LLAMA_VOCAB_PRE_TYPE_*, and whether the name sets ignore_merges or escape_whitespaces;
- the same file, the `llm_tokenizer_bpe` constructor: the list of split expressions of each type
  (each later expression splits the pieces the earlier ones produced) and whether the type
  byte-encodes its pieces (GPT-2 byte-level) or keeps raw UTF-8;
- src/unicode.cpp: Kimi K2's pattern, which llama.cpp runs as hand-written code behind the
  trigger expression `\\p{Han}+`.

A few llama.cpp expressions are not what the Hugging Face `tokenizers` package (Oniguruma) should
run; REWRITES below says which and why, and the JSON records both forms. Every distinct list of
expressions to run is then built as `tokenizers` pre-tokenizers, the way a tokenizer.json holds
them: Sequence([Split(Regex(e), "isolated") for e in exprs] + [ByteLevel(add_prefix_space=False,
use_regex=False)]) (no ByteLevel for the raw UTF-8 types), and `pre_tokenize_str` is recorded for
each test string.

Usage: pip install tokenizers
       python3 tools/dump_pre_tokenizer_splits.py --llama-cpp PATH/TO/llama.cpp --commit SHA
"""
import argparse
import hashlib
import json
import os
import re
import unicodedata

import tokenizers
from tokenizers import Regex, pre_tokenizers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "text",
                   "pre_tokenizer_splits.json")

STRINGS = [
    "Numbers: 7 42 1234567 3.14159 -0.5 1e10 2024-06-28 100000000 x=12345*99",
    "I'm sure you'll see it's fine; DON'T panic, we've SEEN THEY'RE done. O'Neil's",
    "日本語の文章を書きます。中文也可以，对吧？「引用」です",
    "한국어 텍스트와 숫자 123개",
    "Emoji: 🦊👍🏽 👨\u200d👩\u200d👧 ❤️ 🦊🦊",
    "a  b   c    d\t\te\n\nf\r\ng   \n\n\n  \t end   ",
    "def f(x):\n    return x ** 2  # square\n\tif (a && b) { c->d[0] = \"s\"; }\n",
    "naïve café résumé Straße ÀÉÎÕÜ aÉ Éa e\u0301 n\u0303",
    "Привет, мир! مرحبا بالعالم 123 नमस्ते दुनिया",
    "HELLOWorld CamelCase iPhone XMLHttpRequest snake_case kebab-case a/b//c",
    "<sentinel:12> IMGIMGABCZ <tag attr=\"v\">text</tag> &amp; 100% $5+3<=8^2~|x|`q`",
    "  leading spaces and trailing\t",
    "...!!! ?? 。，、 …  (paren) [bracket] 'quote' \"dq\"",
    "",
]

# llama.cpp expressions that Oniguruma should not run as written, with what runs instead and why.
# The replacement is taken from llama.cpp's source where it quotes one.
K2_TRIGGER = "\\p{Han}+"
AFMOE_TRIGGER = "\\p{AFMoE_digits}"
# What llama.cpp's AFMoE digit code does (see afmoe_reference), as a regex.
AFMOE_DIGITS = "\\P{N}*\\p{N}{1,3}(?=(?:\\p{N}{3})*(?!\\p{N}))"
WHY_ORIGINAL = ("llama.cpp's std::regex has no \\p{Lu}/\\p{Ll} classes, so it rewrote the "
                "tokenizer.json regex with ((?=[\\p{L}])([^a-z])) stand-ins that leave out "
                "combining marks (\\p{M}) and take non-ASCII lowercase letters for uppercase; "
                "Oniguruma has the classes, so the original regex that llama.cpp quotes runs")
ORIGINAL_FOR = ["GPT4O", "TEKKEN"]


def cpp_tokens(src):
    """Splits C++ source into ('str', value), ('comment', text) and ('code', text) tokens."""
    out, i, n, code = [], 0, len(src), []

    def flush():
        if code:
            out.append(("code", "".join(code)))
            code.clear()

    escapes = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
    while i < n:
        if src.startswith("//", i):
            flush()
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(("comment", src[i + 2:j]))
            i = j
        elif src.startswith("/*", i):
            flush()
            j = src.index("*/", i)
            out.append(("comment", src[i + 2:j]))
            i = j + 2
        elif src[i] == '"':
            flush()
            s, i = cpp_string(src, i + 1, escapes)
            out.append(("str", s))
        elif src[i] == "'":
            j = i + 1
            while src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            code.append(src[i:j + 1])
            i = j + 1
        else:
            code.append(src[i])
            i += 1
    flush()
    return out


def cpp_string(src, i, escapes):
    s = []
    while src[i] != '"':
        if src[i] == "\\":
            s.append(escapes[src[i + 1]])
            i += 2
        else:
            s.append(src[i])
            i += 1
    return "".join(s), i + 1


def between(src, start, end):
    a = src.index(start)
    return src[a:src.index(end, a)]


def read_pre_types(vocab_cpp):
    """LLAMA_VOCAB_PRE_TYPE_* (without the prefix) -> {exprs, byte_encode, original}."""
    body = between(vocab_cpp, "llm_tokenizer_bpe(const llama_vocab & vocab) {",
                   "std::vector<std::string> regex_exprs;")
    types, labels, cur = {}, [], None
    in_list, want_original = False, False
    for kind, text in cpp_tokens(body):
        if kind == "comment":
            if "original regex from tokenizer.json" in text:
                want_original = True
            elif want_original and text.strip().startswith('"'):
                cur = cur or {"exprs": [], "byte_encode": True}
                cur.setdefault("original", []).append(cpp_string(text.strip(), 1, {
                    "n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"'})[0])
                want_original = False
            continue
        if kind == "str":
            if in_list:
                cur["exprs"].append(text)
            continue
        for m in re.finditer(r"case LLAMA_VOCAB_PRE_TYPE_(\w+):|default:|regex_exprs = \{|\}|"
                             r"byte_encode = false|break;", text):
            tok = m.group(0)
            if m.group(1) or tok == "default:":
                labels.append(m.group(1) or "DEFAULT")
                cur = cur or {"exprs": [], "byte_encode": True}
            elif tok.startswith("regex_exprs"):
                in_list = True
            elif tok == "}":
                in_list = False
            elif tok == "byte_encode = false":
                cur["byte_encode"] = False
            elif tok == "break;":
                for label in labels:
                    types[label] = cur
                labels, cur, want_original = [], None, False
    if labels:  # `default:` is last and may end without break
        for label in labels:
            types[label] = cur
    return types


def read_names(vocab_cpp):
    """tokenizer.ggml.pre name -> {type, ignore_merges, escape_whitespaces}, in llama.cpp's order."""
    block = between(vocab_cpp, "if (tokenizer_pre.empty())", "} else if (type == LLAMA_VOCAB_TYPE_SPM)")
    block = "\n".join(line.split("//")[0] for line in block.splitlines())
    names = {}
    for cond, body in re.findall(r"if\s*\(((?:[^(){}]|\([^()]*\))*)\)\s*\{([^{}]*)\}", block):
        kind = re.search(r"pre_type = LLAMA_VOCAB_PRE_TYPE_(\w+);", body).group(1)
        for name in re.findall(r'tokenizer_pre == "([^"]+)"', cond):
            names[name] = {
                "type": kind,
                "ignore_merges": "ignore_merges = true" in body,
                "escape_whitespaces": "escape_whitespaces = true" in body,
            }
    return names


def read_k2(unicode_cpp):
    m = re.search(r"// K2 system regex patterns \(from tokenization_kimi.py\):\n// (.*)\n", unicode_cpp)
    return m.group(1)


def afmoe_reference(text):
    """llama.cpp's AFMoE digit code, restated: each digit run gives its first (length mod 3)
    digits, if any, then groups of three, and each piece takes the text before it since the last
    piece; the text after the last run is a piece. Pieces as (start, end) character offsets."""
    if not text:
        return []
    digit = lambda c: unicodedata.category(c).startswith("N")
    ends, pos = [], 0
    while pos < len(text):
        if not digit(text[pos]):
            pos += 1
            continue
        start = pos
        while pos < len(text) and digit(text[pos]):
            pos += 1
        first = start + (pos - start) % 3
        ends += ([first] if first > start else []) + list(range(first + 3, pos + 1, 3))
    if not ends or ends[-1] < len(text):
        ends.append(len(text))
    return list(zip([0] + ends[:-1], ends))


def build(exprs, byte_level):
    steps = [pre_tokenizers.Split(Regex(e), "isolated") for e in exprs]
    if byte_level:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False))
    return pre_tokenizers.Sequence(steps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (holds src/llama-vocab.cpp)")
    ap.add_argument("--commit", required=True, help="the llama.cpp commit of that tree, for the record")
    args = ap.parse_args()
    paths = {f: os.path.join(args.llama_cpp, "src", f) for f in ["llama-vocab.cpp", "unicode.cpp"]}
    text = {f: open(p, encoding="utf-8").read() for f, p in paths.items()}
    types = read_pre_types(text["llama-vocab.cpp"])
    names = read_names(text["llama-vocab.cpp"])

    rewrites = [
        {"llama_cpp": K2_TRIGGER, "onig": read_k2(text["unicode.cpp"]),
         "why": "llama.cpp runs hand-written code for Kimi K2's pattern behind this trigger; the "
                "pattern itself, as llama.cpp quotes it from tokenization_kimi.py, runs instead"},
        {"llama_cpp": AFMOE_TRIGGER, "onig": AFMOE_DIGITS,
         "why": "not a regex: llama.cpp's trigger for hand-written digit grouping (a run's first "
                "length-mod-3 digits, then threes, each with the text before it); an equivalent "
                "regex runs instead"},
    ]
    for kind in ORIGINAL_FOR:
        t = types[kind]
        assert len(t["exprs"]) == 1 and len(t["original"]) == 1, kind
        rewrites.append({"llama_cpp": t["exprs"][0], "onig": t["original"][0], "why": WHY_ORIGINAL})
    onig = {r["llama_cpp"]: r["onig"] for r in rewrites}

    # The AFMoE stand-in splits digits as llama.cpp's code does.
    afmoe = build([AFMOE_DIGITS], False)
    for s in STRINGS:
        assert [o for _, o in afmoe.pre_tokenize_str(s)] == afmoe_reference(s), s

    groups, group_of, splits = [], {}, []
    out_names = {}
    for name, info in names.items():
        t = types[info["type"]]
        run = [onig.get(e, e) for e in t["exprs"]]
        key = (tuple(run), t["byte_encode"])
        if key not in group_of:
            group_of[key] = len(groups)
            pre = build(run, t["byte_encode"])
            groups.append({"exprs": run, "byte_level": t["byte_encode"],
                           "splits": [[w for w, _ in pre.pre_tokenize_str(s)] for s in STRINGS]})
        out_names[name] = {
            "llama_cpp_type": info["type"],
            "exprs": t["exprs"],
            "ignore_merges": info["ignore_merges"],
            "byte_level": t["byte_encode"],
            "escape_spaces": info["escape_whitespaces"],
            "run": group_of[key],
        }
    # A missing name is llama.cpp's DEFAULT type, which the name "default" also selects.
    assert names["default"]["type"] == "DEFAULT"

    data = {
        "provenance": {
            "llama_cpp_commit": args.commit,
            "llama_cpp_files_sha256": {f: hashlib.sha256(t.encode()).hexdigest() for f, t in text.items()},
            "tokenizers_version": tokenizers.__version__,
            "generator": "tools/dump_pre_tokenizer_splits.py",
        },
        "strings": STRINGS,
        "rewrites": rewrites,
        "names": out_names,
        "runs": groups,
    }
    write(data)
    print(f"{len(out_names)} names, {len(types)} types, {len(groups)} distinct runs -> {OUT}")


def write(data):
    """JSON with one line per name, rewrite and split list, so diffs stay readable."""
    dump = lambda v: json.dumps(v, ensure_ascii=False)
    lines = ["{"]
    lines.append(f' "provenance": {json.dumps(data["provenance"], indent=2)},'.replace("\n", "\n "))
    lines.append(f' "strings": [\n  ' + ",\n  ".join(dump(s) for s in data["strings"]) + "\n ],")
    lines.append(' "rewrites": [\n  ' + ",\n  ".join(dump(r) for r in data["rewrites"]) + "\n ],")
    lines.append(' "names": {\n  ' + ",\n  ".join(f"{dump(k)}: {dump(v)}" for k, v in data["names"].items())
                 + "\n },")
    runs = []
    for g in data["runs"]:
        runs.append('  {"exprs": ' + dump(g["exprs"]) + ', "byte_level": ' + dump(g["byte_level"])
                    + ', "splits": [\n   ' + ",\n   ".join(dump(s) for s in g["splits"]) + "\n  ]}")
    lines.append(' "runs": [\n' + ",\n".join(runs) + "\n ]")
    lines.append("}")
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    json.loads(open(OUT, encoding="utf-8").read())


if __name__ == "__main__":
    main()
