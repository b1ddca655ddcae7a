"""KV router simulation: the real mocker engines and the real router core, no NATS.

Four MockerEngines run in one process on a virtual-time event loop: every
`asyncio.sleep` a step takes advances a simulated clock instead of waiting, so
TTFT is the mocker's simulated time (prefill and decode cost model at
`speedup_ratio` 1) and a whole run takes seconds. Each engine's KV events feed
a `KVIndex` synchronously (what NATS would carry), and the router reads each
engine's load straight from its scheduler (a load view with no publication
lag).

Workload (the issue's): 16 system prompts of 1500 tokens x 8 requests each,
each request the prefix plus a unique 24-40-token suffix, shuffled with a
seed, 100-200 output tokens, concurrency 8. Each engine's KV cache holds
~5.5 of the 16 prefixes (not all; the four together do).

    python benchmarks/kv_router_sim.py                 # kv vs round_robin vs kv-approx
    python benchmarks/kv_router_sim.py --sweep         # overlap_weight sweep for kv
    python benchmarks/kv_router_sim.py --cost          # decision time + index memory
    python benchmarks/kv_router_sim.py --delay         # KV events late: predicted routing off/on

Reported: prompt-cache hit ratio (cached / prompt tokens) against the ideal
(only each prefix's first request misses), TTFT p50/p90 in simulated ms,
requests per worker; with --cost, decision time p50/p99 for 4/16/64 workers
holding 10k blocks each and index memory per block (tracemalloc).

`--delay` runs kv with each engine's KV events reaching the index 0, 200 and
1000 simulated ms late (through the worker's own delay, runtime/nats/kv_delay.py),
predicted routing off and on. Its queues are seconds deep (TTFT p50 in
seconds), so a second's lag moves its hit ratio little; the lag that hurts is
measured on real processes (`python benchmarks/cluster.py kv-delay`).

Why overlap_weight 4 (`--sweep`): the decode term counts every KV block a
worker's running sequences hold, ~100 for one request of this workload, the
same scale as a whole uncached prompt (94 blocks). At weight 1 a worker that
holds the prefix and runs one other request costs 1 + 100 against 94 for an
idle one, so hits are thrown away (hit ratio near round_robin's); at 2 about
half are kept; from 4 up the hit ratio is within ~3 points of the ideal with
requests per worker still spread (26-37 of 128).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import selectors
import statistics
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from rotor.engines.mocker import MockerConfig, MockerEngine
from rotor.model.builtin import builtin_test_model
from rotor.protocol.engine import EngineRequest, SamplingParams, StopParams, pulled
from rotor.protocol.kv import BlocksStored, block_hashes
from rotor.router.kv_cost import DEFAULT_OVERLAP_WEIGHT, KVCost, WorkerLoad
from rotor.router.kv_index import DEFAULT_PREDICTED_TTL_S, Applied, ApproxKVIndex, KVIndex
from rotor.runtime.nats.kv_delay import DelayedKVEvents

BLOCK = 16
CARD, TOK = builtin_test_model()


# -- virtual time ----------------------------------------------------------------


class _VirtualSelector(selectors.DefaultSelector):
    """Never blocks: a wait of t seconds moves the loop's clock t forward."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout:
            self._clock[0] += timeout
        return super().select(0)


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._now = [0.0]
        super().__init__(_VirtualSelector(self._now))

    def time(self) -> float:
        return self._now[0]


# -- workload --------------------------------------------------------------------


@dataclass(slots=True)
class Req:
    prefix: int
    tokens: list[int]
    max_tokens: int


def workload(
    seed: int, prefixes: int = 16, per_prefix: int = 8, prefix_len: int = 1500
) -> list[Req]:
    rng = random.Random(seed)
    heads = [[rng.randrange(3, TOK.vocab_size) for _ in range(prefix_len)] for _ in range(prefixes)]
    reqs = [
        Req(
            p,
            heads[p] + [rng.randrange(3, TOK.vocab_size) for _ in range(rng.randint(24, 40))],
            rng.randint(100, 200),
        )
        for p in range(prefixes)
        for _ in range(per_prefix)
    ]
    rng.shuffle(reqs)
    return reqs


