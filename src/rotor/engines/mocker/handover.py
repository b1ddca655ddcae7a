"""The mocker's side of a KV handover between a prefill and a decode worker.

As a prefill engine, the mocker keeps a `PREFILL_ONLY` prompt's full blocks
pinned under a transfer id (`Holds`) until a decode worker fetches them, the
frontend says nobody will, or the hold times out; expiry is checked whenever
the engine is asked about its state or steps, so an idle worker still frees
them by its next load report (every second). As a decode engine it asks the
prefill worker for the blocks it lacks (`missing`), waits out the transfer's
simulated time (`transfer_seconds`) and stores them as if computed here.
The KV data itself is simulated: what moves between the two workers is the
request and its acknowledgement (the block hashes handed over).

`Holds.hand_off` is the step loop's side of a prefill (its answer, its blocks
pinned); `Fetcher` is admission's side of a decode request (the fetch that
comes before its sequences are queued).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Any

from rotor import tracing
from rotor.engines.base import KVFetch
from rotor.engines.mocker.config import MockerConfig
from rotor.engines.mocker.kv_cache import KVCache
from rotor.engines.mocker.sequence import Sequence
from rotor.protocol.engine import KV_TRANSFER, EngineError, EngineOutput, EngineRequest
from rotor.protocol.kv import Placed, block_hashes, chain_root

# The engine's log, named as before it was split up (its lines and filters keep it).
logger = logging.getLogger("rotor.engines.mocker.engine")


@dataclass(slots=True)
class Hold:
    block_ids: list[int]
    hashes: list[int]
    deadline: float


class Holds:
    """A prefill's side: pinned transfers by id, each released once (fetched,
    dropped, expired)."""

    def __init__(
        self, kv: KVCache, timeout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kv = kv
        self.timeout_s = timeout_s  # 0: held until fetched or dropped
        self.clock = clock
        self._holds: dict[str, Hold] = {}
        self.timeouts = 0

    @property
    def num_pinned(self) -> int:
        return sum(len(h.block_ids) for h in self._holds.values())

    def pin(self, block_ids: list[int], hashes: list[int]) -> str:
        """Pin these blocks for a decode worker; the transfer id that names them."""
        self.expire()
        transfer_id = uuid.uuid4().hex
        self.kv.pin(block_ids)
        deadline = self.clock() + self.timeout_s if self.timeout_s > 0 else float("inf")
        self._holds[transfer_id] = Hold(list(block_ids), list(hashes), deadline)
        return transfer_id

    def release(self, transfer_id: str, wanted: list[int]) -> list[int]:
        """Hand over those of the transfer's blocks that are `wanted` and end
        the hold (any fetch ends it; `wanted` empty: nobody will fetch)."""
        self.expire()
        hold = self._holds.pop(transfer_id, None)
        if hold is None:
            return []  # unknown, already fetched, or expired
        self.kv.unpin(hold.block_ids)
        asked = set(wanted)
        return [h for h in hold.hashes if h in asked]

    def expire(self) -> None:
        now = self.clock()
        for transfer_id in [t for t, h in self._holds.items() if h.deadline <= now]:
            self.kv.unpin(self._holds.pop(transfer_id).block_ids)
            self.timeouts += 1

    def hand_off(self, seq: Sequence, out: EngineOutput) -> None:
        """A prefill's answer: its first token, and its prompt's full blocks
        pinned for the decode worker that the output's `kv_transfer` names them to."""
        kv = self.kv
        full = seq.num_prompt_tokens // kv.block_size
        if full:
            kv.block_hash(seq, full - 1)  # named already; the memo makes sure
        hashes = seq.block_hashes[:full]
        del out.token_ids[1:]
        out.finish, out.matched = "length", None
        out.kv_transfer = {
            "engine": "mocker",
            "transfer_id": self.pin(seq.block_table[:full], hashes),
            "block_hashes": hashes,
            "block_size": kv.block_size,
            "prompt_tokens": seq.num_prompt_tokens,
        }


