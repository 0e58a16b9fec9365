#!/usr/bin/env python3
"""Loads a tokenizer.json with the Hugging Face `tokenizers` package and tokenizes strings.

Usage: check_tokenizer_json.py TOKENIZER.json STRINGS.json

STRINGS.json is a JSON list of strings. Prints one JSON object: for each string the ids
(`encode(s, add_special_tokens=False)`) and their decoding. Exits non-zero when the file does
not load.
"""
import json
import sys

from tokenizers import Tokenizer


def main():
    tok = Tokenizer.from_file(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        strings = json.load(f)
    ids = [tok.encode(s, add_special_tokens=False).ids for s in strings]
    print(json.dumps({
        "ids": ids,
        "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids],
    }))


if __name__ == "__main__":
    main()
