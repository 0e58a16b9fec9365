#!/usr/bin/env python3
"""Loads a Hugging Face model folder with transformers (as HF users do) and runs it.

Usage: check_hf.py DIR IDS OUT.safetensors

Loads the tokenizer (AutoTokenizer) and the model (AutoModelForCausalLM, float32, eager
attention), runs one forward pass over the comma-separated ids and saves the logits [n, vocab]
as tensor `logits`. Prints one JSON object (model class, vocabulary size, a tokenization of a
fixed sentence and its round trip); exits non-zero when loading fails or logits are not finite.
"""
import json
import sys

import numpy as np
import torch
from safetensors.numpy import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    folder, ids, out = sys.argv[1], [int(i) for i in sys.argv[2].split(",")], sys.argv[3]
    tok = AutoTokenizer.from_pretrained(folder)
    text = "The quick brown fox jumps over the lazy dog."
    enc = tok(text)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
    if not np.all(np.isfinite(logits)):
        sys.exit("non-finite logits")
    save_file({"logits": np.ascontiguousarray(logits)}, out)
    print(json.dumps({
        "class": type(model).__name__,
        "vocab": len(tok),
        "ids": enc,
        "decoded": tok.decode(enc, skip_special_tokens=True),
    }))


if __name__ == "__main__":
    main()
