"""What an engine is to rotor: the per-request token contract, and nothing else.

`generate(EngineRequest)` is a source of `EngineOutput`s (protocol/flow.py:
the first subscribe starts the request, `stop` aborts it); `abort(request_id)`
stops a request at once and never blocks. That is all that crosses a wire, so a
remote worker behind a router is an engine too. Checks that depend on the
engine run in preprocess against the card's declared capabilities; a request
the engine refuses anyway ends its stream with an `EngineError` (kind
"refused") before any output, so it is still a 400 naming the field.

Starting and stopping an engine is its builder's business (rotor.serve), not
the frontend's: a frontend does not start remote workers. What only some
engines can do is a Protocol of its own (`Lifecycle`, `KVEventSource`,
`Wedge`), so a caller asks `isinstance`, never `getattr`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from rotor.model.card import ModelCard
from rotor.protocol.engine import EngineClient
from rotor.protocol.kv import KVEvent, KVSnapshot
from rotor.protocol.scores import ScorePair


class Engine(EngineClient, Protocol):
    """An engine proper (echo, the mocker, vLLM): what a worker serves and
    `rotor run` runs in-process. Besides the per-request contract
    (`EngineClient.generate` and `state`): the card it serves, and `abort`
    for a transport that is told to stop a request by its id."""

    card: ModelCard  # what it serves, with its capabilities

    def abort(self, request_id: str) -> None:
        """Stop the request now; its stream ends with no further output."""
        ...


@runtime_checkable
class Lifecycle(Protocol):
    """Engines with work in the background (a step loop) are started and
    stopped by whoever built them."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class KVEventSource(Protocol):
    """Engines whose KV cache reports what it stores and frees (the mocker,
    vLLM): a worker relays the events, and a KV router follows them."""

    def kv_events(self, listener: Callable[[KVEvent], None] | None) -> KVSnapshot:
        """Send the cache's events to `listener` from now on (None: to nobody) and
        return what the cache holds now, the state those events apply to."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """Engines that embed (the mocker with `--runner pooling`, vLLM running a
    pooling model): one vector per input, with `card.capabilities.embedding_dim`
    numbers unless `dimensions` asks for fewer (and the card allows it)."""

    async def embed(self, inputs: list[list[int]], dimensions: int | None) -> list[list[float]]:
        """Each input's vector, in order; EngineError ("refused", naming the
        field) for what the engine cannot do."""
        ...


@runtime_checkable
class Scorer(Protocol):
    """Engines that score pairs (cross-encoders: the mocker with `--runner
    pooling --convert classify`, vLLM running a one-label classifier): one
    relevance score per (query, document) pair, with
    `card.capabilities.scores_pairs`."""

    async def score(self, pairs: list[ScorePair]) -> list[float]:
        """Each pair's score, in order; EngineError ("refused", naming the
        field) for what the engine cannot do."""
        ...


@runtime_checkable
class AdapterSource(Protocol):
    """Engines whose requests may name a LoRA adapter (`EngineRequest.lora`):
    the adapters they hold, so a frontend serves each as a model of its own."""

    def adapters(self) -> dict[str, str]:
        """Each adapter's name and the directory it was loaded from."""
        ...


@runtime_checkable
class Adapters(AdapterSource, Protocol):
    """Engines that load and unload LoRA adapters while they run (the mocker,
    vLLM with LoRA enabled)."""

    async def load_adapter(self, name: str, path: str) -> None:
        """Load the adapter at `path` under `name`; EngineError ("refused",
        naming `lora_name` or `lora_path`) when it cannot be."""
        ...

    async def unload_adapter(self, name: str) -> None:
        """New requests can no longer name it; those running with it finish
        first. EngineError ("refused", `lora_name`) when none has that name."""
        ...


@runtime_checkable
class Wedge(Protocol):
    """Engines with a fault switch that stops their steps, as a hung device
    would, while their process goes on (the mocker): what a worker's
    canary is tested against (`POST /debug/wedge` on its --system-port)."""

    def wedge(self, seconds: float = 0.0) -> None:
        """No step for `seconds` of wall time (0: until `unwedge`); a wedge
        under way is replaced. ValueError for a negative time."""
        ...

    def unwedge(self) -> None:
        """Step again now."""
        ...

    def wedged(self) -> float | None:
        """Seconds the wedge still lasts (math.inf: until unwedged); None: not wedged."""
        ...


# (the kv_transfer of a decode request, the block hashes it lacks) -> the
# hashes the prefill worker handed over
KVFetch = Callable[[dict[str, Any], list[int]], Awaitable[list[int]]]


@runtime_checkable
class KVHold(Protocol):
    """Prefill engines that hold a prompt's KV for a decode worker until it
    is taken or dropped (the mocker; vLLM with rotor's storage connector):
    a worker relays the fetches and drops to them."""

    def kv_release(self, transfer_id: str, hashes: list[int]) -> list[int]:
        """As a prefill engine: hand over (and unpin) those of the transfer's
        blocks that are asked for (none asked: drop the whole hold); the
        hashes handed over (none: unknown, expired, or moved otherwise)."""
        ...


@runtime_checkable
class KVHandover(KVHold, Protocol):
    """Engines whose KV blocks a worker moves itself, over rotor's transport
    (the mocker; vLLM's connectors move its blocks inside vLLM)."""

    def kv_fetcher(self, fetch: KVFetch) -> None:
        """How this engine, as a decode engine, fetches the blocks it lacks."""
        ...
