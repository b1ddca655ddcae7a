"""The messages of one request's output stream, worker → frontend. Each is a
msgpack map with a sequence number `s` (from 0, so a lost or repeated
message is seen) and a kind `k`:

- `o` outputs: `p` is `codec.encode_outputs` (several engine outputs, in order)
- `e` error:   `p` is `codec.encode_error` (the stream ends)
- `h` heartbeat: the worker is alive and working (sent when it is quiet)
- `d` done:    the engine's stream ended
"""

from __future__ import annotations

from typing import Any

import msgpack

from rotor.protocol import codec
from rotor.protocol.engine import EngineError
from rotor.runtime.stream import Kind, OutputStream

OUTPUTS, ERROR, HEARTBEAT, DONE = "o", "e", "h", "d"
_KINDS: dict[str, Kind] = {OUTPUTS: "outputs", ERROR: "error", HEARTBEAT: "heartbeat", DONE: "done"}

# How often a quiet worker says it is alive, and how long a frontend waits
# for any message before it counts the worker dead.
HEARTBEAT_S = 1.0
SILENCE_S = 4.0


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
    if not isinstance(seq, int) or kind not in _KINDS:
        raise ValueError(f"not a stream message: seq {seq!r}, kind {kind!r}")
    payload = m.get("p")
    return seq, kind, payload if isinstance(payload, bytes) else None


def deliver(data: bytes, stream: OutputStream) -> None:
    """One message, decoded, to its request's stream. A message that cannot
    be read ends the stream with an internal error (a broken peer)."""
    try:
        seq, kind, payload = parse(data)
        if kind == OUTPUTS:
            stream.put(seq, "outputs", codec.decode_outputs(payload or b""))
        elif kind == ERROR:
            stream.put(seq, "error", codec.decode_error(payload or b""))
        else:
            stream.put(seq, _KINDS[kind], None)
    except (ValueError, codec.CodecError) as e:
        stream.fail(EngineError(str(e), "internal"))
