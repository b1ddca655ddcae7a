"""A tiny random embedding model vLLM runs as a pooling model on CPU.

It is support/llama.py's tiny Llama (head_dim 64, hidden size 128) with
rotor's test tokenizer files; `-- --runner pooling` makes vLLM convert it to
an embedding model (`--convert embed`: the last token's hidden state,
normalised). `matryoshka_dimensions` in its config.json tells vLLM it may be
shortened to those dimensions, so rotor's card allows `dimensions`.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.llama import HIDDEN, add_llama_weights
from support.models import chatml_model

EMBEDDING_DIM = HIDDEN
MATRYOSHKA = (32, 64, EMBEDDING_DIM)


def embedding_model(tmp: str | Path, name: str = "tiny-embed", context_length: int = 512) -> Path:
    """A model directory with a random Llama's weights and Matryoshka dimensions."""
    model = add_llama_weights(chatml_model(tmp, name), context_length)
    config_path = model / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["matryoshka_dimensions"] = list(MATRYOSHKA)
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return model
