"""A worker's lease (protocol/lease.py) on the wire: it reads back as it was
written, a newer peer's unknown fields are ignored, and what is not a lease is
refused. (The role, the LoRA adapters and the handover gauges a lease carries
are test_disagg_wire.py's.)"""

from __future__ import annotations

import pytest

from rotor.protocol.lease import Lease

from support.workers import lease


def test_a_lease_round_trips_and_ignores_unknown_fields() -> None:
    import msgpack

    original = lease("w1", active_requests=3, kv_blocks_total=10, kv_blocks_free=4)
    assert Lease.decode(original.encode()) == original
    newer = msgpack.unpackb(original.encode())
    newer["zone"] = "eu"
    newer["state"]["future_gauge"] = 7
    assert Lease.decode(msgpack.packb(newer)) == original
    for bad in (
        b"junk",
        msgpack.packb({"worker_id": "x"}),
        msgpack.packb({**newer, "status": "?"}),
    ):
        with pytest.raises(ValueError, match="not a lease"):
            Lease.decode(bad)


def test_health_crosses_both_ways_between_old_and_new_peers() -> None:
    """A lease says whether its engine answers its canary (`healthy`): it
    round-trips; a lease from a worker that predates the field reads as
    healthy; and an unhealthy lease is still a "serving" one with one more
    field, which a frontend that predates it reads as before (unknown fields
    are ignored: it routes there, and the worker refuses those requests as
    "unavailable", so they move)."""
    import msgpack

    sick = lease("w1", active_requests=2)
    sick.healthy = False
    assert Lease.decode(sick.encode()) == sick
    raw = msgpack.unpackb(sick.encode())
    assert raw["healthy"] is False and raw["status"] == "serving"
    older = dict(raw)
    del older["healthy"]
    assert Lease.decode(msgpack.packb(older)).healthy is True
    with pytest.raises(ValueError, match="healthy"):
        Lease.decode(msgpack.packb({**raw, "healthy": "no"}))
