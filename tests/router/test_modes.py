"""The routing modes (router/modes.py): round robin in worker-id order,
seeded random draws, least loaded by the worker's and the frontend's load."""

from __future__ import annotations

from rotor.protocol.engine import EngineRequest
from rotor.router.modes import LeastLoaded, LocalLoad, Random, RoundRobin

from support.workers import lease


def test_routing_modes() -> None:
    req = EngineRequest("r", "m", [1])
    workers = [lease("b"), lease("a"), lease("c")]
    rr = RoundRobin()
    idle = LocalLoad()
    assert [rr.choose(workers, req, idle).worker_id for _ in range(4)] == ["a", "b", "c", "a"]
    import random

    def draws(seed: int) -> list[str]:
        mode = Random(random.Random(seed))
        return [mode.choose(workers, req, idle).worker_id for _ in range(300)]

    assert draws(1) == draws(1)  # seeded: repeatable
    assert {w: draws(1).count(w) > 60 for w in "abc"} == {"a": True, "b": True, "c": True}
    busy = [
        lease("a", active_requests=5),
        lease("b", active_requests=1),
        lease("c", active_requests=1, kv_blocks_total=4),
    ]
    load = LocalLoad()
    load.in_flight["b"] = 3
    assert LeastLoaded().choose(busy, req, load).worker_id == "c"
