"""The canary's decisions (runtime/canary.py), one look at a time on a fake
clock over a fake engine: no canary while the engine steps; one after
`after` seconds without a step (idle, or holding requests since they
came); an answer keeps
it healthy, none within `timeout` makes it unhealthy (a failed canary too),
a canary that waited while the engine stepped does not; unhealthy, a canary
goes every `timeout` seconds and the first answer makes it healthy again."""

from __future__ import annotations

import pytest

from rotor.model.card import ModelCard
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest, EngineState
from rotor.protocol.flow import Sink
from rotor.runtime.canary import Canary, CanaryPolicy, canary_request

from support.clock import FakeClock

POLICY = CanaryPolicy(after=10, timeout=5)


class Stream:
    """One request's stream, played by the test."""

    def __init__(self, request: EngineRequest) -> None:
        self.request = request
        self.sink: Sink[EngineOutput] | None = None
        self.stopped = False

    def subscribe(self, sink: Sink[EngineOutput]) -> None:
        self.sink = sink

    def resume(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True

    def answer(self) -> None:
        assert self.sink is not None
        self.sink.put(EngineOutput(token_ids=[7], finish="length"))
        self.sink.end(None)


class Engine:
    """An engine whose steps, requests and streams the test sets."""

    def __init__(self) -> None:
        self.steps = 0
        self.active = 0
        self.asked: list[Stream] = []

    def state(self) -> EngineState:
        return EngineState(steps=self.steps, active_requests=self.active)

    def generate(self, request: EngineRequest) -> Stream:
        self.asked.append(Stream(request))
        return self.asked[-1]


def canary(policy: CanaryPolicy = POLICY) -> tuple[Canary, Engine, FakeClock]:
    engine, clock = Engine(), FakeClock(1000.0)
    return Canary(engine, ModelCard("m", eos_token_ids=[2]), policy, clock, "w1"), engine, clock


def test_an_engine_that_steps_gets_no_canary() -> None:
    watch, engine, clock = canary()
    for _ in range(10):
        clock.now += 9
        engine.steps += 1
        assert watch.check() is None
    assert engine.asked == [] and watch.healthy


def test_an_idle_engine_gets_a_canary_after_its_time_and_stays_healthy() -> None:
    watch, engine, clock = canary()
    clock.now += 9.9
    assert watch.check() is None and not engine.asked
    clock.now += 0.1
    assert watch.check() is None and len(engine.asked) == 1 and watch.waiting
    request = engine.asked[0].request
    assert request.request_id == "canary-w1-1" and request.token_ids == [2]
    assert request.stop.max_tokens == 1 and request.stop.ignore_eos
    clock.now += 1
    engine.asked[0].answer()
    assert watch.check() is None and watch.healthy and not watch.waiting
    assert engine.asked[0].stopped
    clock.now += 9.9  # the answer counts as a step: the next canary in 10 s
    assert watch.check() is None and len(engine.asked) == 1
    clock.now += 0.1
    watch.check()
    assert len(engine.asked) == 2 and watch.sent == 2


def test_no_answer_in_time_is_unhealthy_until_a_canary_answers() -> None:
    watch, engine, clock = canary()
    clock.now += 10
    watch.check()
    clock.now += 4.9
    assert watch.check() is None  # still waiting
    clock.now += 0.1
    assert watch.check() is False and not watch.healthy
    assert engine.asked[0].stopped  # given up: aborted on the engine
    assert len(engine.asked) == 2  # and the next one sent at once
    clock.now += 5
    assert watch.check() is None and len(engine.asked) == 3  # one every timeout
    assert watch.failed == 2
    clock.now += 1
    engine.steps += 1  # steps alone do not make it healthy: a canary's answer does
    assert watch.check() is None and not watch.healthy
    engine.asked[2].answer()
    assert watch.check() is True and watch.healthy
    clock.now += 9
    assert watch.check() is None and len(engine.asked) == 3


def test_a_canary_behind_a_full_batch_is_not_a_failure() -> None:
    """The engine took no step for 10 s (one long prefill, say), the canary
    waits behind it, and the engine steps again before the timeout: busy,
    not wedged."""
    watch, engine, clock = canary()
    clock.now += 10
    watch.check()
    clock.now += 2
    engine.steps += 1
    watch.check()
    clock.now += 3
    assert watch.check() is None and watch.healthy and engine.asked[0].stopped
    assert not watch.waiting and len(engine.asked) == 1  # the next only after 10 s more


def test_work_that_comes_to_an_idle_engine_starts_its_wait() -> None:
    """Idle for 9 s, then a request whose first step is long: the engine has
    10 s from the request's coming, not from its last idle step; an engine
    that holds requests without a step gets its canary as an idle one does."""
    watch, engine, clock = canary()
    clock.now += 9
    engine.active = 1
    assert watch.check() is None
    clock.now += 9
    assert watch.check() is None and not engine.asked
    clock.now += 1
    watch.check()
    assert len(engine.asked) == 1  # 10 s holding a request without a step
    engine.active = 2  # the canary counts as a request: no new work came
    clock.now += 5
    assert watch.check() is False


def test_a_canary_that_fails_counts_as_no_answer() -> None:
    watch, engine, clock = canary()
    clock.now += 10
    watch.check()
    sink = engine.asked[0].sink
    assert sink is not None
    sink.end(EngineError("engine dead", "unavailable"))
    clock.now += 1
    assert watch.check() is None  # the timeout decides
    clock.now += 4
    assert watch.check() is False


def test_the_policy() -> None:
    assert not CanaryPolicy(after=0).on and CanaryPolicy().on
    assert (CanaryPolicy().after, CanaryPolicy().timeout) == (10, 5)
    assert CanaryPolicy(after=10, timeout=5).interval == 1.0
    assert CanaryPolicy(after=1, timeout=0.4).interval == 0.1
    with pytest.raises(ValueError, match="timeout"):
        CanaryPolicy(timeout=0)
    text = canary_request(ModelCard("m"), "c")  # no EOS id, no tokenizer: still one token
    assert text.token_ids == [0] and text.annotations["echo_text"]
