"""What a route learnt about its request, for the access line (api/access_log.py):
kept in the request's state, so that reading the body and starting the
response can say it without knowing about the log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

if TYPE_CHECKING:
    from rotor.frontend import StartedResponse

KEY = "access"  # the request-state key of a request's Access


class Access:
    """What the route learnt about one request."""

    __slots__ = ("model", "response")

    def __init__(self) -> None:
        self.model: str | None = None  # as the body named it
        self.response: StartedResponse | None = None  # the started response


def _access(request: Request) -> Access | None:
    state = request.scope.get("state")
    return state.get(KEY) if isinstance(state, dict) else None


def note_model(request: Request, model: Any) -> None:
    """The body's `model`, for the line of a request that never starts."""
    access = _access(request)
    if access is not None and isinstance(model, str):
        access.model = model


def note_response(request: Request, response: StartedResponse) -> None:
    """The started response: its served model name and token counts."""
    access = _access(request)
    if access is not None:
        access.response = response
