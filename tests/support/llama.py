"""A tiny random Llama that vLLM can load: rotor's test model directories
(support/models.py) plus a full `config.json` and random `model.safetensors`.

No hub, no network. The shapes fit vLLM's CPU backend (head_dim 64; any block
size a multiple of 32 works). The rows of the output projection that belong to
special and added tokens are zero, so greedy decoding never picks one (their
logit is 0 while the best ordinary token's is clearly positive): greedy answers
run to `max_tokens`, and a test that wants a stop token picks one the model
actually produced.
"""

from __future__ import annotations

import json
from pathlib import Path

HIDDEN = 128
HEADS = 2  # head_dim 64
KV_HEADS = 1
LAYERS = 2
INTERMEDIATE = 256


def add_llama_weights(model_dir: Path, context_length: int = 2048, seed: int = 0) -> Path:
    """Turn a rotor test model directory into a loadable random LlamaForCausalLM."""
    import torch
    from safetensors.torch import save_file

    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = len(tok["model"]["vocab"]) + sum(
        1 for t in tok["added_tokens"] if t["content"] not in tok["model"]["vocab"]
    )
    ids = [t["id"] for t in tok["added_tokens"]]
    vocab = max(vocab, max(ids, default=0) + 1)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "num_hidden_layers": LAYERS,
        "vocab_size": vocab,
        "max_position_embeddings": context_length,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": None,
        "eos_token_id": None,
    }
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * std

    head_dim = HIDDEN // HEADS
    weights: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": rand(vocab, HIDDEN, std=1.0),
        "model.norm.weight": torch.ones(HIDDEN),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        weights |= {
            p + "input_layernorm.weight": torch.ones(HIDDEN),
            p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
            p + "self_attn.q_proj.weight": rand(HEADS * head_dim, HIDDEN, std=0.2),
            p + "self_attn.k_proj.weight": rand(KV_HEADS * head_dim, HIDDEN, std=0.2),
            p + "self_attn.v_proj.weight": rand(KV_HEADS * head_dim, HIDDEN, std=0.2),
            p + "self_attn.o_proj.weight": rand(HIDDEN, HEADS * head_dim, std=0.05),
            p + "mlp.gate_proj.weight": rand(INTERMEDIATE, HIDDEN, std=0.1),
            p + "mlp.up_proj.weight": rand(INTERMEDIATE, HIDDEN, std=0.1),
            p + "mlp.down_proj.weight": rand(HIDDEN, INTERMEDIATE, std=0.05),
        }
    head = rand(vocab, HIDDEN, std=0.3)
    head[ids] = 0.0
    weights["lm_head.weight"] = head
    save_file({k: v.contiguous() for k, v in weights.items()}, str(model_dir / "model.safetensors"))
    return model_dir
