"""A worker's canary: does its engine still answer?

A worker's lease and heartbeats come from its event loop, not from its
engine, so an engine that is alive but wedged (a hung device, a step that
never ends) would hold its requests while the worker looks fine. The canary
watches the engine's own count of steps (`EngineState.steps`: the mocker's
step loop counts them, vLLM's stat logger its engine core's outputs) and,
once `after` seconds pass with none — idle, or holding requests (counted
from when the requests came, if they came to an idle engine: a long first
step is not a wedge) — sends a canary: a 1-token request through the engine's own `generate`, as any
request goes. Its first output (or a clean end) within `timeout` seconds
keeps the engine healthy. No answer makes it unhealthy, unless the engine
stepped meanwhile (then the canary only waited behind a full batch: busy,
not wedged). While unhealthy, a canary goes every `timeout` seconds, and the
first that answers makes the engine healthy again.

`Canary.check` is one look at a time on an injectable clock, and says when
the health changed; the worker acts on that (runtime/nats/worker.py: its
lease says so, and it ends its requests as "unavailable" so that they move).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rotor.model.card import ModelCard
from rotor.protocol.engine import (
    EngineClient,
    EngineOutput,
    EngineRequest,
    EngineStream,
    SamplingParams,
    StopParams,
)

log = logging.getLogger("rotor.worker")

# A step every 10 s is what Dynamo waits for before its canary too
# (DYN_CANARY_WAIT_TIME). The canary's own answer takes one step: 5 s is far
# more than one step of a busy GPU or of vLLM on CPU, yet a wedged engine is
# found within 15 s of its last step, well inside a client's patience and
# the frontend's --request-timeout (30 s) for an answer that has begun.
DEFAULT_AFTER_S = 10.0
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class CanaryPolicy:
    """When a canary goes (`after` seconds without a step; 0: never) and how
    long it may take to answer (`timeout`)."""

    after: float = DEFAULT_AFTER_S
    timeout: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if not self.after >= 0:
            raise ValueError(f"canary after must be >= 0 seconds, got {self.after}")
        if not self.timeout > 0:
            raise ValueError(f"canary timeout must be > 0 seconds, got {self.timeout}")

    @property
    def on(self) -> bool:
        return self.after > 0

    @property
    def interval(self) -> float:
        """How often the worker looks: a quarter of the shorter time, at most a second."""
        return max(0.05, min(1.0, self.after / 4, self.timeout / 4))


class _Answer:
    """The sink of one canary's stream: whether the engine answered."""

    __slots__ = ("answered", "error")

    def __init__(self) -> None:
        self.answered = False
        self.error: Exception | None = None

    def put(self, item: EngineOutput) -> bool:
        if item.error is None:
            self.answered = True
        return True

    def end(self, error: Exception | None) -> None:
        if error is None:
            self.answered = True
        else:
            self.error = error


@dataclass
class _Probe:
    """One canary on its way."""

    request_id: str
    stream: EngineStream
    answer: _Answer
    sent_at: float


def canary_request(card: ModelCard, request_id: str) -> EngineRequest:
    """One token, greedy, from a one-token prompt (the model's first EOS id):
    the least an engine can be asked. `echo_text` is for a text-out echo
    engine, which has no token ids."""
    return EngineRequest(
        request_id,
        card.name,
        card.eos_token_ids[:1] or [0],
        sampling=SamplingParams(temperature=0.0),
        stop=StopParams(max_tokens=1, ignore_eos=True),
        annotations={"echo_text": "."},
    )


class Canary:
    """The canary of one engine (`name`: whose, for request ids and logs)."""

    def __init__(
        self,
        engine: EngineClient,
        card: ModelCard,
        policy: CanaryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        name: str = "worker",
    ) -> None:
        self.engine = engine
        self.card = card
        self.policy = policy or CanaryPolicy()
        self.clock = clock
        self.name = name
        self.healthy = True
        self.sent = 0  # canaries sent
        self.failed = 0  # canaries not answered in time
        # How the worker waits between looks (tests make it wait for them).
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self._ids = itertools.count(1)
        state = engine.state()
        self._steps = state.steps
        self._busy = state.active_requests > 0  # it held requests at the last look
        # the last step seen, the last canary answered, or when work came to it idle
        self._progress_at = clock()
        self._probe: _Probe | None = None

    @property
    def waiting(self) -> bool:
        """A canary is on its way."""
        return self._probe is not None

    def check(self) -> bool | None:
        """One look: the engine's steps read, a canary sent, answered or given
        up as due. The new health when it changed, else None."""
        now = self.clock()
        state = self.engine.state()
        if state.steps != self._steps:
            self._steps, self._progress_at = state.steps, now
        busy = state.active_requests > (self._probe is not None)  # (a canary is not work)
        if busy and not self._busy and self._probe is None:
            self._progress_at = now  # work came to an idle engine: its wait starts now
        self._busy = busy
        changed: bool | None = None
        probe = self._probe
        if probe is not None:
            if probe.answer.answered:
                self._end(probe)
                self._progress_at = now
                if not self.healthy:
                    self.healthy = changed = True
                    log.warning("worker %s: a canary answered: its engine is healthy", self.name)
                return changed
            if now - probe.sent_at < self.policy.timeout:
                return None
            self._end(probe)
            if self.healthy and self._progress_at > probe.sent_at:
                return None  # it stepped meanwhile: the canary waited behind a full batch
            self.failed += 1
            if self.healthy:
                self.healthy = changed = False
                why = f"failed: {probe.answer.error}" if probe.answer.error else "no answer"
                log.error(
                    "worker %s: its engine took no step for %.0f s and a canary had %s "
                    "within %g s: unhealthy",
                    self.name,
                    now - self._progress_at,
                    why,
                    self.policy.timeout,
                )
        if not self.healthy or now - self._progress_at >= self.policy.after:
            self._send(now)
        return changed

    def stop(self) -> None:
        """A canary on its way is stopped (the worker leaves)."""
        if self._probe is not None:
            self._end(self._probe)

    def _send(self, now: float) -> None:
        rid = f"canary-{self.name}-{next(self._ids)}"
        answer = _Answer()
        stream = self.engine.generate(canary_request(self.card, rid))
        self._probe = _Probe(rid, stream, answer, now)
        self.sent += 1
        try:
            stream.subscribe(answer)
        except Exception as e:  # an engine that cannot even start it: no answer
            answer.error = e

    def _end(self, probe: _Probe) -> None:
        self._probe = None
        probe.stream.stop()  # (over already, or aborted on the engine)
