"""One fake worker link for the router's tests (router/pool.WorkerLink):
each request asked of a worker gets a real transport stream
(runtime/stream.OutputStream) that the test feeds as that worker would —
outputs, its end, its error, or the worker gone — and the link records what
it was asked, what was aborted, and which prefill holds were released."""

from __future__ import annotations

from typing import Any

from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest
from rotor.runtime.stream import OutputStream


class Worker:
    """One request on one worker, as the test plays it (`sent` once its
    stream has sent it)."""

    def __init__(self, link: FakeLink, worker_id: str, request: EngineRequest) -> None:
        self.worker_id, self.request = worker_id, request
        self.sent = False

        async def send() -> None:
            self.sent = True

        self.stream = OutputStream(
            request.n, f"worker {worker_id}", send, abort=lambda: link.aborted.append(worker_id)
        )
        self._seq = 0

    def output(self, *token_ids: int, **fields: Any) -> None:
        """One output message (token ids, and any EngineOutput field)."""
        self._send("outputs", [EngineOutput(token_ids=list(token_ids), **fields)])

    def done(self) -> None:
        self._send("done", None)

    def error(self, error: EngineError) -> None:
        """The engine's error: its stream is over."""
        self._send("error", error)

    def gone(self, cause: str = "worker_gone") -> None:
        """The transport knows the worker is gone."""
        self.stream.fail(EngineError("gone", "unavailable", cause=cause))  # type: ignore[arg-type]

    def _send(self, kind: Any, payload: Any) -> None:
        self.stream.put(self._seq, kind, payload)
        self._seq += 1


class FakeLink:
    """A pool's link: `asked` holds a Worker per request sent, in order."""

    def __init__(self) -> None:
        self.asked: list[Worker] = []
        self.aborted: list[str] = []
        self.released: list[tuple[str, str]] = []
        self.gone: list[str] = []

    def generate(
        self, worker_id: str, request: EngineRequest, timeout: float, headers: Any = None
    ) -> OutputStream:
        worker = Worker(self, worker_id, request)
        self.asked.append(worker)
        return worker.stream

    async def embed(self, *args: Any) -> list[list[float]]:
        raise AssertionError("not asked of this link")

    async def score(self, *args: Any) -> list[float]:
        raise AssertionError("not asked of this link")

    def worker_gone(self, worker_id: str) -> None:
        self.gone.append(worker_id)

    def release_kv(self, worker_id: str, transfer_id: str) -> None:
        self.released.append((worker_id, transfer_id))

    def last(self) -> Worker:
        return self.asked[-1]
