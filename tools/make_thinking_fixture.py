"""Writes tests/fixtures/thinking: a tiny llama whose weights are made by hand so that after any
chat prompt it answers, greedily or sampled, with one fixed reply that reasons first:
"<think> the tiny model can return four</think>Hello there". It exists so the app's
end-to-end test can see reasoning folded under an answer (random-weight fixtures never emit
a reasoning block).

How: the one layer's attention and FFN outputs are zero, so the last hidden state is the RMS-
normalized embedding of the current token. Each token of the reply, and the token that ends
every prompt ("\n" after "<|im_start|>assistant"), gets its own one-hot embedding dimension;
the output matrix maps that dimension to the next token of the reply with a margin of ~45
logits; every other token maps to <|im_end|>. The tokenizer is tests/fixtures/qwen3's with
"<think>" and "</think>" added (ids 512 and 513), the chat template qwen3's.
Run from the repository root: python3 tools/make_thinking_fixture.py"""

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer

SRC = Path("tests/fixtures/qwen3/f32")
OUT = Path("tests/fixtures/thinking")
HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM = 32, 8, 2, 1, 16
THINK, END_THINK = "<think>", "</think>"
REASONING = ["Ġthe", "Ġtiny", "Ġmodel", "Ġcan", "Ġreturn", "Ġfour"]
ANSWER = ["Hello", "Ġthere"]


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    tok = json.loads((SRC / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    base = len(vocab)
    for i, content in enumerate([THINK, END_THINK]):
        tok["added_tokens"].append({"id": base + i, "content": content, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False,
                                    "special": False})
    (OUT / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, indent=1))
    for f in ["tokenizer_config.json", "chat_template.jinja"]:
        shutil.copy(SRC / f, OUT / f)
    tokenizer = Tokenizer.from_file(str(OUT / "tokenizer.json"))
    n_vocab = base + 2
    end = tokenizer.token_to_id("<|im_end|>")
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    last = tokenizer.encode(prompt, add_special_tokens=False).ids[-1]
    chain = [last, base, *[vocab[t] for t in REASONING], base + 1, *[vocab[t] for t in ANSWER], end]
    assert len(set(chain)) == len(chain), "every token of the reply must be distinct"
    assert len(chain) < HIDDEN

    other = HIDDEN - 1
    embed = np.zeros((n_vocab, HIDDEN), np.float32)
    embed[:, other] = 1.0
    head = np.zeros((n_vocab, HIDDEN), np.float32)
    head[end, other] = 8.0
    for i, t in enumerate(chain[:-1]):
        embed[t] = 0.0
        embed[t, i] = 1.0
        head[chain[i + 1], i] = 8.0
    zeros = lambda *s: np.zeros(s, np.float32)
    weights = {"model.embed_tokens.weight": embed, "lm_head.weight": head,
               "model.norm.weight": np.ones(HIDDEN, np.float32)}
    layer = "model.layers.0."
    weights |= {layer + "input_layernorm.weight": np.ones(HIDDEN, np.float32),
                layer + "post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
                layer + "self_attn.q_proj.weight": zeros(HEADS * HEAD_DIM, HIDDEN),
                layer + "self_attn.k_proj.weight": zeros(KV_HEADS * HEAD_DIM, HIDDEN),
                layer + "self_attn.v_proj.weight": zeros(KV_HEADS * HEAD_DIM, HIDDEN),
                layer + "self_attn.o_proj.weight": zeros(HIDDEN, HEADS * HEAD_DIM),
                layer + "mlp.gate_proj.weight": zeros(FFN, HIDDEN),
                layer + "mlp.up_proj.weight": zeros(FFN, HIDDEN),
                layer + "mlp.down_proj.weight": zeros(HIDDEN, FFN)}
    save_file(weights, str(OUT / "model.safetensors"))
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN,
              "num_hidden_layers": 1, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "head_dim": HEAD_DIM, "intermediate_size": FFN, "vocab_size": n_vocab,
              "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "eos_token_id": end, "hidden_act": "silu"}
    (OUT / "config.json").write_text(json.dumps(config, indent=1))
    print("reply:", tokenizer.decode(chain[1:-1], skip_special_tokens=False))


if __name__ == "__main__":
    main()
