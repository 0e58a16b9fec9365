#!/usr/bin/env python3
"""Reads an MLX model folder with mlx's own safetensors loader (`mlx.core.load`) and dequantizes
it with Apple's `mlx.core.dequantize`, checking it against config.json's quantization block.

Usage: check_mlx.py DIR [--reference HF_DIR [--mlx-quantize]] [--mlx-lm-logits IDS OUT.safetensors]

Every quantized module (X.weight uint32 + X.scales [+ X.biases]) must match the bits, group
size and mode config.json gives it (per-module entries override the global ones). With
--reference (a float Hugging Face folder of the same weights) each MLX tensor is compared with
the reference tensor in MLX layout (mixtral experts stacked; gpt-oss gate_up split and
transposed), reporting the relative RMSE; --mlx-quantize also reports the relative RMSE that
mlx's own `mx.quantize` reaches on the same reference (cast to bfloat16 first, as mlx-lm's
`convert --dtype bfloat16` does) with the same bits, group size and mode. --mlx-lm-logits loads
the folder with `mlx_lm.load` (as mlx-lm users do), upcasts every parameter to float32, runs one
forward pass over the comma-separated ids and saves the logits [n, vocab] to OUT (SafeTensors,
tensor `logits`). Prints one JSON object; exits non-zero on a mismatch.
"""
import argparse
import json
import os
import re
import sys

import mlx.core as mx
import numpy as np


def load_folder(d):
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(mx.load(os.path.join(d, f)))
    return out


def f64(a):
    """An mx array (any float dtype) as float64 numpy."""
    return np.array(a.astype(mx.float32)).astype(np.float64)


def load_reference(d):
    """Reference tensors in MLX names and layouts (float64)."""
    ref = {name: f64(v) for name, v in load_folder(d).items()}
    out = {}
    experts = {}
    for name, v in ref.items():
        m = re.match(r"(model\.layers\.\d+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight", name)
        if m:
            experts.setdefault((m.group(1), m.group(3)), {})[int(m.group(2))] = v
            continue
        m = re.match(r"(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)(_bias)?$", name)
        if m:
            base, kind, bias = m.group(1), m.group(2), m.group(3)
            if kind == "gate_up_proj" and bias:
                out[f"{base}.gate_proj.bias"], out[f"{base}.up_proj.bias"] = v[:, 0::2], v[:, 1::2]
            elif kind == "gate_up_proj":
                out[f"{base}.gate_proj.weight"] = v[:, :, 0::2].transpose(0, 2, 1)
                out[f"{base}.up_proj.weight"] = v[:, :, 1::2].transpose(0, 2, 1)
            elif bias:
                out[f"{base}.down_proj.bias"] = v
            else:
                out[f"{base}.down_proj.weight"] = v.transpose(0, 2, 1)
            continue
        out[name] = v
    names = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
    for (layer, w), per in experts.items():
        out[f"{layer}.block_sparse_moe.switch_mlp.{names[w]}.weight"] = np.stack([per[i] for i in sorted(per)])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--reference")
    ap.add_argument("--mlx-quantize", action="store_true")
    ap.add_argument("--mlx-lm-logits", nargs=2, metavar=("IDS", "OUT.safetensors"))
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.dir, "config.json")))
    q = config.get("quantization")
    if q is None or config.get("quantization_config") != q:
        sys.exit("config.json: 'quantization' missing or different from 'quantization_config'")
    raw = load_folder(args.dir)
    values = {}
    quantized = {}
    for name, w in raw.items():
        if not name.endswith(".weight") or f"{name[:-7]}.scales" not in raw:
            continue
        module = name[:-7]
        entry = q.get(module, {})
        if entry is False:
            sys.exit(f"{module}: stored quantized but config.json says it is not")
        bits = entry.get("bits", q["bits"])
        group = entry.get("group_size", q["group_size"])
        mode = entry.get("mode", "affine" if module in q else q.get("mode", "affine"))
        scales = raw[f"{module}.scales"]
        biases = raw.get(f"{module}.biases")
        if w.dtype != mx.uint32:
            sys.exit(f"{name}: packed weight is {w.dtype}, not uint32")
        cols = w.shape[-1] * 32 // bits
        if scales.shape[-1] * group != cols:
            sys.exit(f"{module}: scales {scales.shape} do not fit {cols} columns in groups of {group}")
        if (mode == "affine") != (biases is not None):
            sys.exit(f"{module}: mode {mode} with biases present = {biases is not None}")
        args_ = dict(group_size=group, bits=bits, mode=mode)
        deq = mx.dequantize(w, scales, biases if mode == "affine" else None, **args_)
        values[name] = f64(deq)
        quantized[module] = {"bits": bits, "group_size": group, "mode": mode}
    for name, v in raw.items():
        if name in values or name.endswith(".scales") or name.endswith(".biases"):
            continue
        values[name] = f64(v)
    report = {"quantized": quantized, "tensors": sorted(values)}
    bad = [n for n, v in values.items() if not np.all(np.isfinite(v))]
    if bad:
        sys.exit(f"non-finite values in {bad}")
    if args.reference:
        ref = load_reference(args.reference)
        rel = {}
        for n, v in values.items():
            if n not in ref:
                sys.exit(f"{n} is not in the reference")
            r = ref[n]
            if r.shape != v.shape:
                sys.exit(f"{n}: shape {v.shape} vs {r.shape} in the reference")
            rms = float(np.sqrt(np.mean(r * r))) or 1.0
            rel[n] = float(np.sqrt(np.mean((v - r) ** 2))) / rms
        missing = sorted(set(ref) - set(values))
        if missing:
            sys.exit(f"tensors missing from the MLX folder: {missing}")
        report["relative_rmse"] = rel
        if args.mlx_quantize:
            theirs = {}
            for module, qa in quantized.items():
                r = ref[f"{module}.weight"]
                w = mx.array(r.astype(np.float32)).astype(mx.bfloat16)
                parts = mx.quantize(w, group_size=qa["group_size"], bits=qa["bits"], mode=qa["mode"])
                biases = parts[2] if qa["mode"] == "affine" else None
                deq = f64(mx.dequantize(parts[0], parts[1], biases, **qa))
                rms = float(np.sqrt(np.mean(r * r))) or 1.0
                theirs[f"{module}.weight"] = float(np.sqrt(np.mean((deq - r) ** 2))) / rms
            report["mlx_relative_rmse"] = theirs
    if args.mlx_lm_logits:
        from mlx_lm import load

        model, _ = load(args.dir)
        model.set_dtype(mx.float32)
        ids = [int(i) for i in args.mlx_lm_logits[0].split(",")]
        logits = np.array(model(mx.array([ids]))[0].astype(mx.float32))
        if not np.all(np.isfinite(logits)):
            sys.exit("mlx-lm produced non-finite logits")
        from safetensors.numpy import save_file

        save_file({"logits": np.ascontiguousarray(logits, dtype=np.float32)}, args.mlx_lm_logits[1])
        report["mlx_lm_logits_shape"] = list(logits.shape)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
