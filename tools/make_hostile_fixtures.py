"""Writes tests/fixtures/hostile: a tiny valid llama in GGUF (gguf-py) and as a Hugging Face
folder (safetensors), and copies of them damaged the way the mutation campaign found damage
that used to crash, hang or pass silently. Each case is small; the tests name what each must
give. Run from the repository root: python3 tools/make_hostile_fixtures.py"""

import json
import shutil
from pathlib import Path

import numpy as np
import gguf
from safetensors.numpy import save_file

ROOT = Path("tests/fixtures")
OUT = ROOT / "hostile"
SOURCE_GGUF = ROOT / "llama/gguf-q4_0/llama-Q4_0.gguf"
SOURCE_FOLDER = ROOT / "llama/f16"

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, CTX = 8, 2, 2, 1, 16, 512, 64
HEAD_DIM = HIDDEN // HEADS
rng = np.random.default_rng(7)


def weights():
    """name (HF), shape (outermost first) → f32 values, and the GGUF name of each."""
    out = [("model.embed_tokens.weight", "token_embd.weight", (VOCAB, HIDDEN)),
           ("model.norm.weight", "output_norm.weight", (HIDDEN,)),
           ("lm_head.weight", "output.weight", (VOCAB, HIDDEN))]
    per_layer = [("input_layernorm", "attn_norm", (HIDDEN,)),
                 ("self_attn.q_proj", "attn_q", (HEADS * HEAD_DIM, HIDDEN)),
                 ("self_attn.k_proj", "attn_k", (KV_HEADS * HEAD_DIM, HIDDEN)),
                 ("self_attn.v_proj", "attn_v", (KV_HEADS * HEAD_DIM, HIDDEN)),
                 ("self_attn.o_proj", "attn_output", (HIDDEN, HEADS * HEAD_DIM)),
                 ("post_attention_layernorm", "ffn_norm", (HIDDEN,)),
                 ("mlp.gate_proj", "ffn_gate", (FFN, HIDDEN)),
                 ("mlp.up_proj", "ffn_up", (FFN, HIDDEN)),
                 ("mlp.down_proj", "ffn_down", (HIDDEN, FFN))]
    for l in range(LAYERS):
        for hf, gg, shape in per_layer:
            out.append((f"model.layers.{l}.{hf}.weight", f"blk.{l}.{gg}.weight", shape))
    return [(hf, gg, (rng.standard_normal(shape) * 0.2).astype(np.float32)) for hf, gg, shape in out]


WEIGHTS = weights()


def write_gguf(path, overrides=None):
    """The tiny llama as GGUF; `overrides` maps a llama.* key suffix to (value, type)."""
    overrides = overrides or {}
    src = gguf.GGUFReader(SOURCE_GGUF)
    w = gguf.GGUFWriter(str(path), "llama")
    keys = {
        "context_length": (CTX, gguf.GGUFValueType.UINT32),
        "embedding_length": (HIDDEN, gguf.GGUFValueType.UINT32),
        "block_count": (LAYERS, gguf.GGUFValueType.UINT32),
        "feed_forward_length": (FFN, gguf.GGUFValueType.UINT32),
        "attention.head_count": (HEADS, gguf.GGUFValueType.UINT32),
        "attention.head_count_kv": (KV_HEADS, gguf.GGUFValueType.UINT32),
        "attention.layer_norm_rms_epsilon": (1e-5, gguf.GGUFValueType.FLOAT32),
        "rope.freq_base": (10000.0, gguf.GGUFValueType.FLOAT32),
        "vocab_size": (VOCAB, gguf.GGUFValueType.UINT32),
    }
    keys.update(overrides)
    for k, (v, t) in keys.items():
        if v is not None:
            w.add_key_value(f"llama.{k}", v, t)
    for field in src.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        t = field.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                vals = [field.parts[i][0].item() for i in field.data]
            w.add_key_value(field.name, vals, t, sub_type=sub)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(field.name, bytes(field.parts[field.data[0]]).decode("utf-8"), t)
        else:
            w.add_key_value(field.name, field.parts[field.data[0]][0].item(), t)
    for _, name, data in WEIGHTS:
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_folder(path, config_edit=None):
    """The tiny llama as a Hugging Face folder; `config_edit` changes config.json."""
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "intermediate_size": FFN, "vocab_size": VOCAB, "max_position_embeddings": CTX,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    }
    if config_edit:
        config_edit(config)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    save_file({hf: data for hf, _, data in WEIGHTS}, str(path / "model.safetensors"))
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(SOURCE_FOLDER / f, path / f)


def setting(key, value):
    def edit(c):
        if value is DELETE:
            c.pop(key, None)
        else:
            c[key] = value
    return edit


DELETE = object()
U64 = gguf.GGUFValueType.UINT64
F32 = gguf.GGUFValueType.FLOAT32


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    write_gguf(OUT / "valid.gguf")
    write_folder(OUT / "valid")
    # The rows of the campaign that used to crash, hang or pass.
    for name, n in [("2e63", 2**63), ("2e40", 2**40), ("1e8", 10**8)]:
        write_gguf(OUT / f"block-count-{name}.gguf", {"block_count": (n, U64)})
        write_folder(OUT / f"layers-{name}", setting("num_hidden_layers", n))
    write_gguf(OUT / "block-count-0.gguf", {"block_count": (0, U64)})
    write_folder(OUT / "swiglu-limit-negative", lambda c: c.update(
        model_type="gpt_oss", num_local_experts=4, num_experts_per_tok=2, swiglu_limit=-1.0))
    for name, v in [("missing", DELETE), ("null", None), ("0", 0), ("1", 1)]:
        write_folder(OUT / f"context-{name}", setting("max_position_embeddings", v))
    write_gguf(OUT / "context-length-1.gguf", {"context_length": (1, U64)})
    for name, v in [("0", 0.0), ("negative", -1.0), ("nan", float("nan")), ("inf", float("inf"))]:
        write_gguf(OUT / f"rms-eps-{name}.gguf", {"attention.layer_norm_rms_epsilon": (v, F32)})
        write_gguf(OUT / f"rope-theta-{name}.gguf", {"rope.freq_base": (v, F32)})
    # tokenizers 0.22 panics on a tokenizer.json cut inside its decoder section.
    write_folder(OUT / "tokenizer-cut-in-decoder")
    cut = OUT / "tokenizer-cut-in-decoder/tokenizer.json"
    text = cut.read_text()
    cut.write_text(text[:text.index('"decoder": {') + len('"decoder": {')])
    write_folder(OUT / "vocab-size-wrong", setting("vocab_size", 1000))
    write_folder(OUT / "hidden-size-wrong", setting("hidden_size", 16))
    print("wrote", sorted(p.name for p in OUT.iterdir()))


if __name__ == "__main__":
    main()
