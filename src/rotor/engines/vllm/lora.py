"""LoRA adapters in vLLM under rotor's names (docs/vllm.md#lora-adapters).

vLLM can serve adapters only when it was built with LoRA enabled, sized for
them (the largest rank, how many at once): `size_lora` enables it when
there are `--lora` adapters at start or the user said `-- --enable-lora`,
and sizes it to the startup adapters unless the user sized it. `VLLMLoras`
then loads adapters into the running AsyncLLM (`add_lora`, so a bad one fails
at load, not at its first request), keeps rotor's bookkeeping in the shared
`AdapterBook` (engines/adapters.py), hands each request its `LoRARequest`,
and frees an unloaded adapter in vLLM (`remove_lora`) only once the last
request using it has ended.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rotor.engines.adapters import AdapterBook
from rotor.engines.vllm.args import given
from rotor.model.lora import CONFIG, Adapter
from rotor.protocol.engine import EngineError

logger = logging.getLogger(__name__)

NOT_ENABLED = (
    "this vLLM engine was started without LoRA: start it with --lora NAME=DIR"
    " or -- --enable-lora (and --max-lora-rank N for adapters above rank 16)"
)
# how vLLM 0.32's engine core wraps a worker's error in add_lora's (the
# worker's traceback goes to vLLM's log, not into rotor's answer)
WORKER_FAILED = re.compile(r"Worker failed with error '(.*)', please check the stack trace", re.S)


def vllm_ranks() -> tuple[int, ...]:
    """The `--max-lora-rank` values vLLM accepts (1, 8, 16, ... 512 in vLLM 0.32)."""
    from typing import get_args

    from vllm.config.lora import MaxLoRARanks

    return tuple(sorted(get_args(MaxLoRARanks)))


def vllm_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds `rank`; ValueError when none does."""
    ranks = vllm_ranks()
    fits = [r for r in ranks if r >= rank]
    if not fits:
        raise ValueError(f"--lora: rank {rank} is above vLLM's largest max_lora_rank {ranks[-1]}")
    return fits[0]


def size_lora(args: Any, words: list[str], startup: list[Adapter]) -> None:
    """Enable LoRA in vLLM's `args` when adapters are given at start or the
    user's words enable it; unless the user set them, `max_lora_rank` fits
    the largest startup adapter and `max_loras` (adapters in one batch) and
    `max_cpu_loras` (adapters kept loaded) hold all of them."""
    if not startup and not args.enable_lora:
        return
    args.enable_lora = True
    if startup and not given(words, "--max-lora-rank"):
        args.max_lora_rank = vllm_rank(max(a.rank for a in startup))
    if not given(words, "--max-loras"):
        args.max_loras = max(1, len(startup))
    if not given(words, "--max-cpu-loras"):
        args.max_cpu_loras = max(args.max_loras, len(startup))


class VLLMLoras:
    """The adapters of one VLLMEngine: rotor's book, and vLLM's id for each."""

    def __init__(self, enabled: bool, max_rank: int) -> None:
        self.enabled = enabled
        self.max_rank = max_rank
        self.llm: Any = None  # the running AsyncLLM (set by the engine's start)
        self.book = AdapterBook(on_drop=self._drop)
        self._requests: dict[str, Any] = {}  # name -> its LoRARequest, until freed in vLLM
        self._names: dict[int, str] = {}  # vLLM's int id -> name (ids are never reused)
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()  # one load at a time: a name is checked, then taken
        self._removals: set[asyncio.Task[None]] = set()

    def names(self) -> dict[str, str]:
        return self.book.names()

    def name_of(self, lora_id: int) -> str | None:
        """The adapter vLLM knows by `lora_id` (for its KV events)."""
        return self._names.get(lora_id)

    async def load(self, name: str, path: str) -> None:
        """Check the directory, then load it into vLLM; EngineError (refused,
        naming `lora_name` or `lora_path`) with vLLM's reason when it cannot."""
        from vllm.lora.request import LoRARequest
        from vllm.v1.engine.exceptions import EngineDeadError

        if not self.enabled:
            raise EngineError(NOT_ENABLED, "refused", "lora_path")
        async with self._lock:
            adapter = self.book.check(name, path)
            if adapter.rank > self.max_rank:
                raise EngineError(
                    f"{Path(adapter.path) / CONFIG}: 'r' (the rank) is {adapter.rank}, above"
                    f" this engine's max_lora_rank {self.max_rank} (start it with"
                    " -- --max-lora-rank N)",
                    "refused",
                    "lora_path",
                )
            if self.llm is None:
                raise EngineError("the vLLM engine is not started", "unavailable")
            request = LoRARequest(name, next(self._ids), adapter.path)
            try:
                added = await self.llm.add_lora(request)
            except EngineDeadError as e:
                raise EngineError(f"the vLLM engine died: {e}", "unavailable") from None
            except Exception as e:  # vLLM's reason, without its traceback
                raise EngineError(
                    f"lora_path {path!r}: vLLM cannot load the adapter: {_reason(e)}",
                    "refused",
                    "lora_path",
                ) from None
            if not added:
                raise EngineError(
                    f"lora_path {path!r}: vLLM did not load the adapter", "refused", "lora_path"
                )
            self._requests[name] = request
            self._names[request.lora_int_id] = name
            self.book.add(adapter)

    def unload(self, name: str) -> None:
        """No new request may name it; vLLM frees it once none running does."""
        self.book.remove(name)
        if name in self._requests:  # not dropped yet: requests still use it
            logger.info("LoRA adapter %r unloaded; vLLM frees it when its requests end", name)

    @contextmanager
    def using(self, name: str | None) -> Iterator[Any]:
        """The request's LoRARequest (None: the base model) while it runs."""
        with self.book.using(name) as adapter:
            yield None if adapter is None else self._requests[adapter.name]

    def _drop(self, adapter: Adapter) -> None:
        """The last request using an unloaded adapter ended: free it in vLLM
        (a task: this runs inside a request's or an unload's call)."""
        request = self._requests.pop(adapter.name, None)
        if request is None or self.llm is None:
            return
        task = asyncio.get_running_loop().create_task(self._remove(self.llm, request))
        self._removals.add(task)
        task.add_done_callback(self._removals.discard)

    async def _remove(self, llm: Any, request: Any) -> None:
        try:
            await llm.remove_lora(request.lora_int_id)
        except Exception as e:  # the engine is going or gone: nothing left to free
            logger.warning("vLLM could not remove LoRA adapter %r: %s", request.lora_name, e)
            return
        logger.info("vLLM removed LoRA adapter %r (id %d)", request.lora_name, request.lora_int_id)
        # vLLM's prefix cache (and rotor's block hash) knows an adapter by its
        # name: another adapter loaded under that name later must not meet
        # these blocks. An unload is rare; a cold cache after it is the price.
        try:
            await llm.reset_prefix_cache()
        except Exception as e:
            logger.warning("vLLM could not reset its prefix cache after an unload: %s", e)

    async def close(self) -> None:
        """Before vLLM shuts down: removals still under way are moot."""
        for task in list(self._removals):
            task.cancel()
        await asyncio.gather(*self._removals, return_exceptions=True)
        self.llm = None


def _reason(error: Exception) -> str:
    """What vLLM says is wrong with an adapter, without its wrapping."""
    text = str(error)
    found = WORKER_FAILED.search(text)
    return found.group(1) if found else text.removeprefix("Call to add_lora method failed: ")
