"""Reference decodings of GGUF quant blocks for the GPU kernel tests, made by gguf-py.

For each block type: random blocks (scale fields kept finite and moderate) and the values that
gguf-py's `gguf.quants.dequantize` decodes them to. Output: tests/fixtures/gpu/ggml_blocks.safetensors
with `<TYPE>.blocks` (u8, [rows, row_bytes]) and `<TYPE>.values` (f32, [rows, cols]).

    pip install gguf safetensors numpy && python tools/gpu_block_reference.py
"""

import pathlib

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize
from safetensors.numpy import save_file

ROWS = 6
# type: (cols, block bytes, byte offsets of f16 scale fields)
TYPES = {
    "Q4_0": (96, 18, [0]),
    "Q4_1": (96, 20, [0, 2]),
    "Q5_0": (96, 22, [0]),
    "Q5_1": (96, 24, [0, 2]),
    "Q8_0": (96, 34, [0]),
    "MXFP4": (96, 17, []),
    "Q2_K": (512, 84, [80, 82]),
    "Q3_K": (512, 110, [108]),
    "Q4_K": (512, 144, [0, 2]),
    "Q5_K": (512, 176, [0, 2]),
    "Q6_K": (512, 210, [208]),
}


def main() -> None:
    rng = np.random.default_rng(20261121)
    out = {}
    for name, (cols, bb, halves) in TYPES.items():
        per_block = 256 if name.endswith("_K") else 32
        blocks = rng.integers(0, 256, size=(ROWS * cols // per_block, bb), dtype=np.uint8)
        for h in halves:
            scale = (0.01 + 0.02 * rng.random(blocks.shape[0])).astype(np.float16)
            blocks[:, h : h + 2] = scale.view(np.uint8).reshape(-1, 2)
        if name == "MXFP4":
            blocks[:, 0] = rng.integers(120, 132, size=blocks.shape[0])
        data = blocks.reshape(ROWS, -1)
        values = dequantize(data, getattr(Q, name)).astype(np.float32).reshape(ROWS, cols)
        assert np.isfinite(values).all(), name
        out[f"{name}.blocks"] = np.ascontiguousarray(data)
        out[f"{name}.values"] = np.ascontiguousarray(values)
    path = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/gpu/ggml_blocks.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(out, str(path))
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
