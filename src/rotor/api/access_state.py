"""What a route learnt about its request, for the access line (api/access_log.py)
and the request log (api/request_record.py): kept in the request's state, so
that reading the body and starting the response can say it without knowing
about either log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

if TYPE_CHECKING:
    from rotor.frontend import StartedResponse

KEY = "access"  # the request-state key of a request's Access


class Access:
    """What the route learnt about one request."""

    __slots__ = ("model", "stream", "response", "timing")

    def __init__(self) -> None:
        self.model: str | None = None  # as the body named it
        self.stream: bool | None = None  # as the body asked
        self.response: StartedResponse | None = None  # the started response
        # Its stream's token times: only while a request log is written
        self.timing: StreamTiming | None = None


class StreamTiming:
    """When a response's generated pieces reached the frontend (api/observe.py
    fills it): the first one, and every gap after it. Kept only for the
    request log, which reads it once, when the request is over."""

    __slots__ = ("first", "gaps")

    def __init__(self) -> None:
        self.first: float | None = None  # perf_counter() of the first piece
        self.gaps: list[float] = []  # seconds between pieces, in order


def _access(request: Request) -> Access | None:
    state = request.scope.get("state")
    return state.get(KEY) if isinstance(state, dict) else None


def note_model(request: Request, model: Any, stream: Any = None) -> None:
    """The body's `model` (and `stream`), for the line of a request that never starts."""
    access = _access(request)
    if access is None:
        return
    if isinstance(model, str):
        access.model = model
    if isinstance(stream, bool):
        access.stream = stream


def note_response(request: Request, response: StartedResponse) -> None:
    """The started response: its served model name and token counts."""
    access = _access(request)
    if access is not None:
        access.response = response


def timing_of(request: Request) -> StreamTiming | None:
    """Where the response's token times go (None: no request log wants them)."""
    access = _access(request)
    return access.timing if access is not None else None