class Fetcher:
    """A decode request's side: before it is admitted, the prefill's blocks
    this cache lacks are fetched through the worker's `fetch`, their transfer
    waited out and stored as if computed here; what came and what failed is
    counted for the engine's state."""

    def __init__(self, kv: KVCache, config: MockerConfig, running: Callable[[], bool]) -> None:
        self.kv = kv
        self.config = config
        self.running = running  # whether the engine still runs once a fetch is over
        self.fetch: KVFetch | None = None  # set by the worker that serves this engine
        # How a transfer's simulated time is waited out (tests record it).
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self.blocks_fetched = 0
        self.failures = 0
        self._releasing: set[asyncio.Task[None]] = set()
        self._fetching: set[asyncio.Task[int]] = set()  # decode requests' KV fetches

    def stop(self) -> None:
        """The engine stops: every fetch under way ends, and its request is refused."""
        for fetch in list(self._fetching):
            fetch.cancel()

    async def fetch_blocks(self, request: EngineRequest, transfer: dict[str, Any]) -> None:
        """Before a decode request is admitted: fetch the prefill's blocks this
        cache lacks, wait out the transfer, store them. A fetch that fails is
        computed here instead (counted), unless the transfer is enforced. The
        fetch is a task of its own, so `stop` ends it; the step loop runs on."""
        kv = self.kv
        offered = [int(h) for h in transfer.get("block_hashes") or ()]
        root = chain_root(request.lora, request.cache_salt)
        wanted = missing(kv, request.token_ids, offered, root, request.images)
        if wanted is None:
            self._release(transfer)
            self._failed(request, "the offered blocks are not this prompt's")
            return
        first, hashes = wanted
        if not hashes:  # all held here already: the prefill's hold can go
            self._release(transfer)
            return
        attributes = {
            "rotor.kv.prefill_worker": transfer.get("worker"),
            "rotor.kv.blocks_offered": len(offered),
            "rotor.kv.blocks_wanted": len(hashes),
        }
        with tracing.start("rotor.kv_fetch", attributes, kind="client") as span:
            count = await self._fetch_task(request, transfer, hashes, span)
        if count is None:
            return
        parent = offered[first - 1] if first else root
        self.blocks_fetched += kv.store(hashes[:count], parent)
        if count < len(hashes):
            self._failed(request, f"{len(hashes) - count} of {len(hashes)} blocks not handed over")

    async def _fetch_task(
        self,
        request: EngineRequest,
        transfer: dict[str, Any],
        hashes: list[int],
        span: tracing.Span,
    ) -> int | None:
        """The fetch as a task of its own (its span current there, so the
        fetch's NATS request carries it): how many leading blocks came, or
        None when it failed and the prompt is computed here."""
        context = tracing.use(span)
        try:
            task = asyncio.get_running_loop().create_task(
                self._transfer(transfer, hashes), name=f"kv-fetch-{request.request_id}"
            )
        finally:
            tracing.reset(context)
        self._fetching.add(task)
        try:
            await asyncio.wait((task,))
        except BaseException:  # the request's reader left: the fetch goes too
            task.cancel()
            raise
        finally:
            self._fetching.discard(task)
        if not self.running():
            raise EngineError("engine stopped", "unavailable")
        error = "cancelled" if task.cancelled() else task.exception()
        if error is not None:
            why = f"the fetch from worker {transfer.get('worker')} failed: {error!r}"
            span.fail(why)
            self._failed(request, why)
            return None
        span.set({"rotor.kv.blocks_fetched": task.result()})
        return task.result()

    async def _transfer(self, transfer: dict[str, Any], hashes: list[int]) -> int:
        """Ask for `hashes` and wait out moving those handed over: how many
        leading ones were (the KV data itself is simulated)."""
        if self.fetch is None:
            raise RuntimeError("this engine has no way to fetch blocks")
        count = leading(hashes, await self.fetch(transfer, hashes))
        config = self.config
        seconds = transfer_seconds(
            count * self.kv.block_size,
            config.kv_bytes_per_token,
            config.kv_transfer_gbps,
            config.speedup_ratio,
        )
        tracing.current().set({"rotor.kv.transfer_ms": round(seconds * 1000, 3)})
        if seconds > 0:
            await self.sleep(seconds)
        return count

    def _release(self, transfer: dict[str, Any]) -> None:
        """End a prefill's hold without taking anything (a fetch of nothing),
        in the background: its answer is not needed."""
        fetch = self.fetch
        if fetch is None:
            return

        async def release() -> None:
            try:
                await fetch(transfer, [])
            except Exception as e:  # the hold then times out
                logger.debug("a KV hold could not be released: %s", e)

        task = asyncio.get_running_loop().create_task(release())
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    def _failed(self, request: EngineRequest, why: str) -> None:
        """A fetch that failed: the request is refused if its transfer is
        enforced, else its prompt is computed here."""
        self.failures += 1
        if request.annotations[KV_TRANSFER].get("enforce"):
            raise EngineError(
                f"request {request.request_id}: {why}", "unavailable", cause="kv_transfer"
            )
        logger.warning("request %s: %s; computing the prompt here", request.request_id, why)


def missing(
    kv: KVCache,
    prompt: list[int],
    offered: list[int],
    root: int | None = None,
    images: Seq[Placed] = (),
) -> tuple[int, list[int]] | None:
    """Which of a prefill's `offered` block hashes this cache lacks: (the index
    of the first one lacking, those from there on). None when the offer is not
    this prompt's blocks (another block size, another prompt, other images:
    the decode request's images keep their hashes, not their bytes). A block
    on a medium below the device is not lacking: admission brings it up."""
    own = block_hashes(prompt[: len(offered) * kv.block_size], kv.block_size, root, images)
    if own != offered:
        return None
    holds = kv.holds
    first = next((i for i, h in enumerate(own) if not holds(h)), len(own))
    return first, own[first:]


def leading(asked: list[int], granted: list[int]) -> int:
    """How many of the `asked` hashes, from the first on, were `granted`: the
    blocks a prompt can use (a block after a gap is of no use to it)."""
    given = set(granted)
    return next((i for i, h in enumerate(asked) if h not in given), len(asked))


def transfer_seconds(tokens: int, bytes_per_token: int, gb_per_s: float, speedup: float) -> float:
    """Simulated time of moving `tokens` tokens' KV: bytes over bandwidth,
    divided by the speedup ratio (bandwidth 0: instant; speedup 0: no waiting)."""
    if tokens <= 0 or gb_per_s <= 0 or speedup <= 0:
        return 0.0
    return tokens * bytes_per_token / (gb_per_s * 1e9) / speedup
