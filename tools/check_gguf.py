#!/usr/bin/env python3
"""Reads a GGUF file with gguf-py (llama.cpp's own Python reader) and reports what it holds.

Usage: check_gguf.py FILE [--reference OTHER.gguf [--requantize]]

Prints one JSON object: architecture, scalar metadata, tensor types and shapes (ggml order),
tokenizer size, and with --reference the relative RMSE of every tensor against the same-named
tensor of OTHER (both dequantized by gguf-py); --requantize also quantizes OTHER's tensor with
gguf-py's own quantizer (bit-exact ports of llama.cpp's reference for BF16, Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1) and reports whether FILE holds the same bytes. Exits non-zero when the file cannot be read, a
tensor does not dequantize, or values are not finite.
"""
import argparse
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize, quantize


def tensors(path):
    reader = GGUFReader(path)
    out = {}
    for t in reader.tensors:
        values = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1)
        out[t.name] = (t.tensor_type.name, [int(x) for x in t.shape], values)
    return reader, out


REQUANTIZABLE = {"BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}


def requantize_matches(path, reference):
    """For each tensor of a type gguf-py can quantize: are our bytes gguf-py's bytes?"""
    ref = {t.name: t for t in GGUFReader(reference).tensors}
    out = {}
    for t in GGUFReader(path).tensors:
        if t.tensor_type.name not in REQUANTIZABLE:
            continue
        r = ref[t.name]
        row = int(r.shape[0])
        x = dequantize(r.data, r.tensor_type).astype(np.float32).reshape(-1, row)
        theirs = quantize(x, t.tensor_type)
        out[t.name] = bool(np.array_equal(np.asarray(theirs).view(np.uint8).reshape(-1), np.asarray(t.data).view(np.uint8).reshape(-1)))
    return out


def scalar_metadata(reader):
    meta = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or not field.types:
            continue
        if field.types[0].name == "ARRAY":
            meta[name] = {"array_len": len(field.data)}
        elif field.types[0].name == "STRING":
            meta[name] = bytes(field.parts[field.data[0]]).decode("utf-8")
        else:
            meta[name] = field.parts[field.data[0]].tolist()[0]
    return meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--reference")
    ap.add_argument("--requantize", action="store_true")
    args = ap.parse_args()
    reader, ts = tensors(args.file)
    report = {
        "architecture": scalar_metadata(reader).get("general.architecture"),
        "metadata": scalar_metadata(reader),
        "tensors": {n: {"type": t, "shape": s} for n, (t, s, _) in ts.items()},
    }
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is not None:
        report["tokens"] = len(tokens.data)
        report["first_tokens"] = [bytes(tokens.parts[i]).decode("utf-8") for i in tokens.data[:4]]
        merges = reader.fields.get("tokenizer.ggml.merges")
        report["merges"] = len(merges.data) if merges is not None else 0
    bad = [n for n, (_, _, v) in ts.items() if not np.all(np.isfinite(v))]
    if bad:
        print(json.dumps(report))
        sys.exit(f"non-finite values in {bad}")
    if args.reference:
        _, ref = tensors(args.reference)
        rel = {}
        for n, (_, shape, v) in ts.items():
            if n not in ref:
                sys.exit(f"{n} is not in the reference")
            r = ref[n][2]
            if r.shape != v.shape:
                sys.exit(f"{n}: {v.shape} values vs {r.shape} in the reference")
            rms = float(np.sqrt(np.mean(r * r))) or 1.0
            rel[n] = float(np.sqrt(np.mean((v - r) ** 2))) / rms
        report["relative_rmse"] = rel
        if args.requantize:
            report["bytes_equal_gguf_py"] = requantize_matches(args.file, args.reference)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
