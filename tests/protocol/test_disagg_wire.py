"""What disaggregated serving adds to the wire: a worker's role in its lease,
and a prefill's `kv_transfer` on its output, both read back as they were."""

from __future__ import annotations

import msgpack
import pytest

from rotor.protocol import codec
from rotor.protocol.engine import EngineOutput, EngineState
from rotor.protocol.lease import ROLES, Lease


@pytest.mark.parametrize("role", ROLES)
def test_a_role_round_trips(role: str) -> None:
    lease = Lease("w", "m", "card", "compat", "h:1", role=role)  # type: ignore[arg-type]
    assert Lease.decode(lease.encode()).role == role


def test_a_lease_without_a_role_is_agg_and_an_unknown_role_is_refused() -> None:
    m = msgpack.unpackb(Lease("w", "m", "c", "x", "h").encode())
    del m["role"]
    assert Lease.decode(msgpack.packb(m)).role == "agg"  # an older worker
    with pytest.raises(ValueError, match="unknown worker role"):
        Lease.decode(msgpack.packb({**m, "role": "draft"}))


def test_kv_transfer_round_trips_with_lists_and_big_hashes() -> None:
    transfer = {
        "engine": "mocker",
        "transfer_id": "t1",
        "block_hashes": [2**64 - 1, 0, 12345],
        "nested": {"ids": [1, [2, 3]]},
    }
    out = EngineOutput(0, [7], finish="length", kv_transfer=transfer)
    back = codec.decode_outputs(codec.encode_outputs([out]))[0]
    assert back.kv_transfer == transfer
    assert type(back.kv_transfer["block_hashes"]) is list
    assert codec.decode_outputs(codec.encode_outputs([EngineOutput(0, [7])]))[0].kv_transfer is None


def test_kv_transfer_that_is_not_a_map_is_refused() -> None:
    data = msgpack.packb([{"index": 0, "token_ids": [], "kv_transfer": [1, 2]}])
    with pytest.raises(codec.CodecError, match="kv_transfer"):
        codec.decode_outputs(data)


def test_the_handover_gauges_are_engine_state() -> None:
    state = EngineState(kv_blocks_pinned=3, kv_hold_timeouts=1, kv_blocks_fetched=9)
    lease = Lease("w", "m", "c", "x", "h", state=state)
    assert Lease.decode(lease.encode()).state == state


def test_a_lease_carries_its_lora_adapters() -> None:
    lease = Lease("w", "m", "card", "compat", "h:1", loras={"sql": "/a/sql"})
    assert Lease.decode(lease.encode()).loras == {"sql": "/a/sql"}
    assert Lease.decode(Lease("w", "m", "c", "x", "h").encode()).loras == {}
