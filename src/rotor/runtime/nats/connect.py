"""Connecting to NATS: retry with backoff until it answers (saying so on
stderr every few seconds), then let nats-py reconnect on its own forever."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable

import nats
from nats.aio.client import Client

log = logging.getLogger("rotor.runtime")

SAY_EVERY_S = 3.0


async def connect(
    url: str,
    name: str,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
) -> Client:
    """A connection to `url`; waits (with backoff) while NATS is not there."""
    delay = 0.1
    said = 0.0
    start = time.monotonic()

    async def reconnected() -> None:
        log.warning("%s: reconnected to NATS at %s", name, url)
        if on_reconnect is not None:
            await on_reconnect()

    async def disconnected() -> None:
        log.warning("%s: lost NATS at %s; reconnecting", name, url)

    async def error(e: Exception) -> None:
        log.debug("%s: NATS error: %s", name, e)

    while True:
        try:
            return await nats.connect(
                url,
                name=name,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                connect_timeout=2,
                ping_interval=5,
                max_outstanding_pings=2,
                reconnected_cb=reconnected,
                disconnected_cb=disconnected,
                error_cb=error,
            )
        except Exception as e:  # not there yet: say so now and then, keep trying
            now = time.monotonic()
            if now - said >= SAY_EVERY_S:
                said = now
                waited = now - start
                print(
                    f"rotor: {name}: cannot reach NATS at {url} ({e}); retrying "
                    f"(waited {waited:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
