"""The admission queue and the line behind it (api/admission.py), driven by
hand on an event loop, no clock: places taken at once while free; past them
a line ordered by (priority, arrival), each freed place going to its best;
a full line refusing the worse of the newcomer and its worst; a request
that leaves the line is out of it at once, even one handed a place as it
left. A property test checks every sequence of arrivals, frees and
departures against a model of those rules."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.api.admission import Admission, Overloaded


async def settle() -> None:
    """Let every task that can run, run (a few turns of the loop, no clock)."""
    for _ in range(8):
        await asyncio.sleep(0)


class Requests:
    """Requests against one Admission, each holding its place (once it has
    one) until released; what became of each is recorded in order."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.admitted: list[str] = []
        self.refused: list[str] = []
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._release: dict[str, asyncio.Event] = {}

    def send(self, name: str, priority: int = 0, fail: bool = False) -> None:
        release = self._release[name] = asyncio.Event()

        async def request() -> None:
            try:
                async with self.admission.queued(priority):
                    self.admitted.append(name)
                    await release.wait()
                    if fail:
                        raise RuntimeError("the engine failed")
            except Overloaded:
                self.refused.append(name)

        self.tasks[name] = asyncio.get_running_loop().create_task(request())

    def release(self, name: str) -> None:
        self._release[name].set()

    async def finish(self) -> None:
        for event in self._release.values():
            event.set()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


async def test_places_are_taken_at_once_and_without_a_line_the_next_is_refused() -> None:
    admission = Admission(limit=2)
    with pytest.raises(ValueError):
        Admission(limit=0)
    with pytest.raises(ValueError):
        Admission(limit=1, waiting_limit=-1)
    reqs = Requests(admission)
    reqs.send("a")
    reqs.send("b")
    await settle()
    assert reqs.admitted == ["a", "b"] and admission.depth == 2
    with pytest.raises(Overloaded, match="limit of 2 queued requests; retry after 1 s"):
        async with admission.queued():
            pass
    assert admission.refused == 1 and admission.waiting == 0
    reqs.release("a")
    await settle()
    assert admission.depth == 1  # a freed place is free again: nobody waits
    await reqs.finish()
    assert admission.depth == 0


async def test_each_freed_place_goes_to_the_best_waiting_by_priority_then_arrival() -> None:
    admission = Admission(limit=1, waiting_limit=8)
    reqs = Requests(admission)
    reqs.send("holder")
    await settle()
    for name, priority in (("a", 5), ("b", 1), ("c", 5), ("d", 0), ("e", 1), ("f", -3)):
        reqs.send(name, priority)
        await settle()
    assert reqs.admitted == ["holder"]
    assert admission.waiting == 6 and admission.depth == 1
    order = ["holder", "f", "d", "b", "e", "a", "c"]
    for i, name in enumerate(order):
        reqs.release(name)
        await settle()
        assert reqs.admitted == order[: i + 2]
        assert admission.depth == (1 if i < len(order) - 1 else 0)
    assert admission.waiting == 0 and reqs.refused == []


async def test_a_full_line_refuses_the_worse_of_the_newcomer_and_its_worst() -> None:
    admission = Admission(limit=1, waiting_limit=2)
    reqs = Requests(admission)
    reqs.send("holder")
    reqs.send("low1", 10)
    reqs.send("low2", 10)
    await settle()
    reqs.send("low3", 10)  # as bad as the worst waiting, and later: it is refused
    await settle()
    assert reqs.refused == ["low3"]
    reqs.send("worse", 11)
    await settle()
    assert reqs.refused == ["low3", "worse"]
    reqs.send("high", 0)  # displaces the worst waiting: the later of the two lows
    await settle()
    assert reqs.refused == ["low3", "worse", "low2"]
    assert admission.waiting == 2 and admission.refused == 3
    with pytest.raises(Overloaded, match="limit of 1 queued requests and 2 waiting"):
        async with admission.queued(99):
            pass
    reqs.release("holder")
    await settle()
    reqs.release("high")
    await settle()
    assert reqs.admitted == ["holder", "high", "low1"]
    await reqs.finish()
    assert admission.depth == 0


