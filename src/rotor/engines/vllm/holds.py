"""A vLLM prefill worker's hand-overs in the shared storage directory, held
until their decode worker loads them, the frontend drops them, or
`--kv-hold-timeout` runs out: rotor's storage connector's counterpart of
the mocker's pinned blocks.

The connector (storage_connector.py) writes a prefill request's KV under
its storage key and deletes it when the decode request that loaded it
finishes, so a folder that is gone was loaded. What only the prefill side
can do is give up on a hand-over nobody will load: the frontend says so
(the answer ended at its first token, the client left, the decode worker
failed: `release`), or nobody came for it in time (`expire`, counted). A
hold that ran out means a decode worker that comes later computes the
prompt itself (or, enforced, refuses), as with the mocker."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable

log = logging.getLogger("rotor.engines.vllm")


class StoredHolds:
    def __init__(
        self,
        root: str,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`root`: the connector's storage directory; `timeout_s`: how long a
        hand-over waits for its decode worker (0: until loaded or dropped)."""
        self.root = root
        self.timeout_s = timeout_s
        self.clock = clock
        self._held: dict[str, tuple[float, int]] = {}  # key -> (deadline, blocks)
        self.timeouts = 0

    def hold(self, key: str, blocks: int) -> None:
        """A prefill stored `blocks` blocks of KV under `key`."""
        deadline = self.clock() + self.timeout_s if self.timeout_s > 0 else float("inf")
        self._held[key] = (deadline, blocks)

    def release(self, key: str) -> bool:
        """Nobody will load `key`: delete it now. False: not held here."""
        if self._held.pop(key, None) is None:
            return False
        self._delete(key)
        return True

    def expire(self) -> float | None:
        """Delete (and count) the hand-overs past their deadline that no
        decode worker loaded; return the seconds until the next deadline
        (None: none to wait for). A timer may wake a little early (uvloop's
        clock is libuv's, in whole milliseconds): its owner waits again."""
        now = self.clock()
        wait: float | None = None
        for key, (deadline, _blocks) in list(self._held.items()):
            if deadline > now:
                if deadline != float("inf"):
                    wait = deadline - now if wait is None else min(wait, deadline - now)
                continue
            del self._held[key]
            if self._exists(key):
                self.timeouts += 1
                log.info("the KV hand-over %s was not loaded in %.0f s: deleted",
                         key, self.timeout_s)  # fmt: skip
                self._delete(key)
        return wait

    def pinned(self) -> int:
        """Blocks held for a decode worker now (a loaded hand-over is gone)."""
        for key in [k for k in self._held if not self._exists(k)]:
            del self._held[key]  # loaded: the connector deleted it
        return sum(blocks for _deadline, blocks in self._held.values())

    def _exists(self, key: str) -> bool:
        return os.path.isdir(os.path.join(self.root, key))

    def _delete(self, key: str) -> None:
        shutil.rmtree(os.path.join(self.root, key), ignore_errors=True)
