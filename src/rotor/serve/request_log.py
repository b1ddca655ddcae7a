"""The request log as the HTTP flags ask for it (`--request-log`,
`--request-log-max-bytes`, `--request-log-hashes`), built in the process that
serves: with `--http-workers N`, every HTTP process writes a file of its own
(`for_process`), so none can clobber another's lines or rotate another's file
under it, and none waits on a shared writer."""

from __future__ import annotations

import dataclasses

from rotor.api.request_log import RequestLog, process_path
from rotor.config import HTTPConfig


def open_request_log(http: HTTPConfig) -> RequestLog | None:
    """The writer of `http.request_log`, not started yet (the app starts it); None without one."""
    if not http.request_log:
        return None
    return RequestLog(
        http.request_log, max_bytes=http.request_log_max_bytes, hashes=http.request_log_hashes
    )


def for_process(http: HTTPConfig, index: int) -> HTTPConfig:
    """HTTP process `index`'s config: its own request-log file (`requests-0.jsonl`, …)."""
    if not http.request_log:
        return http
    return dataclasses.replace(http, request_log=process_path(http.request_log, index))
