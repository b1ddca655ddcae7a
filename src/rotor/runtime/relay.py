"""An engine's stream relayed on to its reader's process (a worker to its
frontend over NATS, the engine process to an HTTP process over the socket):
the Sink at the engine's end of a transport."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rotor.protocol.engine import EngineError, EngineOutput

log = logging.getLogger("rotor.runtime")


class Relay:
    """Each output the engine puts goes into the transport's next write
    (`add`), in the engine's own turn; its end goes to `end` (None, or the
    stream's error as an EngineError: anything else is a bug, logged and
    sent as an internal error) and resolves `over`, which the task that
    serves the request waits on."""

    __slots__ = ("_add", "_end", "over")

    def __init__(
        self,
        add: Callable[[EngineOutput], None],
        end: Callable[[EngineError | None], None] | None = None,
    ) -> None:
        self._add, self._end = add, end
        self.over: asyncio.Future[EngineError | None] = asyncio.get_running_loop().create_future()

    def put(self, item: EngineOutput) -> bool:
        self._add(item)
        return True

    def end(self, error: Exception | None) -> None:
        if self.over.done():
            return
        if error is not None and not isinstance(error, EngineError):
            log.error(
                "an engine's stream failed", exc_info=(type(error), error, error.__traceback__)
            )
            error = EngineError(f"{type(error).__name__}: {error}", "internal")
        self.over.set_result(error)
        if self._end is not None:
            self._end(error)
