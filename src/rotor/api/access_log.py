"""One access line per HTTP request, written when the response is really over.

An ASGI middleware, outermost, so that it sees every response (401s from auth,
404s for unknown routes, 500s from the last-resort handler) and the moment a
stream ends, whether it was sent whole or its client went away. What only the
route knows arrives through the request's state (api/access_state.py): the
model the body named and the started response, whose usage observe.py counts
too — read once, at the end.

Probes (/health, /live, /metrics) log at debug, everything else at info.
Every response carries the `x-request-id` its line names.

With `--request-log`, the same end hands a generating request's record
(api/request_record.py) to the log's writer (api/request_log.py): once per
request, and the writer's thread does the rest.

Tracing on, the same start and end open and end the request's span
(api/request_span.py), the current span of everything the request runs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rotor import tracing
from rotor.api.access_state import KEY, Access, StreamTiming
from rotor.api.body import request_id
from rotor.api.request_log import RequestLog
from rotor.api.request_record import GENERATING, record
from rotor.api.request_span import end_request_span, open_request_span

log = logging.getLogger("rotor.access")

PROBES = frozenset({"/health", "/live", "/metrics"})
_RID_HEADER = b"x-request-id"


class AccessLog:
    """Plain ASGI, so that streams pass through untouched: a stream's writes go
    straight to the server's send (no frame of ours); only the start and the
    last write are looked at."""

    def __init__(self, app: ASGIApp, request_log: RequestLog | None = None) -> None:
        self.app = app
        self.request_log = request_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        access = Access()
        scope.setdefault("state", {})[KEY] = access
        request_log = self.request_log if scope["path"] in GENERATING else None
        arrival = 0.0
        if request_log is not None:
            arrival = time.time()
            access.timing = StreamTiming()
        rid = request_id(Request(scope))
        span = open_request_span(scope, rid, scope["path"] in PROBES)  # tracing on: its span
        status = 0
        complete = False

        async def edge(message: Message) -> None:  # the start, the last write, anything else
            nonlocal status, complete
            kind = message["type"]
            if kind == "http.response.start":
                status = message["status"]
                headers = message.get("headers") or []
                if not any(k.lower() == _RID_HEADER for k, _ in headers):
                    message["headers"] = [*headers, (_RID_HEADER, rid.encode())]
                await send(message)
            elif kind == "http.response.body":
                await send(message)
                complete = True
            else:
                await send(message)

        def tracked(message: Message) -> Awaitable[None]:
            if message.get("more_body") and message["type"] == "http.response.body":
                return send(message)  # a stream's write: straight to the server's send
            return edge(message)

        raised = False
        context = tracing.use(span)  # the request's span, found by every step below
        try:
            await self.app(scope, receive, tracked)
        except BaseException:  # a bug below everything (the server answers 500), or cancelled
            raised = True
            status = status or 500
            raise
        finally:
            level = logging.DEBUG if scope["path"] in PROBES else logging.INFO
            gone = status == 499 or (not complete and not raised)
            tracing.reset(context)
            end_request_span(span, status, access, gone)
            if log.isEnabledFor(level):
                _write(level, scope, status, access, rid, t0, gone)
            if request_log is not None:
                _submit(request_log, scope["path"], status, access, rid, arrival, t0, gone)


def _submit(
    request_log: RequestLog,
    path: str,
    status: int,
    access: Access,
    rid: str,
    arrival: float,
    t0: float,
    gone: bool,
) -> None:
    """The request's record to the request log; a bug here costs the record, not the request."""
    try:
        end = time.perf_counter()
        request_log.submit(
            record(path, status, access, rid, arrival, t0, end, gone, request_log.hashes)
        )
    except Exception:
        log.exception("request log: no record for request %s", rid)


def _write(
    level: int, scope: Scope, status: int, access: Access, rid: str, t0: float, gone: bool
) -> None:
    """The line: `POST /v1/chat/completions 200 model=m prompt_tokens=5
    completion_tokens=7 duration_ms=12.3 request_id=abc` (+ `client disconnected`)."""
    fields: dict[str, Any] = {
        "method": scope["method"],
        "route": scope["path"],
        "status": status,
    }
    resp = access.response
    if resp is not None:
        fields["model"] = resp.model
        fields["prompt_tokens"] = resp.usage.prompt_tokens
        fields["completion_tokens"] = resp.usage.completion_tokens
    elif access.model is not None:
        fields["model"] = access.model
    fields["duration_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    fields["request_id"] = rid
    if gone:
        fields["disconnected"] = True
    words = [_word(fields["method"]), _word(fields["route"]), str(status)]
    words += [f"{k}={_word(str(v))}" for k, v in fields.items() if k not in _POSITIONAL]
    if gone:
        words.append("client disconnected")
    log.log(level, " ".join(words), extra={"fields": fields})


_POSITIONAL = ("method", "route", "status", "disconnected")


def _word(text: str) -> str:
    """`text` as one word of the line: a JSON string (ASCII) when it holds a
    space, a quote or anything unprintable, so no client-chosen path or model
    name can split a line or forge one."""
    if text and text.isprintable() and " " not in text and '"' not in text:
        return text
    return json.dumps(text)
