"""Frames on the unix socket between HTTP processes and the engine process.

A frame is `u32 length` (big-endian) + `kind` (one byte) + `u32 seq` + `u8
id length` + the engine request id + a payload in rotor's wire codec. Kinds,
from the HTTP side: GENERATE (an encoded EngineRequest), ABORT, STATE, EMBED
(inputs' token ids to embed, under an id of the HTTP side's), SCORE (pairs'
token ids to score, likewise); from the engine side: VECTORS (an embed's
answer: its vectors, or its error), SCORES (a score's answer), OUTPUTS (encoded outputs of one request, in order — every
output the engine produced for it since the last write), ERROR (an encoded
EngineError: the stream ends), DONE (the stream ends), STATE (the engine's
state). The engine side numbers each request's OUTPUTS / ERROR / DONE frames
from 0 (`seq`), as a NATS worker numbers its messages, so both transports
are read by one reader (runtime/stream.py); other frames carry 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import msgpack

from rotor.protocol.engine import EngineState

GENERATE, ABORT, STATE, OUTPUTS, ERROR, DONE = b"G", b"A", b"S", b"O", b"E", b"D"
EMBED, VECTORS, SCORE, SCORES = b"M", b"V", b"C", b"R"
_KINDS = frozenset((GENERATE, ABORT, STATE, OUTPUTS, ERROR, DONE, EMBED, VECTORS, SCORE, SCORES))
# A frame larger is a broken peer, not a message: the connection is dropped.
# A request's images travel in its GENERATE frame (a 12 MB image is one
# frame); the client refuses a request larger than this rather than send it.
MAX_FRAME = 64 * 1024 * 1024
_HEAD = 1 + 4 + 1  # kind, seq, id length
_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineState))

OnFrame = Callable[[bytes, int, str, bytes], None]  # (kind, seq, request id, payload)


class WireError(ValueError):
    """Bytes on the socket that are not frames: the connection is dropped."""


def frame(kind: bytes, request_id: str, payload: bytes = b"", seq: int = 0) -> bytes:
    rid = request_id.encode()
    if len(rid) > 255:
        raise WireError(f"request id of {len(rid)} bytes (at most 255)")
    size = _HEAD + len(rid) + len(payload)
    return b"".join(
        (size.to_bytes(4, "big"), kind, seq.to_bytes(4, "big"), bytes((len(rid),)), rid, payload)
    )


class Reader:
    """Splits a byte stream into frames, calling `on_frame(kind, seq, id, payload)`."""

    __slots__ = ("_buf", "_on_frame")

    def __init__(self, on_frame: OnFrame) -> None:
        self._buf = bytearray()
        self._on_frame = on_frame

    def feed(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos, end = 0, len(buf)
        try:
            while end - pos >= 4:
                size = int.from_bytes(buf[pos : pos + 4], "big")
                if size < _HEAD or size > MAX_FRAME:
                    raise WireError(f"a frame of {size} bytes")
                if end - pos - 4 < size:
                    break
                start = pos + 4
                kind = bytes(buf[start : start + 1])
                if kind not in _KINDS:
                    raise WireError(f"unknown frame kind {kind!r}")
                seq = int.from_bytes(buf[start + 1 : start + 5], "big")
                n = buf[start + 5]
                if _HEAD + n > size:
                    raise WireError(f"a frame of {size} bytes with an id of {n}")
                rid = buf[start + _HEAD : start + _HEAD + n].decode()
                payload = bytes(buf[start + _HEAD + n : start + size])
                pos = start + size
                self._on_frame(kind, seq, rid, payload)
        finally:
            del buf[:pos]


def encode_state(state: EngineState) -> bytes:
    return msgpack.packb([getattr(state, name) for name in _STATE_FIELDS])


def decode_state(data: bytes) -> EngineState:
    """Fields by position; a newer peer's extra fields are ignored."""
    values: Any = msgpack.unpackb(data)
    if not isinstance(values, list):
        raise WireError("state: expected a list")
    return EngineState(*values[: len(_STATE_FIELDS)])
