"""Reference dequantization of MLX packs by mlx itself (mlx.core.dequantize, CPU).

Writes, under tests/fixtures/dequant/:
  mlx-llama-4bit.json   every quantized tensor of tests/fixtures/llama/mlx-4bit
  mlx-synthetic/        a tiny MLX folder made with mlx.core.quantize: every affine bits (2,3,4,5,6,8)
                        x group (32,64,128), mxfp4, scales/biases in bf16, f16 and f32, a stacked 3-D pack,
                        per-module overrides in config.json (and one module marked false)
  mlx-synthetic.json    the dequantized tensors of that folder
Each JSON entry: logical name, shape, SHA-256 of the f32 little-endian bytes, the first values, the sum.

Run: python tools/dump_mlx_dequant.py   (needs `pip install "mlx[cpu]" numpy`)
"""

import hashlib
import json
import os

import mlx.core as mx
import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "dequant")


def module_quant(config, module):
    q = config.get("quantization") or config.get("quantization_config")
    entry = q.get(module, None)
    if entry is False:
        return None
    if isinstance(entry, dict):
        mode = entry.get("mode", "affine")
        return mode, entry.get("bits", 4), entry.get("group_size", 32 if mode == "mxfp4" else 64)
    mode = q.get("mode", "affine")
    return mode, q["bits"], q["group_size"]


def describe(name, values):
    values = np.asarray(values, dtype=np.float32)
    raw = values.astype("<f4").tobytes()
    d = {
        "name": name,
        "shape": list(values.shape),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "first": [float(v) for v in values.reshape(-1)[:16]],
        "sum": float(values.astype(np.float64).sum()),
    }
    return d


def dump_folder(folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    tensors = {}
    for name in sorted(os.listdir(folder)):
        if name == "model.safetensors" or (name.startswith("model-") and name.endswith(".safetensors")):
            tensors.update(mx.load(os.path.join(folder, name)))
    out = []
    for name in sorted(tensors):
        if not name.endswith(".scales"):
            continue
        module = name[: -len(".scales")]
        mode, bits, group = module_quant(config, module)
        w = tensors[module + ".weight"]
        scales = tensors[name]
        if mode == "mxfp4":
            deq = mx.dequantize(w, scales, None, group_size=group, bits=bits, mode="mxfp4")
            deq = deq.astype(mx.float32)
        else:
            biases = tensors[module + ".biases"].astype(mx.float32)
            deq = mx.dequantize(w, scales.astype(mx.float32), biases, group_size=group, bits=bits, mode="affine")
        mx.eval(deq)
        assert deq.dtype == mx.float32
        out.append(describe(module + ".weight", np.array(deq)))
    return out


def make_synthetic(folder):
    rng = np.random.default_rng(7)
    os.makedirs(folder, exist_ok=True)
    quant = {"group_size": 64, "bits": 4, "mode": "affine"}
    arrays = {}
    scale_types = [mx.bfloat16, mx.float16, mx.float32]
    k = 0
    for bits in (2, 3, 4, 5, 6, 8):
        for group in (32, 64, 128):
            module = f"model.packs.b{bits}_g{group}"
            w = mx.array(rng.normal(0, 0.05, size=(3, 256)).astype(np.float32))
            wq, s, b = mx.quantize(w, group_size=group, bits=bits, mode="affine")
            st = scale_types[k % 3]
            k += 1
            arrays[module + ".weight"] = wq
            arrays[module + ".scales"] = s.astype(st)
            arrays[module + ".biases"] = b.astype(st)
            if (bits, group) != (4, 64):
                quant[module] = {"group_size": group, "bits": bits}
    # A stacked expert pack [n_expert, out, in], global settings.
    w = mx.array(rng.normal(0, 0.05, size=(2, 3, 128)).astype(np.float32))
    wq, s, b = mx.quantize(w, group_size=64, bits=4, mode="affine")
    arrays["model.experts.switch.weight"] = wq
    arrays["model.experts.switch.scales"] = s.astype(mx.bfloat16)
    arrays["model.experts.switch.biases"] = b.astype(mx.bfloat16)
    # mxfp4, as mlx-lm marks it per module.
    for name, shape in (("model.packs.mxfp4", (4, 128)), ("model.experts.mxfp4", (2, 3, 64))):
        w = mx.array(rng.normal(0, 0.5, size=shape).astype(np.float32))
        wq, s = mx.quantize(w, group_size=32, bits=4, mode="mxfp4")
        arrays[name + ".weight"] = wq
        arrays[name + ".scales"] = s
        quant[name] = {"group_size": 32, "bits": 4, "mode": "mxfp4"}
    # An unquantized linear with a Linear bias, marked false.
    arrays["model.plain.weight"] = mx.array(rng.normal(0, 0.05, size=(2, 32)).astype(np.float32)).astype(mx.bfloat16)
    arrays["model.plain.bias"] = mx.array(rng.normal(0, 0.05, size=(2,)).astype(np.float32)).astype(mx.bfloat16)
    quant["model.plain"] = False
    mx.save_safetensors(os.path.join(folder, "model.safetensors"), arrays, metadata={"format": "mlx"})
    config = {"model_type": "synthetic", "quantization": quant, "quantization_config": quant}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write(name, entries):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump({"made_by": f"mlx {mx.__version__} mlx.core.dequantize (scales/biases upcast to float32)", "tensors": entries}, f, indent=1)
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    write("mlx-llama-4bit.json", dump_folder(os.path.join(FIX, "llama", "mlx-4bit")))
    synth = os.path.join(OUT, "mlx-synthetic")
    make_synthetic(synth)
    write("mlx-synthetic.json", dump_folder(synth))


if __name__ == "__main__":
    main()
