"""How the vLLM tests run the engine (shared by tests/vllm and the bench notes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.server import Server, rotor_server

# How vLLM runs here: eager (no compile), float32, blocks of 32 tokens, a
# small KV cache. VLLM_CPU_KVCACHE_SPACE is in GiB.
VLLM_ARGS = ("--enforce-eager", "--dtype", "float32", "--block-size", "32", "--max-num-seqs", "16")
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
START_TIMEOUT = 600.0
# vLLM runs the model as an embedding model (a generative one converted: `--convert embed`)
POOLING_ARGS = ("--runner", "pooling")


@contextmanager
def vllm_server(model: Path, *rotor_args: str, vllm: tuple[str, ...] = ()) -> Iterator[Server]:
    """`rotor run out=vllm --model-path MODEL ROTOR_ARGS -- VLLM_ARGS VLLM`, healthy."""
    with rotor_server(
        "out=vllm", "--model-path", str(model), *rotor_args, "--", *VLLM_ARGS, *vllm,
        env=VLLM_ENV, timeout=START_TIMEOUT,
    ) as server:  # fmt: skip
        yield server
