"""The messages of one request's output stream, worker → frontend. Each is a
msgpack map with a sequence number `s` (from 0, so a lost or repeated
message is seen) and a kind `k`:

- `o` outputs: `p` is `codec.encode_outputs` (several engine outputs, in order)
- `e` error:   `p` is `codec.encode_error` (the stream ends)
- `h` heartbeat: the worker is alive and working (sent when it is quiet)
- `d` done:    the engine's stream ended

A batch carries the messages of many requests at once (`rotor.steps.<frontend>`):
a msgpack array of `[request id, seq, kind, payload or nil]`, in the order
they were made, so each request's messages stay in order.
"""

from __future__ import annotations

import logging
from typing import Any

import msgpack
from nats.aio.msg import Msg
from nats.js.api import Header

from rotor.protocol import codec
from rotor.protocol.engine import EngineError
from rotor.runtime.stream import Kind, OutputStream

log = logging.getLogger("rotor.request_plane")

OUTPUTS, ERROR, HEARTBEAT, DONE = "o", "e", "h", "d"
_KINDS: dict[str, Kind] = {OUTPUTS: "outputs", ERROR: "error", HEARTBEAT: "heartbeat", DONE: "done"}

# How often a quiet worker says it is alive, and how long a frontend waits
# for any message before it counts the worker dead.
HEARTBEAT_S = 1.0
SILENCE_S = 4.0


NO_RESPONDERS = "503"  # the status of NATS's answer to a message nobody subscribes to


def no_responders(msg: Msg) -> bool:
    """NATS's own answer that nobody took a message published with a reply
    subject: an empty message whose status header says 503 (no rotor peer
    sends an empty one)."""
    headers = msg.headers
    return (
        not msg.data and headers is not None and headers.get(Header.STATUS.value) == NO_RESPONDERS
    )


def message(seq: int, kind: str, payload: bytes | None = None) -> bytes:
    m: dict[str, Any] = {"s": seq, "k": kind}
    if payload is not None:
        m["p"] = payload
    return msgpack.packb(m)


def parse(data: bytes) -> tuple[int, str, bytes | None]:
    """(seq, kind, payload); ValueError when it is not a stream message."""
    try:
        m = msgpack.unpackb(data, raw=False)
        seq, kind = m["s"], m["k"]
    except Exception as e:
        raise ValueError(f"not a stream message: {e}") from None
    return _checked(seq, kind, m.get("p"))


def _checked(seq: Any, kind: Any, payload: Any) -> tuple[int, str, bytes | None]:
    """A message's parts, or ValueError: an integer seq, a known kind, bytes or no payload."""
    if type(seq) is not int or type(kind) is not str or kind not in _KINDS:
        raise ValueError(f"not a stream message: seq {seq!r}, kind {kind!r}")
    return seq, kind, payload if type(payload) is bytes else None


def put_message(data: bytes, stream: OutputStream) -> None:
    """One message, decoded, to its request's stream. A message that cannot
    be read ends the stream with an internal error (a broken peer)."""
    try:
        seq, kind, payload = parse(data)
        _put(stream, seq, kind, payload)
    except (ValueError, codec.CodecError) as e:
        stream.fail(EngineError(str(e), "internal"))


Entry = tuple[str, int, str, "bytes | None"]  # request id, seq, kind, payload


def batch(entries: list[Entry]) -> bytes:
    return msgpack.packb(entries)


def put_batch(data: bytes, streams: dict[str, OutputStream]) -> None:
    """Each message of a batch to its request's stream (requests no longer
    read are skipped). An entry that cannot be read ends its own request's
    stream; a batch that cannot be read at all names no request to fail
    (logged, and its requests' streams see the gap in their sequence)."""
    try:
        entries = msgpack.unpackb(data, raw=False)
        if type(entries) is not list:
            raise ValueError("not a list")
    except Exception as e:
        log.warning("dropped a stream batch that could not be read: %s", e)
        return
    for entry in entries:
        if type(entry) is not list or len(entry) != 4 or type(entry[0]) is not str:
            log.warning("dropped a stream batch entry that was not [id, seq, kind, payload]")
            continue
        rid, seq, kind, payload = entry
        stream = streams.get(rid)
        if stream is None:
            continue
        try:
            _put(stream, *_checked(seq, kind, payload))
        except (ValueError, codec.CodecError) as e:
            stream.fail(EngineError(str(e), "internal"))


def _put(stream: OutputStream, seq: int, kind: str, payload: bytes | None) -> None:
    if kind == OUTPUTS:
        stream.put(seq, "outputs", codec.decode_outputs(payload or b""))
    elif kind == ERROR:
        stream.put(seq, "error", codec.decode_error(payload or b""))
    else:
        stream.put(seq, _KINDS[kind], None)
