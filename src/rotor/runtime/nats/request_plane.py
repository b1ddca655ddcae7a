"""The frontend's side of the request plane: engine requests sent to remote
workers, and their outputs streamed back.

`RequestPlane` is the frontend's one subscription to all its requests'
outputs (`rotor.resp.<frontend>.*`). It publishes a request to the worker's
subject and hands each message of the reply stream, decoded, to the
request's `OutputStream` (runtime/stream.py: the reader both transports
share). A worker whose lease ended (`worker_gone`) fails its streams at once.
Workers send the streams of a frontend's requests in batches, one message per
step (`rotor.steps.<frontend>`, runtime/nats/batcher.py).

A request published to a worker nobody serves any more (killed, or cut off
from NATS, before its lease ran out) is answered by NATS itself: "no
responders", an empty message with status 503 on the reply subject. Its
stream ends "unavailable" with cause worker_gone (a pool moves it to another
worker), and the plane tells its owner (`on_gone`), who drops the worker at
once rather than when its lease runs out; a worker that is in fact alive
comes back with its next lease. Except while NATS comes back: for
`reconnect_grace` seconds after this frontend's own connection reconnected
(a restarted nats-server), or for a request published before it did, no
responders means the worker has not reconnected yet, not that it is gone:
nobody received the request, so it is sent again a moment later.

What workers sent this frontend while its connection was away is lost (NATS
keeps nothing for a subscriber that is not there), so when it comes back
(`reconnected`) every stream sent before ends "unavailable" with what it
received, and a pool moves it on at once: one that went on would show the
gap at its next message, but one whose end was lost would hear nothing
until its silence limit.

A request too large for one NATS message with its images inline sends some
of them beside it, in JetStream's object store (runtime/nats/media.py); each
publish (a resend, a migration's) stores again what is no longer there.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgpack
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError, NoRespondersError

from rotor.protocol import codec
from rotor.protocol.engine import EngineError, EngineRequest
from rotor.protocol.scores import ScorePair
from rotor.runtime.nats import messages, subjects
from rotor.runtime.nats.media import MediaStore
from rotor.runtime.nats.subscriptions import Subscriptions
from rotor.runtime.stream import OutputStream

log = logging.getLogger("rotor.request_plane")

DEFAULT_REQUEST_TIMEOUT_S = 30.0
EMBED_FILL = 0.8  # the share of the server's max payload one embed message (or its answer) fills
_NUMBER_BYTES = 5  # msgpack's most for a token id (u32) or a float32, with its marker
# After this frontend reconnected to NATS, how long its workers may take to be
# back (they reconnect every 0.5 s and renew their lease every 1 s), and how
# long a request that found nobody then waits before it is sent again.
RECONNECT_GRACE_S = 3.0
RESEND_S = 0.2


def gone(worker_id: str) -> EngineError:
    """The error of a request whose worker NATS found nobody serving."""
    return EngineError(
        f"worker {worker_id} is gone (NATS: no responders)", "unavailable", cause="worker_gone"
    )


def embed_runs(inputs: list[list[int]], width: int, limit: int) -> list[list[list[int]]]:
    """The inputs in order, cut into runs whose request (their token ids) and
    answer (`width` numbers per input) each stay within `limit` bytes; an
    input too large alone is a run of its own."""
    runs: list[list[list[int]]] = []
    run: list[list[int]] = []
    asked = answered = 0
    answer = _NUMBER_BYTES * width + 8
    for ids in inputs:
        size = _NUMBER_BYTES * len(ids) + 8
        if run and (asked + size > limit or answered + answer > limit):
            runs.append(run)
            run, asked, answered = [], 0, 0
        run.append(ids)
        asked += size
        answered += answer
    if run:
        runs.append(run)
    return runs


@dataclass(slots=True)
class _Sent:
    """A request on its way: its worker, how to publish it (again), and the
    connection's reconnect count when it last was."""

    worker: str
    publish: Callable[[], Awaitable[None]]
    epoch: int = -1


