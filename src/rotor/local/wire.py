"""Frames on the unix socket between HTTP processes and the engine process.

A frame is `u32 length` (big-endian) + `kind` (one byte) + `u8 id length` +
the engine request id + a payload in rotor's wire codec. Kinds, from the
HTTP side: GENERATE (an encoded EngineRequest), ABORT, STATE; from the engine
side: OUTPUTS (encoded outputs of one request, in order — every output the
engine produced for it since the last write), ERROR (an encoded EngineError:
the stream ends), DONE (the stream ends), STATE (the engine's state).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import msgpack

from rotor.protocol.engine import EngineState

GENERATE, ABORT, STATE, OUTPUTS, ERROR, DONE = b"G", b"A", b"S", b"O", b"E", b"D"
_KINDS = frozenset((GENERATE, ABORT, STATE, OUTPUTS, ERROR, DONE))
MAX_FRAME = 64 * 1024 * 1024  # a frame this large is a broken peer, not a message
_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineState))


class WireError(ValueError):
    """Bytes on the socket that are not frames: the connection is dropped."""


def frame(kind: bytes, request_id: str, payload: bytes = b"") -> bytes:
    rid = request_id.encode()
    if len(rid) > 255:
        raise WireError(f"request id of {len(rid)} bytes (at most 255)")
    size = 2 + len(rid) + len(payload)
    return size.to_bytes(4, "big") + kind + bytes((len(rid),)) + rid + payload


class Reader:
    """Splits a byte stream into frames, calling `on_frame(kind, id, payload)`."""

    __slots__ = ("_buf", "_on_frame")

    def __init__(self, on_frame: Callable[[bytes, str, bytes], None]) -> None:
        self._buf = bytearray()
        self._on_frame = on_frame

    def feed(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos, end = 0, len(buf)
        try:
            while end - pos >= 4:
                size = int.from_bytes(buf[pos : pos + 4], "big")
                if size < 2 or size > MAX_FRAME:
                    raise WireError(f"a frame of {size} bytes")
                if end - pos - 4 < size:
                    break
                start = pos + 4
                kind = bytes(buf[start : start + 1])
                if kind not in _KINDS:
                    raise WireError(f"unknown frame kind {kind!r}")
                n = buf[start + 1]
                rid = buf[start + 2 : start + 2 + n].decode()
                payload = bytes(buf[start + 2 + n : start + size])
                pos = start + size
                self._on_frame(kind, rid, payload)
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
