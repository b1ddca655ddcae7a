"""How the vLLM tests run the engine (shared by tests/vllm and the bench notes),
in rotor (`vllm_server`) and in vLLM's own OpenAI server, to compare against
(`vllm_openai_server`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from support.server import Server, free_port, log_text, rotor_server
from support.wait import wait_for

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


@contextmanager
def vllm_openai_server(model: Path, name: str, *vllm: str) -> Iterator[str]:
    """vLLM's own OpenAI server (`python -m vllm.entrypoints.openai.api_server`)
    on a free loopback port, serving `model` as `name` with VLLM_ARGS, healthy:
    its base URL. Stopped with its process group (its engine core included)."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port),
        *VLLM_ARGS, *vllm,
    ]  # fmt: skip
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in finally
    env = {**os.environ, **VLLM_ENV, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM's server exited with {proc.returncode}:\n{log_text(log)}")
        try:
            return httpx.get(url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for("vLLM's server to become healthy", healthy, START_TIMEOUT, lambda: log_text(log))
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
