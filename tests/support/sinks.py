"""A sink that records what a source hands it (protocol/flow.py's Sink), for
tests that watch a source push: its items, its end, and a future that
resolves with the end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from rotor.protocol.engine import EngineOutput

T = TypeVar("T")


class Recorder(Generic[T]):
    """Every item put and the end (`ended`: the future of the end's error,
    None for a plain end). `on_put(recorder, item)` runs at each put (it may
    stop the source, or abort the request); `keep` is what each put says."""

    def __init__(self, on_put: Callable[[Recorder[T], T], Any] | None = None) -> None:
        self.items: list[T] = []
        self.ends = 0
        self.keep = True
        self.on_put = on_put
        self.ended: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def put(self, item: T) -> bool:
        assert not self.ended.done(), "a put after the end"
        self.items.append(item)
        if self.on_put is not None:
            self.on_put(self, item)
        return self.keep

    def end(self, error: Exception | None) -> None:
        self.ends += 1
        if not self.ended.done():
            self.ended.set_result(error)


class Outputs:
    """A sink of engine outputs that records them (`outputs_`) and how they
    ended (`ending`: "open" until the end, then None, or the error's message)."""

    def __init__(self) -> None:
        self.outputs_: list[EngineOutput] = []
        self.ending: Any = "open"

    def put(self, item: EngineOutput) -> bool:
        self.outputs_.append(item)
        return True

    def end(self, error: Exception | None) -> None:
        self.ending = str(error) if error is not None else None
