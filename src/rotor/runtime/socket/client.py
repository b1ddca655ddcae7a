"""The HTTP process's side: an engine client over the engine process's unix
socket, implementing the Engine contract (`generate`, `abort`, `state`, and
`embed`, `score`), so
the frontend cannot tell it from an in-process engine.

One connection per HTTP process carries all its requests; each request's
frames go to its `OutputStream` (runtime/stream.py, the reader the NATS
transport shares), which merges what arrived together into one output, so a
burst costs the pipeline one step and the client one write.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import cast

from rotor.model.card import ModelCard
from rotor.protocol.codec import (
    decode_embeddings,
    decode_error,
    decode_outputs,
    decode_scores,
    encode_embed_request,
    encode_request,
    encode_score_request,
)
from rotor.protocol.engine import EngineError, EngineRequest, EngineState
from rotor.protocol.scores import ScorePair
from rotor.runtime.socket import frames
from rotor.runtime.stream import OutputStream

GONE = "the engine process is not reachable"
STATE_EVERY_S = 0.25  # how stale /health and /metrics may be about the engine


class SocketEngine(asyncio.Protocol):
    """An engine in another process on this machine, reached at `path`."""

    def __init__(self, card: ModelCard, path: str, adapters: dict[str, str] | None = None) -> None:
        """`adapters`: the LoRA adapters the engine process loaded at start."""
        self.card = card
        self.path = path
        self._adapters = dict(adapters or {})
        self.transport: asyncio.Transport | None = None
        self._reader = frames.Reader(self._on_frame)
        self._streams: dict[str, OutputStream] = {}
        self._answers: dict[str, asyncio.Future[bytes]] = {}  # an embed's or score's, by its id
        self._state = EngineState()
        self._state_asked = False
        self._first_state: asyncio.Future[None] | None = None
        self._refresh: asyncio.Future[None] | None = None

    def adapters(self) -> dict[str, str]:
        return self._adapters

    # -- lifecycle (the HTTP process's startup and shutdown) -----------------------

    async def start(self) -> None:
        """Connect, and read the engine's state once (so /health is true at
        once); from then on it is refreshed every STATE_EVERY_S."""
        loop = asyncio.get_running_loop()
        await loop.create_unix_connection(lambda: self, self.path)
        self._first_state = loop.create_future()
        self._ask_state()
        await self._first_state
        self._refresh = asyncio.ensure_future(self._refresh_state())

    async def stop(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
        if self.transport is not None:
            self.transport.close()

    async def _refresh_state(self) -> None:
        while self.transport is not None:
            await asyncio.sleep(STATE_EVERY_S)
            self._ask_state()

    # -- the Engine contract ---------------------------------------------------------

    def generate(self, request: EngineRequest) -> OutputStream:
        rid = request.request_id

        async def send() -> None:
            if self.transport is None:
                raise EngineError(GONE, "unavailable", cause="worker_gone")
            if rid in self._streams:
                raise EngineError(f"request_id {rid!r} is already running", "internal")
            frame = frames.frame(frames.GENERATE, rid, encode_request(request))
            if len(frame) - 4 > frames.MAX_FRAME:  # the engine process would drop the connection
                raise EngineError(
                    f"the request is {len(frame)} bytes with its images, more than the "
                    f"{frames.MAX_FRAME}-byte frame the engine process takes",
                    "refused",
                )
            self._streams[rid] = stream
            self.transport.write(frame)

        def ended() -> None:
            if self._streams.get(rid) is stream:
                del self._streams[rid]

        stream = OutputStream(
            request.n, "the engine process", send, abort=lambda: self.abort(rid), on_end=ended
        )
        return stream

    async def embed(self, inputs: list[list[int]], dimensions: int | None) -> list[list[float]]:
        if not self.card.capabilities.embedding_dim:  # (the frontend checked; the contract)
            raise EngineError(f"the model {self.card.name!r} cannot embed", "refused", "model")
        payload = encode_embed_request(inputs, dimensions)
        return decode_embeddings(
            await self._ask(frames.EMBED, f"embed-{uuid.uuid4().hex}", payload)
        )

    async def score(self, pairs: list[ScorePair]) -> list[float]:
        if not self.card.capabilities.scores_pairs:  # (the frontend checked; the contract)
            raise EngineError(
                f"the model {self.card.name!r} cannot score pairs", "refused", "model"
            )
        payload = encode_score_request(pairs)
        return decode_scores(await self._ask(frames.SCORE, f"score-{uuid.uuid4().hex}", payload))

    async def _ask(self, kind: bytes, rid: str, payload: bytes) -> bytes:
        """One frame to the engine process, and its answer's payload."""
        if self.transport is None:
            raise EngineError(GONE, "unavailable", cause="worker_gone")
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._answers[rid] = answer
        try:
            self.transport.write(frames.frame(kind, rid, payload))
            return await answer
        finally:
            self._answers.pop(rid, None)

    def abort(self, request_id: str) -> None:
        if self.transport is not None:
            self.transport.write(frames.frame(frames.ABORT, request_id))

    def state(self) -> EngineState:
        """The last state the engine sent (at most STATE_EVERY_S old); asking
        also refreshes it (the contract's `state` is synchronous, the engine
        is a write away)."""
        self._ask_state()
        return self._state

    # -- the socket --------------------------------------------------------------------

    def _ask_state(self) -> None:
        if self.transport is not None and not self._state_asked:
            self._state_asked = True
            self.transport.write(frames.frame(frames.STATE, ""))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream connection's (a unix socket's): asyncio's Protocol types it as the base
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)  # a broken engine process is a bug: let it be loud

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        for stream in self._streams.values():
            stream.fail(EngineError(GONE, "unavailable", cause="worker_gone"))
        for answer in self._answers.values():
            if not answer.done():
                answer.set_exception(EngineError(GONE, "unavailable", cause="worker_gone"))
        if self._first_state is not None and not self._first_state.done():
            self._first_state.set_exception(ConnectionError(GONE))

    def _on_frame(self, kind: bytes, seq: int, rid: str, payload: bytes) -> None:
        if kind == frames.STATE:
            self._state = frames.decode_state(payload)
            self._state_asked = False
            if self._first_state is not None and not self._first_state.done():
                self._first_state.set_result(None)
            return
        if kind in (frames.VECTORS, frames.SCORES):
            answer = self._answers.get(rid)
            if answer is not None and not answer.done():
                answer.set_result(payload)
            return
        stream = self._streams.get(rid)
        if stream is None:  # a request this side already left (aborted, or finished)
            return
        if kind == frames.OUTPUTS:
            stream.put(seq, "outputs", decode_outputs(payload))
        elif kind == frames.ERROR:
            stream.put(seq, "error", decode_error(payload))
        elif kind == frames.DONE:
            stream.put(seq, "done", None)
        else:
            raise frames.WireError(f"frame kind {kind!r} is not one the engine sends")