async def test_a_request_that_leaves_the_line_is_out_of_it_at_once() -> None:
    admission = Admission(limit=1, waiting_limit=4)
    reqs = Requests(admission)
    reqs.send("holder")
    reqs.send("a", 0)
    reqs.send("b", 1)
    await settle()
    assert admission.waiting == 2
    reqs.tasks["a"].cancel()  # its client went away
    await settle()
    assert admission.waiting == 1 and reqs.tasks["a"].cancelled()
    reqs.release("holder")
    await settle()
    assert reqs.admitted == ["holder", "b"] and admission.depth == 1
    await reqs.finish()
    assert admission.depth == 0 and admission.waiting == 0


async def test_a_place_handed_to_a_request_that_is_leaving_passes_to_the_next() -> None:
    admission = Admission(limit=1, waiting_limit=4)
    reqs = Requests(admission)
    reqs.send("holder")
    reqs.send("a", 0)
    reqs.send("b", 1)
    await settle()
    reqs.release("holder")
    await settle()
    assert reqs.admitted == ["holder", "a"]
    # the place freed and handed to "b", then "b" cancelled before it ran
    reqs.release("a")
    await asyncio.sleep(0)  # "a" leaves its block: "b" is handed the place
    assert admission.waiting == 0 and admission.depth == 1
    reqs.tasks["b"].cancel()
    await settle()
    assert reqs.admitted == ["holder", "a"] and reqs.tasks["b"].cancelled()
    assert admission.depth == 0  # given back, not leaked


async def test_a_request_that_fails_gives_its_place_to_the_next() -> None:
    admission = Admission(limit=1, waiting_limit=1)
    reqs = Requests(admission)
    reqs.send("failing", fail=True)
    reqs.send("next")
    await settle()
    reqs.release("failing")
    await settle()
    assert reqs.admitted == ["failing", "next"]
    assert isinstance(reqs.tasks["failing"].exception(), RuntimeError)
    await reqs.finish()
    assert admission.depth == 0


# -- every sequence, against a model of the rules ------------------------------

Op = tuple[str, int]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.integers(-2, 2)),
        st.tuples(st.just("free"), st.integers(0, 20)),
        st.tuples(st.just("leave"), st.integers(0, 20)),
    ),
    max_size=40,
)


async def replay(ops: list[Op], limit: int, waiting_limit: int) -> None:
    admission = Admission(limit, waiting_limit)
    reqs = Requests(admission)
    holding: list[str] = []  # the model: who holds a place, who waits, who is refused
    line: list[tuple[int, int, str]] = []  # (priority, arrival, name)
    admitted: list[str] = []
    refused: list[str] = []
    for arrival, (op, arg) in enumerate(ops):
        if op == "arrive":
            name = f"r{arrival}"
            reqs.send(name, arg)
            if len(holding) < limit:
                holding.append(name)
                admitted.append(name)
            else:
                line.append((arg, arrival, name))
                if len(line) > waiting_limit:
                    worst = max(line)  # the newcomer when it ties: it arrived last
                    line.remove(worst)
                    refused.append(worst[2])
        elif op == "free" and holding:
            name = holding.pop(arg % len(holding))
            reqs.release(name)
            if line:
                best = min(line)
                line.remove(best)
                holding.append(best[2])
                admitted.append(best[2])
        elif op == "leave" and line:
            gone = sorted(line)[arg % len(line)]
            line.remove(gone)
            reqs.tasks[gone[2]].cancel()
        await settle()
        assert reqs.admitted == admitted
        assert reqs.refused == refused
        assert admission.depth == len(holding)
        assert admission.waiting == len(line)
        assert admission.refused == len(refused)
    await reqs.finish()
    assert admission.depth == 0 and admission.waiting == 0


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(1, 3), st.integers(0, 3))
def test_the_admitted_order_respects_priority_then_arrival(
    ops: list[Op], limit: int, waiting_limit: int
) -> None:
    asyncio.run(replay(ops, limit, waiting_limit))
