"""A stored response's record: its bytes (JSON, format 1) back to the same
record, and bytes that are not one refused by name."""

from __future__ import annotations

import orjson
import pytest

from rotor.api.responses.record import Record, decode, encode

RECORD = Record(
    response={"id": "resp_a", "status": "completed", "background": False, "output": [{"id": "m"}]},
    input=[{"id": "msg_a_in0", "type": "message", "role": "user", "content": []}],
)


def test_a_record_round_trips() -> None:
    data = encode(RECORD)
    assert orjson.loads(data) == {"format": 1, "response": RECORD.response, "input": RECORD.input}
    again = decode(data)
    assert again == RECORD
    assert (again.id, again.status, again.finished, again.background) == (
        "resp_a",
        "completed",
        True,
        False,
    )
    assert again.conversation() == [*RECORD.input, {"id": "m"}]


@pytest.mark.parametrize("status", ["queued", "in_progress"])
def test_a_running_response_is_not_finished(status: str) -> None:
    assert not Record({**RECORD.response, "status": status}, []).finished


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not a format 1 record"),
        (b'{"format": 2, "response": {}, "input": []}', "not a format 1 record: 2"),
        (b'{"format": 1, "response": [], "input": []}', "lacks its response"),
    ],
)
def test_bytes_that_are_no_record_are_refused(data: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        decode(data)