class RequestPlane:
    """The frontend's inbox for every remote request's outputs."""

    def __init__(
        self,
        nc: Client,
        frontend_id: str | None = None,
        on_gone: Callable[[str], None] | None = None,
        reconnect_grace: float = RECONNECT_GRACE_S,
        resend_after: float = RESEND_S,
        media: MediaStore | None = None,
    ) -> None:
        """`on_gone(worker_id)`: a request found that nobody serves the
        worker's subjects any more (NATS's "no responders"), other than
        while NATS comes back (`reconnect_grace` seconds after this
        connection reconnected: such a request is sent again after
        `resend_after` seconds). `media`: where images too large for a
        request's message go (None: the store `rotor_media`, its defaults)."""
        self.nc = nc
        self.media = media or MediaStore(nc)
        self.frontend_id = frontend_id or uuid.uuid4().hex[:12]
        self.on_gone = on_gone
        self.reconnect_grace = reconnect_grace
        self.resend_after = resend_after
        self._streams: dict[str, OutputStream] = {}
        self._sent: dict[str, _Sent] = {}  # request id → where it went
        self._reconnects = nc.stats["reconnects"]
        self._reconnected_at: float | None = None  # when this plane first saw the last one
        self._by_worker: dict[str, set[str]] = {}
        self._publishing: set[asyncio.Task[None]] = set()
        self._subs = Subscriptions(nc)
        self._steps = subjects.steps(self.frontend_id)

    async def start(self) -> None:
        await self._subs.add(subjects.responses(self.frontend_id), self._on_msg)
        await self._subs.add(self._steps, self._on_batch)

    async def stop(self) -> None:
        await self._subs.close()

    async def _on_msg(self, msg: Msg) -> None:
        rid = msg.subject.rsplit(".", 1)[-1]
        stream = self._streams.get(rid)
        if stream is None:
            return
        if messages.no_responders(msg):
            sent = self._sent.get(rid)
            if sent is None:
                return
            if self._settling(sent.epoch):
                self._send_again(rid, sent)
            else:
                stream.fail(gone(sent.worker))
                self._found_gone(sent.worker)
            return
        messages.put_message(msg.data, stream)

    def _found_gone(self, worker_id: str) -> None:
        log.warning("worker %s answers no requests (NATS: no responders)", worker_id)
        if self.on_gone is not None:
            self.on_gone(worker_id)

    def reconnected(self) -> None:
        """This frontend's NATS connection came back (its owner calls this
        from the connection's reconnect callback): the streams sent before
        may have lost messages meanwhile, and end now."""
        epoch = self._epoch()
        lost = [rid for rid, sent in self._sent.items() if sent.epoch != epoch]
        if lost:
            log.warning("NATS is back: moving %d stream(s) that may have lost messages", len(lost))
        for rid in lost:
            stream = self._streams.get(rid)
            if stream is not None:
                stream.fail(
                    EngineError(
                        "this frontend's NATS connection came back: messages sent meanwhile are lost",
                        "unavailable",
                    )
                )

    def _epoch(self) -> int:
        """The connection's reconnect count (nats-py counts one before it
        sends what it held back); the first time this plane sees a new one
        is when NATS came back, as far as it knows."""
        count: int = self.nc.stats["reconnects"]
        if count != self._reconnects:
            self._reconnects = count
            self._reconnected_at = asyncio.get_running_loop().time()
        return count

    def _settling(self, epoch: int) -> bool:
        """Whether NATS is coming back for a request published at `epoch`:
        the connection reconnected since, or a moment ago (its workers may
        not have reconnected yet)."""
        if self._epoch() != epoch:
            return True
        at = self._reconnected_at
        return at is not None and asyncio.get_running_loop().time() - at < self.reconnect_grace

    def _send_again(self, rid: str, sent: _Sent) -> None:
        """A request nobody received while NATS comes back: the same again soon."""
        log.debug(
            "request %s: worker %s is not back on NATS yet; sending it again", rid, sent.worker
        )

        async def again() -> None:
            await asyncio.sleep(self.resend_after)
            if self._sent.get(rid) is not sent:  # (its stream ended meanwhile)
                return
            try:
                await sent.publish()
            except Exception as e:  # its stream's silence limit ends it
                log.debug("could not send request %s again: %s", rid, e)

        task = asyncio.get_running_loop().create_task(again())
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _on_batch(self, msg: Msg) -> None:
        messages.put_batch(msg.data, self._streams)

    def worker_gone(self, worker_id: str) -> None:
        for rid in self._by_worker.pop(worker_id, set()):
            stream = self._streams.get(rid)
            if stream is not None:
                stream.fail(
                    EngineError(f"worker {worker_id} is gone", "unavailable", cause="worker_gone")
                )

    def generate(
        self,
        worker_id: str,
        request: EngineRequest,
        request_timeout: float,
        headers: dict[str, str] | None = None,
    ) -> OutputStream:
        """`request` on `worker_id`, its outputs as they come (sent when first
        subscribed; stopping the stream early aborts the request on the
        worker). `headers` (a trace context) go as the NATS message's
        headers, with the subject this frontend takes its streams' batches
        on (`rotor-steps`: a worker that knows it sends them there, one
        message per step; one that does not, to the reply subject)."""
        rid = request.request_id
        headers = {**(headers or {}), subjects.STEPS_HEADER: self._steps}

        def ended() -> None:
            self._streams.pop(rid, None)
            self._sent.pop(rid, None)
            ids = self._by_worker.get(worker_id)
            if ids is not None:
                ids.discard(rid)

        async def publish() -> None:
            sent.epoch = self._epoch()
            data, beside = await self.media.offload(request)  # (images too large go first)
            await self.nc.publish(
                subjects.generate(worker_id),
                data,
                reply=subjects.response(self.frontend_id, rid),
                headers=headers if beside is None else {**headers, subjects.MEDIA_HEADER: beside},
            )

        sent = _Sent(worker_id, publish)

        async def send() -> None:
            self._streams[rid] = stream
            self._sent[rid] = sent
            self._by_worker.setdefault(worker_id, set()).add(rid)
            await publish()

        stream = OutputStream(
            request.n,
            f"worker {worker_id}",
            send,
            abort=lambda: self._publish_soon(subjects.abort(worker_id), rid.encode()),
            on_end=ended,
            silence=messages.SILENCE_S,
            stall=request_timeout,
        )
        return stream

    async def embed(
        self,
        worker_id: str,
        inputs: list[list[int]],
        dimensions: int | None,
        width: int,
        timeout: float,
    ) -> list[list[float]]:
        """The inputs' vectors (`width` numbers each) from one worker, as
        request/reply messages that each fit the server's max payload, all
        at once; EngineError "unavailable" when the worker does not answer in
        `timeout` seconds or is gone."""
        limit = int(self.nc.max_payload * EMBED_FILL)
        runs = embed_runs(inputs, width, limit)
        answers = await asyncio.gather(
            *(self._embed_run(worker_id, run, dimensions, timeout) for run in runs)
        )
        return [vector for answer in answers for vector in answer]

    async def _embed_run(
        self, worker_id: str, inputs: list[list[int]], dimensions: int | None, timeout: float
    ) -> list[list[float]]:
        data = codec.encode_embed_request(inputs, dimensions)
        try:
            reply = await self._request(subjects.embed(worker_id), data, timeout)
        except NoRespondersError:
            self._found_gone(worker_id)
            raise gone(worker_id) from None
        except MaxPayloadError:
            raise EngineError(
                f"an input of {len(inputs[0])} tokens is too large for one NATS message",
                "refused",
                "input",
            ) from None
        except (asyncio.TimeoutError, TimeoutError):
            raise EngineError(
                f"worker {worker_id} did not answer in {timeout:g} s",
                "unavailable",
                cause="timeout",
            ) from None
        try:
            return codec.decode_embeddings(reply.data)
        except codec.CodecError as e:
            raise EngineError(
                f"worker {worker_id} sent a malformed answer: {e}", "internal"
            ) from None

    async def score(self, worker_id: str, pairs: list[ScorePair], timeout: float) -> list[float]:
        """The pairs' scores from one worker, as request/reply messages that
        each fit the server's max payload, all at once; EngineError
        "unavailable" when the worker does not answer in `timeout` seconds or
        is gone."""
        limit = int(self.nc.max_payload * EMBED_FILL)
        runs = embed_runs([p.token_ids for p in pairs], 2, limit)  # (a score: one float64)
        starts, done = [], 0
        for run in runs:
            starts.append(done)
            done += len(run)
        answers = await asyncio.gather(
            *(
                self._score_run(worker_id, pairs[s : s + len(run)], timeout)
                for s, run in zip(starts, runs, strict=True)
            )
        )
        return [score for answer in answers for score in answer]

    async def _score_run(
        self, worker_id: str, pairs: list[ScorePair], timeout: float
    ) -> list[float]:
        data = codec.encode_score_request(pairs)
        reply = await self._ask(subjects.score(worker_id), worker_id, data, timeout)
        try:
            return codec.decode_scores(reply.data)
        except codec.CodecError as e:
            raise EngineError(
                f"worker {worker_id} sent a malformed answer: {e}", "internal"
            ) from None

    async def _ask(self, subject: str, worker_id: str, data: bytes, timeout: float) -> Msg:
        """A score request/reply with one worker; its failures as EngineErrors."""
        try:
            return await self._request(subject, data, timeout)
        except NoRespondersError:
            self._found_gone(worker_id)
            raise gone(worker_id) from None
        except MaxPayloadError:
            raise EngineError(
                "a pair is too large for one NATS message", "refused", "documents"
            ) from None
        except (asyncio.TimeoutError, TimeoutError):
            raise EngineError(
                f"worker {worker_id} did not answer in {timeout:g} s",
                "unavailable",
                cause="timeout",
            ) from None

    async def _request(self, subject: str, data: bytes, timeout: float) -> Msg:
        """A request/reply; one that nobody took while NATS comes back is
        asked again a moment later (NoRespondersError once it is back)."""
        while True:
            epoch = self._epoch()
            try:
                return await self.nc.request(subject, data, timeout=timeout)
            except NoRespondersError:
                if not self._settling(epoch):
                    raise
            await asyncio.sleep(self.resend_after)

    def release_kv(self, worker_id: str, transfer_id: str) -> None:
        """Tell a prefill worker its pinned blocks for `transfer_id` are not
        wanted: a fetch of nothing, with no reply asked for."""
        data = msgpack.packb({"transfer_id": transfer_id, "hashes": []})
        self._publish_soon(subjects.kv_fetch(worker_id), data)

    def _publish_soon(self, subject: str, data: bytes) -> None:
        """Publish without waiting for it (a lost abort costs the worker the
        rest of that request, never the frontend a stuck reader)."""

        async def publish() -> None:
            try:
                await self.nc.publish(subject, data)
            except Exception as e:
                log.debug("could not publish to %s: %s", subject, e)

        task = asyncio.get_running_loop().create_task(publish())
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)
