"""A request-log record (api/request_record.py): the inter-token gaps become
their median and maximum, the prompt's token ids rotor's KV block hashes
(protocol/kv.py, the kv router's), computed when the writer encodes it; a
request that never started says what it can and no token counts."""

from __future__ import annotations

import orjson
import pytest

from rotor.api.access_state import Access
from rotor.api.request_record import Record, record
from rotor.protocol.kv import block_hashes


def test_gaps_become_median_and_max_and_ids_become_hashes() -> None:
    ids = list(range(100, 150))  # three full blocks of 16, and 2 tokens
    line = Record({"request_id": "a"}, [0.3, 0.1, 0.2, 0.4], ids, 16).encode()
    out = orjson.loads(line)
    assert out["itl_p50_s"] == pytest.approx(0.25) and out["itl_max_s"] == 0.4
    assert out["block_size"] == 16
    assert out["block_hashes"] == block_hashes(ids, 16) and len(out["block_hashes"]) == 3
    odd = orjson.loads(Record({}, [0.5, 0.1, 0.2], None, 16).encode())
    assert odd == {"itl_p50_s": 0.2, "itl_max_s": 0.5}  # no ids asked: no hashes


def test_no_gaps_no_itl() -> None:
    assert orjson.loads(Record({"x": 1}, [], None, 16).encode()) == {"x": 1}


def test_a_request_that_never_started() -> None:
    access = Access()
    access.model, access.stream = "m", True
    rec = record("/v1/messages", 404, access, "rid", 1700000000.25, 10.0, 10.5, False, True)
    assert orjson.loads(rec.encode()) == {
        "arrival": 1700000000.25,
        "request_id": "rid",
        "route": "/v1/messages",
        "model": "m",
        "status": 404,
        "stream": True,
        "e2e_s": 0.5,
    }
    gone = record("/v1/completions", 200, Access(), "r2", 0.0, 1.0, 2.0, True, False)
    assert orjson.loads(gone.encode())["status"] == 499  # the client left: nginx's 499
