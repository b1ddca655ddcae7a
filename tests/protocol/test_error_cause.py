"""An engine error's cause crosses the wire as a field (the pool's migration
policy and /metrics read it, never the message), and what a newer or broken
peer sends is read safely."""

from __future__ import annotations

import msgpack
import pytest

from rotor.protocol import codec
from rotor.protocol.engine import CAUSES, EngineError


@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_a_cause_round_trips(cause: str) -> None:
    error = codec.decode_error(codec.encode_error(EngineError("m", "unavailable", cause=cause)))
    assert (error.kind, error.cause, error.message) == ("unavailable", cause, "m")


def test_an_unavailable_error_without_a_cause_is_plain_unavailable() -> None:
    assert EngineError("m", "unavailable").cause == "unavailable"
    assert codec.decode_error(msgpack.packb({"message": "m", "kind": "unavailable"})).cause == (
        "unavailable"
    )


def test_other_kinds_have_no_cause_even_if_a_peer_sends_one() -> None:
    assert EngineError("m", "refused", "n").cause is None
    data = msgpack.packb({"message": "m", "kind": "internal", "cause": "timeout"})
    assert codec.decode_error(data).cause is None


def test_an_unknown_cause_from_a_newer_peer_reads_as_unavailable() -> None:
    data = msgpack.packb({"message": "m", "kind": "unavailable", "cause": "zone_down"})
    assert codec.decode_error(data).cause == "unavailable"
    with pytest.raises(codec.CodecError, match="error.cause"):
        codec.decode_error(msgpack.packb({"message": "m", "kind": "unavailable", "cause": 1}))


def test_the_message_text_does_not_decide_the_cause() -> None:
    """A message that happens to say 'gone' is not a worker that is gone."""
    error = EngineError("the prompt is gone", "unavailable", cause="timeout")
    assert codec.decode_error(codec.encode_error(error)).cause == "timeout"
