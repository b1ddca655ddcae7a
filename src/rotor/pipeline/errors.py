"""A request's errors as its caller is told them: the one error its
preparation raises, and a validation error's message naming the field(s)
(the HTTP API's 400s and the terminal inputs say the same)."""

from __future__ import annotations

from pydantic import ValidationError


class RequestError(ValueError):
    """A request that cannot run as given: HTTP 400 naming `param` (the request
    field at fault, as the chat API spells it; each API renames it to its own)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def describe_validation(error: ValidationError) -> tuple[str, str | None]:
    """A message naming the offending field(s), and the first field as `param`."""
    parts = []
    param = None
    for e in error.errors():
        loc = ".".join(str(x) for x in e["loc"] if not (isinstance(x, str) and "[" in x))
        if param is None:
            param = loc or None
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown field {loc!r}")
        elif e["type"] == "missing":
            parts.append(f"missing required field {loc!r}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            # a message that begins with its own field (`messages[0]…`) needs no prefix
            named = loc and msg.startswith(loc) and msg[len(loc) : len(loc) + 1] in ("[", ".", " ")
            parts.append(f"{loc}: {msg}" if loc and not named else msg)
    return "; ".join(parts) or "invalid request", param
