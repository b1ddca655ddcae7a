"""Which store keeps stored Responses-API responses (`--response-store`),
built in the process that serves HTTP (a SQLite connection does not survive
a fork), and closed with it.

- `rotor run`: by default a SQLite file at `default_path()`: in the XDG
  state folder (`$XDG_STATE_HOME`, else `~/.local/state`), a `rotor` folder's
  `responses.sqlite3`:
  state a user's server keeps across restarts (continuing a conversation the
  next day), not a cache the system may clear (`~/.cache`) nor data worth
  backing up (`~/.local/share`); every `rotor run` of the user, and each of
  `--http-workers`' processes, shares it.
- `rotor frontend`: by default `nats`, the JetStream bucket every frontend
  on the NATS server shares (runtime/nats/response_bucket.py).
- `memory`: one process's, gone when it stops (with `--http-workers N`, each
  HTTP process has its own); any other value is a SQLite file's path
  (`./memory` for a file by that name).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Literal

from rotor.api.responses.sqlite_store import SQLiteStore
from rotor.api.responses.store import MemoryStore, ResponseStore, StoreUnavailable
from rotor.config import ResponseStoreConfig
from rotor.runtime.nats.response_bucket import ResponseBucket
from rotor.serve.build import StartupError

MEMORY = "memory"
NATS = "nats"
FILE_NAME = Path("rotor") / "responses.sqlite3"

# What a command keeps responses in when --response-store is not given.
Default = Literal["file", "nats"]


def default_path() -> Path:
    """`$XDG_STATE_HOME/rotor/responses.sqlite3` (a relative XDG_STATE_HOME is
    ignored, as the XDG spec says), else `~/.local/state/rotor/…`."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / FILE_NAME


def build_response_store(config: ResponseStoreConfig, default: Default) -> ResponseStore:
    """The store `config` names (or the command's `default`); StartupError when a
    SQLite file cannot be opened, or `nats` is asked for without NATS. A
    ResponseBucket is not connected yet: the frontend's Cluster starts it on
    its connection."""
    where = config.where or ("" if default == "file" else NATS)
    if where == MEMORY:
        return MemoryStore(ttl_s=config.ttl_s, max_records=2**63, max_bytes=config.max_bytes)
    if where == NATS:
        if default != "nats":
            raise StartupError(
                "--response-store nats: the JetStream bucket is rotor frontend's; "
                "rotor run keeps responses in a SQLite file or in memory"
            )
        return ResponseBucket(config.ttl_s, config.max_bytes)
    path = Path(where).expanduser() if where else default_path()
    try:
        return SQLiteStore(path, ttl_s=config.ttl_s, max_bytes=config.max_bytes)
    except StoreUnavailable as e:
        raise StartupError(f"--response-store: {e} (or --response-store memory)") from None


def check_response_store(config: ResponseStoreConfig, default: Default) -> None:
    """The store opened and closed once, before anything serves: a SQLite
    file that cannot be opened stops startup with one line, before
    `--http-workers` forks processes that would each fail."""
    store = build_response_store(config, default)
    asyncio.run(store.close())