def ideal_cached(reqs: list[Req]) -> int:
    """Cached tokens if only each prefix's first request missed: each later one
    hits every full block its group shares (at most (n-1)//BLOCK blocks, as the
    cache always leaves one token to compute)."""
    groups: dict[int, list[Req]] = {}
    for r in reqs:
        groups.setdefault(r.prefix, []).append(r)
    total = 0
    for group in groups.values():
        base = group[0].tokens
        common = len(base)
        for r in group[1:]:
            diff = (i for i, (a, b) in enumerate(zip(base, r.tokens, strict=False)) if a != b)
            common = min(common, next(diff, min(len(base), len(r.tokens))))
        for r in group[1:]:
            total += min(common // BLOCK, (len(r.tokens) - 1) // BLOCK) * BLOCK
    return total


# -- routers ---------------------------------------------------------------------


def mocker_load(engine: MockerEngine) -> WorkerLoad:
    """The load a mocker worker would publish: KV blocks in use by its sequences
    (shared prefix blocks once), prompt tokens not yet computed, waiting queue."""
    sch = engine.scheduler
    pending = sum(s.num_pending for s in sch.waiting)
    pending += sum(s.num_pending for s in sch.running if not s.prefilled)
    return WorkerLoad(sch.kv.num_total - sch.kv.num_free, pending, len(sch.waiting))


class Router:
    name = "?"

    def __init__(self, engines: list[MockerEngine]) -> None:
        self.engines = engines

    def route(self, tokens: list[int], now: float) -> int:
        raise NotImplementedError


class RoundRobin(Router):
    name = "round_robin"

    def __init__(self, engines: list[MockerEngine]) -> None:
        super().__init__(engines)
        self._next = itertools.cycle(range(len(engines)))

    def route(self, tokens: list[int], now: float) -> int:
        return next(self._next)


class KVRouter(Router):
    def __init__(
        self,
        engines: list[MockerEngine],
        weight: float,
        temperature: float,
        approx_ttl: float,
        events_delay: float = 0.0,
        predicted_ttl: float = 0.0,
    ) -> None:
        """`events_delay`: simulated seconds each engine step's KV events take
        to reach the index (the worker's `--kv-events-delay-ms`);
        `predicted_ttl`: the frontend's `--router-predicted-ttl`."""
        super().__init__(engines)
        self.cost = KVCost(BLOCK, weight, temperature, random.Random(7))
        self.approx = ApproxKVIndex(approx_ttl) if approx_ttl else None
        loop = asyncio.get_running_loop()
        self.index = KVIndex(BLOCK, predicted_ttl, loop.time)
        self.name = (
            f"kv-approx(w={weight:g})" if approx_ttl else f"kv(w={weight:g},T={temperature:g})"
        )
        if events_delay or predicted_ttl:
            self.name = f"kv(late {events_delay * 1000:g} ms, predicted {predicted_ttl:g} s)"
        if not approx_ttl:
            for w, engine in enumerate(engines):
                sink = self._sink(w)
                if events_delay:
                    sink = DelayedKVEvents(events_delay, sink).add
                self.index.resync(w, engine.kv_events(sink))

    def _sink(self, worker: int) -> Callable:
        def sink(event) -> None:
            if self.index.apply(worker, event) is not Applied.APPLIED:
                raise AssertionError(f"worker {worker}: event {event.event_id} not applied")

        return sink

    def route(self, tokens: list[int], now: float) -> int:
        hashes = block_hashes(tokens, BLOCK)
        if self.approx is not None:  # not `or`: an empty index is falsy (it has a len)
            overlaps = self.approx.matches(hashes, now)
        else:
            overlaps = self.index.matches(hashes)
        loads = {w: mocker_load(e) for w, e in enumerate(self.engines)}
        decision = self.cost.choose(len(hashes), overlaps, loads)
        if self.approx is not None:
            self.approx.record(decision.worker, hashes, now)
        else:
            self.index.predict(decision.worker, hashes)
        return decision.worker


# -- one run -----------------------------------------------------------------------


@dataclass
class Result:
    name: str
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ideal_cached: int = 0
    ttft_ms: list[float] = field(default_factory=list)
    per_worker: Counter = field(default_factory=Counter)
    sim_s: float = 0.0

    def row(self) -> str:
        q = statistics.quantiles(self.ttft_ms, n=10)
        counts = [self.per_worker[w] for w in sorted(self.per_worker)]
        return (
            f"{self.name:<22} hit {self.cached_tokens / self.prompt_tokens:6.1%} "
            f"(ideal {self.ideal_cached / self.prompt_tokens:5.1%})  "
            f"TTFT p50 {statistics.median(self.ttft_ms):7.1f} ms  p90 {q[8]:7.1f} ms  "
            f"per worker {counts}  makespan {self.sim_s:6.2f} s"
        )


def run(
    make_router: Callable[[list[MockerEngine]], Router],
    seed: int,
    workers: int = 4,
    kv_blocks: int = 640,
    concurrency: int = 8,
) -> Result:
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(_run(make_router, seed, workers, kv_blocks, concurrency))
    finally:
        loop.close()


async def _run(make_router, seed: int, workers: int, kv_blocks: int, concurrency: int) -> Result:
    engines = [
        MockerEngine(CARD, TOK, MockerConfig(num_kv_blocks=kv_blocks, block_size=BLOCK, seed=w))
        for w in range(workers)
    ]
    for e in engines:
        await e.start()
    router = make_router(engines)
    reqs = workload(seed)
    result = Result(router.name, ideal_cached=ideal_cached(reqs))
    loop = asyncio.get_running_loop()
    queue = list(enumerate(reqs))
    queue.reverse()

    async def client() -> None:
        while queue:
            i, r = queue.pop()
            start = loop.time()
            w = router.route(r.tokens, start)
            result.per_worker[w] += 1
            req = EngineRequest(
                f"r{i}",
                CARD.name,
                r.tokens,
                sampling=SamplingParams(seed=i),
                stop=StopParams(max_tokens=r.max_tokens, ignore_eos=True),
            )
            first = True
            async for out in pulled(engines[w].generate(req)):
                if first:
                    result.ttft_ms.append((loop.time() - start) * 1000)
                    result.cached_tokens += out.cached_tokens or 0
                    first = False
            result.prompt_tokens += len(r.tokens)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    result.sim_s = loop.time()
    for e in engines:
        await e.stop()
    return result


# -- the router's own cost ----------------------------------------------------------


def decision_cost(workers: int, blocks_each: int = 10_000, trials: int = 2000) -> str:
    """Decision time (index overlap walk + cost) for a 100-block prompt, with
    `workers` workers holding `blocks_each` blocks each as 100-block chains drawn
    from a shared pool (so prompts overlap several workers to various depths)."""
    rng = random.Random(1)
    chains = [
        block_hashes([rng.randrange(2**32) for _ in range(100 * BLOCK)], BLOCK) for _ in range(400)
    ]
    index = KVIndex(BLOCK)
    per_worker = blocks_each // 100
    for w in range(workers):
        for eid, c in enumerate(rng.sample(chains, per_worker), 1):
            index.apply(w, BlocksStored(eid, c[: rng.randint(50, 100)], None, BLOCK))
    cost = KVCost(BLOCK)
    loads = {
        w: WorkerLoad(rng.randint(0, 2000), rng.randint(0, 8000), rng.randint(0, 4))
        for w in range(workers)
    }
    prompts = [rng.choice(chains) for _ in range(trials)]
    times = []
    for hashes in prompts:
        t0 = time.perf_counter_ns()
        cost.choose(len(hashes), index.matches(hashes), loads)
        times.append((time.perf_counter_ns() - t0) / 1000)
    q = statistics.quantiles(times, n=100)
    toks = [rng.randrange(2**32) for _ in range(1536)]
    t0 = time.perf_counter_ns()
    for _ in range(200):
        block_hashes(toks, BLOCK)
    hash_us = (time.perf_counter_ns() - t0) / 200 / 1000
    return (
        f"{workers:>3} workers x {blocks_each} blocks ({len(index)} distinct): decision "
        f"p50 {statistics.median(times):6.1f} us  p99 {q[98]:6.1f} us  "
        f"(+ hashing a 1536-token prompt once: {hash_us:.1f} us)"
    )


def memory_per_block(workers: int = 16, blocks_each: int = 10_000, shared: bool = False) -> str:
    """Bytes the index allocates per (worker, block) entry: every worker holds
    its own blocks (`shared` False) or all hold the same ones."""
    rng = random.Random(2)
    pool = [rng.getrandbits(64) for _ in range(blocks_each * (1 if shared else workers))]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = KVIndex(BLOCK)
    for w in range(workers):
        mine = pool[:blocks_each] if shared else pool[w * blocks_each : (w + 1) * blocks_each]
        for eid, start in enumerate(range(0, blocks_each, 100), 1):
            index.apply(w, BlocksStored(eid, mine[start : start + 100], None, BLOCK))
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    entries = workers * blocks_each
    return (
        f"{'shared' if shared else 'disjoint'} blocks, {workers} workers x {blocks_each}: "
        f"{used / entries:5.1f} B per (worker, block), {used / len(index):6.1f} B per distinct hash"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seed", type=int, default=[1], nargs="+")
    ap.add_argument("--sweep", action="store_true", help="overlap_weight sweep for kv")
    ap.add_argument("--cost", action="store_true", help="decision time and index memory only")
    ap.add_argument("--kv-blocks", type=int, default=640, help="KV blocks per engine")
    ap.add_argument("--ttl", type=float, default=120.0, help="kv-approx TTL (simulated s)")
    ap.add_argument(
        "--delay", action="store_true", help="KV events 0, 200, 1000 ms late: predicted off/on"
    )
    args = ap.parse_args()
    if args.cost:
        for w in (4, 16, 64):
            print(decision_cost(w))
        print(memory_per_block(shared=False))
        print(memory_per_block(shared=True))
        return
    routers: list[Callable[[list[MockerEngine]], Router]] = [RoundRobin]
    if args.delay:
        for late in (0.0, 0.2, 1.0):
            for ttl in (0.0, DEFAULT_PREDICTED_TTL_S):
                routers.append(
                    lambda e, late=late, ttl=ttl: KVRouter(
                        e, DEFAULT_OVERLAP_WEIGHT, 0.0, 0.0, late, ttl
                    )
                )
        args.sweep = True  # (no approximate router)
    weights = (0.5, 1.0, 2.0, 4.0, 8.0) if args.sweep else (DEFAULT_OVERLAP_WEIGHT,)
    for wt in () if args.delay else weights:
        routers.append(lambda e, wt=wt: KVRouter(e, wt, 0.0, 0.0))
    if not args.sweep:
        routers.append(lambda e: KVRouter(e, DEFAULT_OVERLAP_WEIGHT, 0.0, args.ttl))
    print(
        f"{4} mocker engines x {args.kv_blocks} KV blocks of {BLOCK} tokens; 16 prefixes x 1500 "
        f"tokens ({1500 // BLOCK} blocks) x 8 requests, concurrency 8"
    )
    for seed in args.seed:
        print(f"seed {seed}")
        for make in routers:
            print("  " + run(make, seed, kv_blocks=args.kv_blocks).row())


if __name__ == "__main__":
    main()
