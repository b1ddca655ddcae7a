"""Workers as the router's tests make them: `lease(...)`, a worker's lease
for model "m" with the engine state given, and `FakeInbox`, a pool's link
that only records the workers it was told are gone."""

from __future__ import annotations

from rotor.protocol.engine import EngineState
from rotor.protocol.lease import Lease


def lease(wid: str, **state: int) -> Lease:
    return Lease(wid, "m", "card", "compat", "host:1", state=EngineState(**state))


class FakeInbox:
    def __init__(self) -> None:
        self.gone: list[str] = []

    def worker_gone(self, worker_id: str) -> None:
        self.gone.append(worker_id)
