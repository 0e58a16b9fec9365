#!/usr/bin/env python3
"""Reference dequantization of every GGUF fixture by gguf-py (the peer implementation).

For each GGUF under tests/fixtures (and a small synthetic GGUF written here that holds one
tensor of every block type the Rust decoders support), writes tests/fixtures/dequant/<name>.json
with, per tensor: ggml type, shape (outermost first), element count, SHA-256 of the
little-endian float32 values, the first 8 values and their sum; and per metadata key: its GGUF
type and value (arrays as length and first items).

Usage: pip install gguf numpy; python3 tools/dump_gguf_dequant.py
"""

import hashlib
import json
import pathlib

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
OUT = FIXTURES / "dequant"
SYNTHETIC = OUT / "synthetic-blocks.gguf"

# Byte offsets of the f16 scales in each block (randomized bytes there would give inf/nan).
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q8_1: [0, 2],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


# gguf-py 0.19 still lists Q8_1 as 40-byte blocks (ggml's old layout with f32 d and s); ggml's
# block_q8_1 is 36 bytes (f16 d, f16 s, i8[32]), which is what GGUF files hold. gguf-py's writer
# and reader both size tensors from this table, so correct it for this script.
gguf.GGML_QUANT_SIZES[T.Q8_1] = (32, 36)


def dequant_q8_1_q8_k(data: np.ndarray, qtype: T) -> np.ndarray:
    """gguf-py has no dequantizer for these two (llama.cpp uses them for activations only);
    both are a scale times int8 values: Q8_1 {f16 d, f16 s, i8[32]}, Q8_K {f32 d, i8[256], i16[16]}."""
    blocks = data.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])
    if qtype == T.Q8_1:
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        q = blocks[:, 4:36].copy().view(np.int8).astype(np.float32)
    else:
        d = blocks[:, 0:4].copy().view(np.float32)
        q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(-1)


def write_synthetic(path: pathlib.Path) -> None:
    rng = np.random.default_rng(20261121)
    w = gguf.GGUFWriter(str(path), "synthetic")
    # One key of each value type, and a nested array.
    w.add_key_value("test.u8", 200, gguf.GGUFValueType.UINT8)
    w.add_key_value("test.i8", -100, gguf.GGUFValueType.INT8)
    w.add_key_value("test.u16", 60000, gguf.GGUFValueType.UINT16)
    w.add_key_value("test.i16", -30000, gguf.GGUFValueType.INT16)
    w.add_key_value("test.u32", 4000000000, gguf.GGUFValueType.UINT32)
    w.add_key_value("test.i32", -2000000000, gguf.GGUFValueType.INT32)
    w.add_key_value("test.f32", 1.5, gguf.GGUFValueType.FLOAT32)
    w.add_key_value("test.bool", True, gguf.GGUFValueType.BOOL)
    w.add_key_value("test.string", "grüße", gguf.GGUFValueType.STRING)
    w.add_key_value("test.u64", 2**40 + 3, gguf.GGUFValueType.UINT64)
    w.add_key_value("test.i64", -(2**40), gguf.GGUFValueType.INT64)
    w.add_key_value("test.f64", 0.1, gguf.GGUFValueType.FLOAT64)
    w.add_key_value("test.strings", ["a", "bc", ""], gguf.GGUFValueType.ARRAY)
    w.add_key_value("test.nested", [[1, 2], [3]], gguf.GGUFValueType.ARRAY)
    types = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q8_1, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K,
             T.Q6_K, T.Q8_K, T.MXFP4]
    for qt in types:
        bsize, bbytes = gguf.GGML_QUANT_SIZES[qt]
        rows, n_blocks = 2, 256 // bsize
        raw = rng.integers(0, 256, size=(rows, n_blocks, bbytes), dtype=np.uint8)
        for off in F16_FIELDS.get(qt, []):
            scale = rng.uniform(-0.05, 0.05, size=(rows, n_blocks)).astype(np.float16)
            raw[:, :, off:off + 2] = scale.view(np.uint8).reshape(rows, n_blocks, 2)
        if qt == T.Q8_K:
            raw[:, :, 0:4] = rng.uniform(-0.05, 0.05, (rows, n_blocks)).astype(np.float32).view(np.uint8).reshape(rows, n_blocks, 4)
        if qt == T.MXFP4:
            raw[:, :, 0] = rng.integers(100, 140, size=(rows, n_blocks), dtype=np.uint8)
        w.add_tensor(f"random.{qt.name}", raw.reshape(rows, -1), raw_dtype=qt)
        # Where gguf-py can quantize, also store its quantization of real-valued data.
        values = rng.normal(0, 1, size=(rows, n_blocks * bsize)).astype(np.float32)
        try:
            packed = quantize(values, qt)
        except NotImplementedError:
            continue
        w.add_tensor(f"quantized.{qt.name}", packed, raw_dtype=qt)
    w.add_tensor("plain.F16", rng.normal(0, 1, size=(3, 8)).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def meta_value(field):
    types = [int(t) for t in field.types]
    try:
        v = field.contents()
    except Exception:  # nested arrays: gguf-py's reader does not rebuild them
        v = None
    if isinstance(v, list):
        return {"types": types, "len": len(v), "head": v[:4]}
    return {"types": types, "value": v}


def dump(path: pathlib.Path) -> dict:
    r = gguf.GGUFReader(str(path))
    tensors = {}
    for t in r.tensors:
        qt = T(int(t.tensor_type))
        if qt in (T.Q8_1, T.Q8_K):
            values = dequant_q8_1_q8_k(np.asarray(t.data), qt)
            by = "numpy in this script (gguf-py has no dequantizer for this type)"
        else:
            values = dequantize(t.data, qt)
            by = "gguf.quants.dequantize"
        values = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
        shape = [int(d) for d in reversed(t.shape.tolist())]
        assert values.size == int(np.prod(shape))
        tensors[t.name] = {
            "type": qt.name,
            "shape": shape,
            "elements": int(values.size),
            "sha256": hashlib.sha256(values.tobytes()).hexdigest(),
            "first": [float(x) for x in values[:8]],
            "sum": float(values.astype(np.float64).sum()),
            "dequantized_by": by,
        }
    metadata = {k: meta_value(f) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    return {"gguf": str(path.relative_to(FIXTURES)), "gguf_py": gguf.__version__ if hasattr(gguf, "__version__") else "",
            "tensors": tensors, "metadata": metadata}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write_synthetic(SYNTHETIC)
    for path in sorted(FIXTURES.rglob("*.gguf")):
        name = str(path.relative_to(FIXTURES)).replace("/", "__").removesuffix(".gguf") + ".json"
        (OUT / name).write_text(json.dumps(dump(path), ensure_ascii=False) + "\n")
        print(OUT / name)


if __name__ == "__main__":
    main()
