"""A tiny gpt-oss checkpoint in the Hugging Face MXFP4 layout, with transformers' own dequantization.

Takes layer 0's expert weights (first two experts) of tests/fixtures/gpt_oss/f32, quantizes them to
MXFP4 in numpy following the OCP Microscaling spec (per 32 values along the input dimension: shared
exponent floor(log2(max|v|)) - 2, stored as E8M0 = exponent + 127; each value / 2^exponent rounded to
the nearest E2M1 value, ties to the even code, saturating at 6), and stores them as the published
gpt-oss checkpoints do:
  X_blocks  u8 [experts, out, in/32, 16]   byte i of a block: element 2i low nibble, 2i+1 high nibble
  X_scales  u8 [experts, out, in/32]
(the dense HF tensors are [experts, in, out]; the packed ones are transposed to rows = out).

Writes tests/fixtures/dequant/hf-mxfp4/{model.safetensors,config.json} and
tests/fixtures/dequant/hf-mxfp4.json: for each logical tensor X, its shape [experts, out, in], the
SHA-256 of transformers.integrations.mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=float32)
(transposed back from transformers' [experts, in, out] to [experts, out, in]) as f32 little-endian
bytes, the first values and the sum.

Run: python tools/make_hf_mxfp4.py   (needs numpy, safetensors, torch, transformers)
"""

import hashlib
import json
import os

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file, save_file
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "tests", "fixtures", "gpt_oss", "f32")
OUT = os.path.join(ROOT, "tests", "fixtures", "dequant")
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


def quantize(w):
    """w: [experts, rows, in] float → (blocks u8 [experts, rows, in/32, 16], scales u8 [experts, rows, in/32])."""
    *lead, n = w.shape
    v = w.astype(np.float64).reshape(*lead, n // 32, 32)
    amax = np.abs(v).max(axis=-1, keepdims=True)
    exp = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 2, -127)
    exp = np.clip(exp, -127, 127)
    scaled = np.abs(v) / np.exp2(exp)
    # Nearest E2M1 magnitude; on a tie the even code (mantissa bit 0) wins.
    dist = np.abs(scaled[..., None] - E2M1)
    best = dist.min(axis=-1, keepdims=True)
    candidates = np.where(np.isclose(dist, best, rtol=0, atol=1e-12), np.arange(8), 99)
    even_first = np.where(candidates % 2 == 0, candidates, candidates + 100)
    code = np.take_along_axis(candidates, np.argmin(even_first, axis=-1)[..., None], axis=-1)[..., 0]
    code = code.astype(np.uint8) | np.where(np.signbit(v), 8, 0).astype(np.uint8)
    code = np.where(code == 8, 0, code).astype(np.uint8)  # -0 is stored as +0
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).astype(np.uint8)
    scales = (exp[..., 0] + 127).astype(np.uint8)
    return blocks, scales


def main():
    dense = load_file(os.path.join(SRC, "model.safetensors"))
    prefix = "model.layers.0.mlp.experts."
    tensors, entries = {}, []
    for name in ("gate_up_proj", "down_proj"):
        w = dense[prefix + name][:2]  # [experts, in, out]
        rows_major = np.ascontiguousarray(np.swapaxes(w, 1, 2))  # [experts, out, in]
        blocks, scales = quantize(rows_major)
        tensors[prefix + name + "_blocks"] = blocks
        tensors[prefix + name + "_scales"] = scales
        ref = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32)
        ref = ref.transpose(1, 2).contiguous().numpy()  # back to [experts, out, in]
        assert ref.shape == rows_major.shape
        err = np.abs(ref - rows_major).max() / np.abs(rows_major).max()
        assert err < 0.26, err  # half an E2M1 step at most
        entries.append({
            "name": prefix + name,
            "shape": list(ref.shape),
            "sha256": hashlib.sha256(ref.astype("<f4").tobytes()).hexdigest(),
            "first": [float(x) for x in ref.reshape(-1)[:16]],
            "sum": float(ref.astype(np.float64).sum()),
        })
    folder = os.path.join(OUT, "hf-mxfp4")
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(SRC, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(OUT, "hf-mxfp4.json"), "w") as f:
        json.dump({"made_by": f"transformers {transformers.__version__} convert_moe_packed_tensors (float32), transposed to [experts, out, in]", "tensors": entries}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
