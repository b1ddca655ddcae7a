"""The one error a request's preparation raises."""

from __future__ import annotations


class RequestError(ValueError):
    """A request that cannot run as given: HTTP 400 naming `param` (the request
    field at fault, as the chat API spells it; each API renames it to its own)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
