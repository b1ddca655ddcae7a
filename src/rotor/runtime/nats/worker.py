"""The worker side: one engine served on NATS.

It stores its card (with the tokenizer) in the object store under its
content hash, renews its lease in the workers bucket and on `rotor.lease.<id>`
every second (with its load), answers requests on its own subject by
streaming numbered messages to the reply subject, stops a request the moment
an abort arrives, relays its engine's KV events, and on SIGTERM withdraws its
lease first, finishes what it has within the grace period, then stops.

With a canary (runtime/canary.py) it watches its engine: once the engine
fails its canary, its lease says it is unhealthy (frontends route nothing
to it), it ends the requests it holds with an "unavailable" error (cause
"unhealthy": the frontends move them to another worker) and refuses new
ones the same way, until a canary answers again.

A frontend that dies sends no aborts: its requests would run on to their
end for nobody. The worker's batches to a frontend carry a reply subject of
the worker's (`rotor.worker.<id>.unread.<frontend>`), where NATS answers "no
responders" once nobody reads the frontend's subject; the worker then stops
every request of that frontend. (A frontend only cut off from NATS a moment
moves those requests anyway when it is back: runtime/nats/request_plane.py.)

A request whose images travel beside it (its `rotor-media` header) gets
them from the media store (runtime/nats/media.py) on its own task, before
its engine sees it; one that is not there ends the request "unavailable".
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import msgpack
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from rotor import tracing
from rotor.engines.base import (
    AdapterSource,
    Embedder,
    Engine,
    KVEventSource,
    KVHandover,
    KVHold,
    Scorer,
)
from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol import codec
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, EngineStream, pulled
from rotor.protocol.kv import KVEvent
from rotor.protocol.lease import LEASE_TTL_S, RENEW_S, Lease, Role
from rotor.runtime.canary import Canary
from rotor.runtime.nats import messages as wire
from rotor.runtime.nats import subjects
from rotor.runtime.nats.batcher import StepBatcher
from rotor.runtime.nats.kv_delay import DelayedKVEvents
from rotor.runtime.nats.media import MediaStore
from rotor.runtime.nats.subscriptions import Subscriptions
from rotor.runtime.relay import Relay
from rotor.tracing import NO_SPAN, Span
from rotor.tracing.generate import follow, remote_span

log = logging.getLogger("rotor.worker")

# How long a decode worker waits for a prefill worker to answer a KV fetch
# before it computes the prompt itself.
KV_FETCH_TIMEOUT_S = 5.0
# What a stream message costs in a batch beyond its payload (id, numbers,
# framing), and what a KV event costs beyond its block hashes: sizes the
# batches (batcher.py).
ENTRY_BYTES = 48
KV_EVENT_BYTES = 64
HASH_BYTES = 9  # msgpack's most for a u64


class CardConflict(RuntimeError):
    """Another live worker serves this model name with a different tokenizer or template."""


@dataclass
class WorkerIdentity:
    worker_id: str
    address: str

    @classmethod
    def new(cls) -> WorkerIdentity:
        return cls(uuid.uuid4().hex[:16], f"{socket.gethostname()}:{os.getpid()}")


def compat_hash(card: ModelCard) -> str:
    """What cards of one model must agree on: the tokenizer and the templates."""
    return f"{card.tokenizer_hash or '-'}:{card.template_hash()}"


class WorkerService:
    def __init__(
        self,
        nc: Client,
        engine: Engine,
        tokenizer: Tokenizer | None,
        identity: WorkerIdentity | None = None,
        role: Role = "agg",
        canary: Canary | None = None,
        kv_events_delay: float = 0.0,
        media: MediaStore | None = None,
    ) -> None:
        """`canary`: the watch over the engine's health (None: none).
        `kv_events_delay`: seconds each step's KV events are held back
        (`--kv-events-delay-ms`, a test switch; 0: none). `media`: where
        requests' images too large for their message are (None: `rotor_media`)."""
        self.nc = nc
        self.media = media or MediaStore(nc)
        self.engine = engine
        self.identity = identity or WorkerIdentity.new()
        self.card_bytes = codec.encode_card(engine.card, tokenizer)
        card, _ = codec.decode_card(self.card_bytes)  # with its tokenizer hash filled in
        self.lease = Lease(
            worker_id=self.identity.worker_id,
            model=engine.card.name,
            card=hashlib.sha256(self.card_bytes).hexdigest(),
            compat=compat_hash(card),
            address=self.identity.address,
            role=role,
        )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._serving: dict[str, _Serving] = {}  # the generate requests of `_tasks`
        self._subs = Subscriptions(nc)
        self.canary = canary
        self._watch: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._kv_subject = subjects.kv_events(self.identity.worker_id)
        self._leaving = False
        # stream messages, one NATS message per frontend per step
        self._batches = StepBatcher(nc, self._reply_of)
        self._of_frontend: dict[str, set[str]] = {}  # steps subject → its requests here
        self._kv_delay = (
            DelayedKVEvents(kv_events_delay, self._publish_kv_event) if kv_events_delay else None
        )

    @property
    def worker_id(self) -> str:
        return self.identity.worker_id

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        await self._publish_card()
        await self._check_peers()
        self._batches.start()
        wid = self.worker_id
        await self._subs.add(subjects.generate(wid), self._on_generate)
        await self._subs.add(subjects.abort(wid), self._on_abort)
        if isinstance(self.engine, Embedder) and self.engine.card.capabilities.embedding_dim:
            await self._subs.add(subjects.embed(wid), self._on_embed)
        if isinstance(self.engine, Scorer) and self.engine.card.capabilities.scores_pairs:
            await self._subs.add(subjects.score(wid), self._on_score)
        await self._subs.add(subjects.kv_snapshot(wid), self._on_kv_snapshot)
        await self._subs.add(subjects.unread_all(wid), self._on_unread)
        if isinstance(self.engine, KVHold):
            await self._subs.add(subjects.kv_fetch(wid), self._on_kv_fetch)
        if isinstance(self.engine, KVHandover):
            self.engine.kv_fetcher(self._fetch_kv)
        if isinstance(self.engine, KVEventSource):
            self.engine.kv_events(self._relay_kv_event)
        await self._renew()
        self._renewer = asyncio.create_task(self._renew_forever(), name="lease-renewal")
        if self.canary is not None:
            self._watch = asyncio.create_task(self._watch_health(), name="canary")
        log.info("worker %s serves %r", wid, self.lease.model)

    async def republish(self) -> None:
        """After NATS came back (perhaps empty): the card and the lease again."""
        try:
            await self._publish_card()
            await self._renew()
        except Exception as e:
            log.warning("worker %s: could not re-register yet: %s", self.worker_id, e)

    async def withdraw(self) -> None:
        """No new requests from now on: the lease says so, then goes."""
        self._leaving = True
        self.lease.status = "leaving"
        try:
            await self.nc.publish(subjects.lease(self.worker_id), self.lease.encode())
            kv = await self.nc.jetstream().key_value(subjects.WORKERS_BUCKET)
            await kv.delete(self.worker_id)
            await self.nc.flush(timeout=2)
        except Exception as e:  # NATS gone: the lease expires on its own
            log.warning("worker %s: could not withdraw its lease: %s", self.worker_id, e)

    async def drain(self, grace_s: float) -> None:
        """Let running requests finish for up to `grace_s`, then stop the rest."""
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            log.info("worker %s: finishing %d request(s)", self.worker_id, len(pending))
            _, late = await asyncio.wait(pending, timeout=grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await self._batches.flush()  # the last messages of what finished

    async def stop(self) -> None:
        for task in (self._watch, self._renewer):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.canary is not None:
            self.canary.stop()
        if isinstance(self.engine, KVEventSource):
            self.engine.kv_events(None)  # nobody relays them any more
        if self._kv_delay is not None:
            self._kv_delay.close()
        await self._subs.close()
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self._batches.stop()

    # -- discovery -------------------------------------------------------------------

    async def _publish_card(self) -> None:
        js = self.nc.jetstream()
        try:
            store = await js.object_store(subjects.CARDS_STORE)
        except (BucketNotFoundError, NotFoundError):
            store = await js.create_object_store(subjects.CARDS_STORE)
        try:
            await store.get_info(self.lease.card)
        except Exception:
            await store.put(self.lease.card, self.card_bytes)

    async def _bucket(self) -> KeyValue:
        js = self.nc.jetstream()
        try:
            return await js.key_value(subjects.WORKERS_BUCKET)
        except (BucketNotFoundError, NotFoundError):
            return await js.create_key_value(
                bucket=subjects.WORKERS_BUCKET, ttl=2 * LEASE_TTL_S, history=1
            )

    async def _check_peers(self) -> None:
        """Refuse to join a pool whose cards disagree with ours."""
        kv = await self._bucket()
        try:
            keys = await kv.keys()
        except Exception:  # no keys yet
            return
        for key in keys:
            try:
                entry = await kv.get(key)
                peer = Lease.decode(entry.value or b"")
            except Exception:
                continue
            if peer.model == self.lease.model and peer.compat != self.lease.compat:
                raise CardConflict(
                    f"worker {peer.worker_id} already serves {peer.model!r} with a different "
                    f"tokenizer or chat template ({peer.compat} != {self.lease.compat}); "
                    f"give this model another --model-name"
                )

    async def _renew(self) -> None:
        """The lease with the current load; while leaving, only to the frontends
        that already know it (so its running requests are not taken for dead)."""
        lease = self.lease
        lease.state = self.engine.state()
        if isinstance(self.engine, AdapterSource):
            lease.loras = self.engine.adapters()
        data = lease.encode()
        await self.nc.publish(subjects.lease(self.worker_id), data)
        if not self._leaving:
            kv = await self._bucket()
            await kv.put(self.worker_id, data)

    async def adapters_changed(self) -> None:
        """A LoRA adapter was loaded or unloaded: frontends hear it now, not
        at the next renewal."""
        try:
            await self._renew()
        except Exception as e:  # the next renewal tries again
            log.warning("worker %s: could not renew its lease: %s", self.worker_id, e)

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(RENEW_S)
            try:
                await self._renew()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # NATS restarting: say so, keep trying
                log.warning("worker %s: lease renewal failed: %s", self.worker_id, e)
                try:
                    await self._publish_card()
                except Exception:
                    pass

    # -- health (the canary) -----------------------------------------------------------

    async def _watch_health(self) -> None:
        canary = self.canary
        assert canary is not None
        while True:
            await self.check_health()
            await canary.sleep(canary.policy.interval)

    async def check_health(self) -> None:
        """One look of the canary, and what a change of health does: the
        lease says it at once; unhealthy, the requests held end as
        "unavailable" (cause "unhealthy"), so the frontends move them."""
        canary = self.canary
        if canary is None:
            return
        healthy = canary.check()
        if healthy is None:
            return
        self.lease.healthy = healthy
        try:
            await self._renew()
        except Exception as e:  # the next renewal says it
            log.warning("worker %s: could not renew its lease: %s", self.worker_id, e)
        if not healthy:
            await self.fail_requests(self._unhealthy_error())

    def _unhealthy_error(self) -> EngineError:
        return EngineError(
            f"worker {self.worker_id}'s engine is not answering (it failed its canary)",
            "unavailable",
            cause="unhealthy",
        )

    async def fail_requests(self, error: EngineError) -> None:
        """End every generate request this worker holds with `error` (their
        engine streams are stopped), the error being each stream's last message."""
        cancelled: list[_Serving] = []
        ending = [serving for serving in self._serving.values() if not serving.reply.ended]
        for serving in ending:
            if serving.relay is not None and serving.stream is not None:
                serving.relay.end(error)  # its end goes into its batch
                serving.stream.stop()  # and nothing after it
            else:  # not begun, or sent one message at a time: stopped, then told
                serving.task.cancel()
                cancelled.append(serving)
        if cancelled:
            await asyncio.gather(*(s.task for s in cancelled), return_exceptions=True)
            for serving in cancelled:
                if not serving.reply.ended:
                    await serving.reply.send(wire.ERROR, codec.encode_error(error))
        if ending:
            log.warning("worker %s: ended %d request(s): %s", self.worker_id, len(ending), error)

    # -- requests --------------------------------------------------------------------

    async def _on_generate(self, msg: Msg) -> None:
        if not msg.reply:
            return
        try:
            request = codec.decode_request(msg.data)
        except codec.CodecError as e:
            error = EngineError(f"malformed request: {e}", "internal")
            await self.nc.publish(msg.reply, wire.message(0, wire.ERROR, codec.encode_error(error)))
            return
        refusal = None
        if self._leaving:
            refusal = EngineError(
                f"worker {self.worker_id} is shutting down", "unavailable", cause="shutting_down"
            )
        elif not self.lease.healthy:  # (a frontend that predates the lease's field)
            refusal = self._unhealthy_error()
        if refusal is not None:
            refused = codec.encode_error(refusal)
            await self.nc.publish(msg.reply, wire.message(0, wire.ERROR, refused))
            return
        rid = request.request_id
        extra = {"rotor.worker_id": self.worker_id, "rotor.role": self.lease.role}
        span = remote_span(request, self.engine, msg.headers, extra)  # tracing on: its span
        # A frontend that takes its streams in batches names where (subjects.steps).
        steps = msg.headers.get(subjects.STEPS_HEADER) if msg.headers else None
        reply = _Reply(self.nc, self._batches, rid, msg.reply, steps)
        beside = msg.headers.get(subjects.MEDIA_HEADER) if msg.headers else None
        task = asyncio.create_task(self._serve(request, reply, span, beside), name=f"serve-{rid}")
        self._tasks[rid] = task
        self._serving[rid] = _Serving(task, reply)
        if steps is not None:
            self._of_frontend.setdefault(steps, set()).add(rid)

        def over(_: object) -> None:
            self._tasks.pop(rid, None)
            self._serving.pop(rid, None)
            if steps is None:
                return
            rids = self._of_frontend.get(steps)
            if rids is not None:
                rids.discard(rid)
                if not rids:
                    del self._of_frontend[steps]

        task.add_done_callback(over)

    async def _serve(
        self,
        request: EngineRequest,
        out_to: _Reply,
        span: Span = NO_SPAN,
        beside: str | None = None,
    ) -> None:
        """The request's outputs, numbered, to its frontend: into that
        frontend's batches (`out_to.steps`), each put by the engine in its
        own turn (`Relay`: no task is woken per token here either), or one
        message each to its reply subject (a frontend that takes no
        batches). `beside`: its `rotor-media` header, the images to read
        from the media store first."""
        tracing.use(span)  # this task's (and its children's) span: a KV fetch's parent
        steps = out_to.steps

        async def heartbeat() -> None:
            while True:
                out_to.quiet = True
                await asyncio.sleep(wire.HEARTBEAT_S)
                if out_to.quiet:
                    await out_to.send(wire.HEARTBEAT)

        beat = asyncio.create_task(heartbeat())
        stream: EngineStream | None = None
        try:
            if beside:
                try:
                    request = await self.media.filled(request, beside)
                except EngineError as e:
                    span.fail(e.message, e.cause)
                    await out_to.send(wire.ERROR, codec.encode_error(e))
                    return
            stream = follow(span, self.engine.generate(request))  # (itself when tracing is off)
            if steps is not None:
                relay = Relay(out_to.add_output, out_to.add_end)  # the end in the same batch
                serving = self._serving.get(request.request_id)
                if serving is not None:  # (fail_requests may end it)
                    serving.relay, serving.stream = relay, stream
                stream.subscribe(relay)
                await relay.over
            else:
                await self._one_by_one(stream, out_to)
        except asyncio.CancelledError:
            span.set({"rotor.aborted": True})
            raise
        finally:
            if stream is not None:
                stream.stop()  # (over already, or aborted: it stops what still runs)
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
            span.end()

    async def _one_by_one(self, stream: EngineStream, out_to: _Reply) -> None:
        """The request's outputs as one message each, to a frontend that
        takes no batches."""
        outputs = pulled(stream)
        try:
            async for out in outputs:
                await out_to.send(wire.OUTPUTS, codec.encode_outputs([out], False))
            await out_to.send(wire.DONE)
        except EngineError as e:
            await out_to.send(wire.ERROR, codec.encode_error(e))
        except Exception as e:
            log.exception("request %s failed on worker %s", out_to.rid, self.worker_id)
            await out_to.send(wire.ERROR, codec.encode_error(EngineError(str(e), "internal")))
        finally:
            await outputs.aclose()

    async def _on_embed(self, msg: Msg) -> None:
        """Request/reply: the vectors of the inputs' token ids, on a task of
        its own (one slow batch must not hold up the next), which a drain waits for."""
        if msg.reply:
            self._answer_on_task("embed", self._embed(msg.data, msg.reply))

    async def _on_score(self, msg: Msg) -> None:
        """Request/reply: the scores of the pairs' token ids, as `_on_embed`."""
        if msg.reply:
            self._answer_on_task("score", self._score(msg.data, msg.reply))

    def _answer_on_task(self, kind: str, answer: Coroutine[Any, Any, None]) -> None:
        key = f"{kind}-{uuid.uuid4().hex}"
        task = asyncio.create_task(answer, name=key)
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))

    async def _score(self, data: bytes, reply: str) -> None:
        engine = self.engine
        assert isinstance(engine, Scorer)

        async def scores() -> bytes:
            return codec.encode_scores(await engine.score(codec.decode_score_request(data)))

        answer = await self._pooling_answer("score", scores, codec.encode_score_error)
        await self.nc.publish(reply, answer)  # (the frontend sizes its runs to fit)

    async def _embed(self, data: bytes, reply: str) -> None:
        engine = self.engine
        assert isinstance(engine, Embedder)

        async def vectors() -> bytes:
            inputs, dimensions = codec.decode_embed_request(data)
            return codec.encode_embeddings(await engine.embed(inputs, dimensions))

        answer = await self._pooling_answer("embed", vectors, codec.encode_embed_error)
        try:
            await self.nc.publish(reply, answer)
        except MaxPayloadError:  # (the frontend sizes its runs so that this cannot happen)
            too_big = EngineError("the vectors are more than one NATS message holds", "internal")
            await self.nc.publish(reply, codec.encode_embed_error(too_big))

    async def _pooling_answer(
        self,
        kind: str,
        work: Callable[[], Awaitable[bytes]],
        encode_error: Callable[[EngineError], bytes],
    ) -> bytes:
        """An embed or score request's reply: what `work` (decode the request,
        run the engine, encode) answers, or the error that stopped it: a
        worker that is leaving, a request it cannot read, the engine's."""
        try:
            if self._leaving:
                raise EngineError(
                    f"worker {self.worker_id} is shutting down",
                    "unavailable",
                    cause="shutting_down",
                )
            try:
                return await work()
            except codec.CodecError as e:
                raise EngineError(f"malformed {kind} request: {e}", "internal") from None
        except EngineError as e:
            return encode_error(e)
        except Exception as e:
            log.exception("a %s request failed on worker %s", kind, self.worker_id)
            return encode_error(EngineError(str(e), "internal"))

    def _reply_of(self, subject: str) -> str:
        """A batch to a frontend carries this worker's unread subject for it."""
        if subject.startswith(subjects.STEPS_PREFIX):
            return subjects.unread(self.worker_id, subject[len(subjects.STEPS_PREFIX) :])
        return ""

    async def _on_unread(self, msg: Msg) -> None:
        """NATS says nobody reads a frontend's batches: it is gone, and its
        requests here stop."""
        if not wire.no_responders(msg):
            return
        frontend = msg.subject.rsplit(".", 1)[-1]
        rids = self._of_frontend.pop(subjects.steps(frontend), set())
        if rids:
            log.warning(
                "worker %s: frontend %s is gone (NATS: no responders); stopping its %d request(s)",
                self.worker_id,
                frontend,
                len(rids),
            )
        for rid in rids:
            self.engine.abort(rid)
            task = self._tasks.get(rid)
            if task is not None:
                task.cancel()

    async def _on_abort(self, msg: Msg) -> None:
        rid = msg.data.decode(errors="replace")
        self.engine.abort(rid)
        task = self._tasks.get(rid)
        if task is not None:
            task.cancel()

    # -- KV events -------------------------------------------------------------------

    def _relay_kv_event(self, event: KVEvent) -> None:
        """From the engine's cache, in order: a step's events go as one message
        (held back first, with a delay)."""
        if self._kv_delay is not None:
            self._kv_delay.add(event)
        else:
            self._publish_kv_event(event)

    def _publish_kv_event(self, event: KVEvent) -> None:
        size = KV_EVENT_BYTES + HASH_BYTES * len(getattr(event, "block_hashes", ()))
        self._batches.add(self._kv_subject, event, size, codec.encode_kv_events)

    async def _on_kv_snapshot(self, msg: Msg) -> None:
        if not isinstance(self.engine, KVEventSource) or not msg.reply:
            return
        snapshot = self.engine.kv_events(self._relay_kv_event)
        await self.nc.publish(msg.reply, codec.encode_kv_snapshot(snapshot))

    # -- KV handover (disaggregated serving) ---------------------------------------------

    async def _on_kv_fetch(self, msg: Msg) -> None:
        """As a prefill worker: a decode worker takes the blocks it asks for
        (a request/acknowledge; the KV data itself is the engine's business),
        or the frontend drops a hold nobody will fetch (no reply asked)."""
        assert isinstance(self.engine, KVHold)
        span = NO_SPAN
        if msg.headers and "traceparent" in msg.headers:  # a traced decode worker's fetch
            span = tracing.remote(
                "rotor.kv_release", msg.headers, {"rotor.worker_id": self.worker_id}
            )
        with span:
            try:
                ask = msgpack.unpackb(msg.data)
                asked = list(ask["hashes"])
                granted = self.engine.kv_release(str(ask["transfer_id"]), asked)
            except Exception as e:  # a malformed fetch: nothing handed over
                log.warning("worker %s: a KV fetch could not be read: %s", self.worker_id, e)
                span.fail(f"malformed fetch: {e}")
                asked, granted = [], []
            span.set({"rotor.kv.blocks_asked": len(asked), "rotor.kv.blocks_granted": len(granted)})
            if msg.reply:
                await self.nc.publish(msg.reply, msgpack.packb({"hashes": granted}))

    async def _fetch_kv(self, transfer: dict[str, Any], hashes: list[int]) -> list[int]:
        """As a decode worker: ask the prefill worker that holds `transfer` for
        these blocks; the hashes it handed over."""
        data = msgpack.packb({"transfer_id": transfer.get("transfer_id"), "hashes": hashes})
        reply = await self.nc.request(
            subjects.kv_fetch(str(transfer["worker"])),
            data,
            timeout=KV_FETCH_TIMEOUT_S,
            headers=tracing.current().headers(),  # tracing on: the fetch's span crosses over
        )
        return [int(h) for h in msgpack.unpackb(reply.data)["hashes"]]


