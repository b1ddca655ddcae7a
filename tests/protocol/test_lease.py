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
