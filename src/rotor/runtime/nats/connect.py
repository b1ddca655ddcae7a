"""Connecting to NATS: wait for it to answer, saying so within a second and
every few seconds after, then let nats-py reconnect on its own forever.

nats-py's `connect` with reconnects allowed retries the first connection
itself, forever and silently; it is run as a task here, and this waits on it
with a clock of its own, so a NATS that is not there is said at once (with
the last error nats-py met) and the wait can be cancelled at any point (a
SIGTERM during startup)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import nats
from nats.aio.client import Client

from rotor import logs

log = logging.getLogger("rotor.runtime")

FIRST_SAY_S = 1.0  # a NATS that has not answered by then is said to be missing
SAY_EVERY_S = 3.0
CANCEL_TRIES = 10
CANCEL_WAIT_S = 0.5


async def connect(
    url: str,
    name: str,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
) -> Client:
    """A connection to `url`; waits (saying so) while NATS is not there."""
    last_error: list[str] = []

    async def reconnected() -> None:
        log.warning("%s: reconnected to NATS at %s", name, url)
        if on_reconnect is not None:
            await on_reconnect()

    async def disconnected() -> None:
        log.warning("%s: lost NATS at %s; reconnecting", name, url)

    async def error(e: Exception) -> None:
        last_error[:] = [str(e) or type(e).__name__]
        log.debug("%s: NATS error: %s", name, e)

    loop = asyncio.get_running_loop()
    attempt = loop.create_task(
        nats.connect(
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
    )
    start = loop.time()
    wait = FIRST_SAY_S
    try:
        while True:
            done, _ = await asyncio.wait({attempt}, timeout=wait)
            if done:
                return attempt.result()
            why = f" ({last_error[0]})" if last_error else ""
            logs.say(
                f"{name}: cannot reach NATS at {url}{why}; retrying "
                f"(waited {loop.time() - start:.0f} s)",
                logging.WARNING,
            )
            wait = SAY_EVERY_S
    finally:
        # nats-py's connect can lose a cancel (Python 3.11's wait_for drops
        # one that lands as its inner attempt ends, and it retries forever):
        # cancel until it goes, within bounds, so a stop signal always ends startup
        for _ in range(CANCEL_TRIES):
            if attempt.done():
                break
            attempt.cancel()
            await asyncio.wait({attempt}, timeout=CANCEL_WAIT_S)
        if attempt.done() and not attempt.cancelled():
            attempt.exception()  # retrieved: a failed attempt is not logged as lost