@dataclass
class _Serving:
    """A generate request being served: its task, where its messages go,
    and the engine's stream and the relay it is subscribed to (once it is)."""

    task: asyncio.Task[None]
    reply: _Reply
    relay: Relay | None = None
    stream: EngineStream | None = None


class _Reply:
    """Where one request's stream messages go, numbered: its frontend's
    batch (`steps`, added at once), or its own reply subject (published)."""

    __slots__ = ("_nc", "_batches", "_rid", "_reply", "_steps", "_seq", "quiet", "ended")

    def __init__(
        self, nc: Client, batches: StepBatcher, rid: str, reply: str, steps: str | None
    ) -> None:
        self._nc, self._batches = nc, batches
        self._rid, self._reply, self._steps = rid, reply, steps
        self._seq = 0
        self.quiet = False  # nothing was sent since the heartbeat's last look
        self.ended = False  # its last message (done or error) went

    def add(self, kind: str, payload: bytes | None = None) -> None:
        """To the batch (a request whose frontend takes batches)."""
        steps = self._steps
        assert steps is not None, "a stream without batches is sent, not added"
        size = ENTRY_BYTES + (len(payload) if payload else 0)
        self._batches.add(steps, (self._rid, self._seq, kind, payload), size, wire.batch)
        self._seq += 1
        self.quiet = False
        self.ended = self.ended or kind in (wire.DONE, wire.ERROR)

    @property
    def rid(self) -> str:
        return self._rid

    @property
    def steps(self) -> str | None:
        """The frontend's batch subject (None: it takes no batches)."""
        return self._steps

    def add_output(self, output: EngineOutput) -> None:
        """An output the engine put, to the batch."""
        self.add(wire.OUTPUTS, codec.encode_outputs([output]))

    def add_end(self, error: EngineError | None) -> None:
        """The stream's end (the engine's), to the batch."""
        if error is None:
            self.add(wire.DONE)
        else:
            self.add(wire.ERROR, codec.encode_error(error))

    async def send(self, kind: str, payload: bytes | None = None) -> None:
        if self._steps is not None:
            self.add(kind, payload)
            return
        await self._nc.publish(self._reply, wire.message(self._seq, kind, payload))
        self._seq += 1
        self.quiet = False
        self.ended = self.ended or kind in (wire.DONE, wire.ERROR)
