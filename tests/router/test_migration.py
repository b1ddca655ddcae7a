"""Migration (router/migration.py): a resumed request carries what its
first attempt produced."""

from __future__ import annotations

from rotor.protocol.engine import EngineOutput, EngineRequest, StopParams
from rotor.router.migration import Progress, resumed


def test_a_resumed_request_carries_its_output_so_far() -> None:
    req = EngineRequest("r", "m", [1, 2], stop=StopParams(max_tokens=10, min_tokens=4))
    progress = Progress()
    progress.add(EngineOutput(0, [7, 8]))
    progress.add(EngineOutput(0, [9]))
    again = resumed(req, progress, "r-m1")
    assert again.request_id == "r-m1"
    assert again.token_ids == [1, 2, 7, 8, 9]
    assert (again.stop.max_tokens, again.stop.min_tokens) == (7, 1)
    assert again.annotations["resume_from"] == 3
    assert req.token_ids == [1, 2] and "resume_from" not in req.annotations  # untouched
