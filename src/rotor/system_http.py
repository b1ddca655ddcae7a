"""A small HTTP server that runs inside another asyncio program (a worker's
`--system-port`): uvicorn without its own signal handling, which belongs to
the program."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn


class EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the host program handles signals
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn
        return None
