"""Playing a `mock` script (protocol/mock.py) as one choice's token source."""

from __future__ import annotations

from typing import Any

from rotor.protocol.engine import EngineError, EngineOutput
from rotor.protocol.mock import MockScript, parse_mock

SCRIPTED_ERROR = "mock: scripted error"


def parse_script(raw: Any, n: int) -> MockScript:
    """A `mock` annotation checked for an engine request of `n` choices; a bad
    one is a refused request naming `mock`."""
    try:
        return parse_mock(raw, n)
    except ValueError as e:
        raise EngineError(str(e), "refused", "mock") from None


class ScriptSource:
    """Plays one choice of a script; ignores stop rules (the frontend applies them).

    An `eos`/`eos_hidden` end needs the model's EOS id (MockerEngine checks that
    the model has one before it admits the request).
    """

    def __init__(
        self, token_ids: list[int], end: str, tokens_per_step: int, eos_id: int | None
    ) -> None:
        if end in ("eos", "eos_hidden"):
            assert eos_id is not None, "an eos end needs the model's EOS id"
            if end == "eos":
                token_ids = [*token_ids, eos_id]
        self.token_ids = token_ids
        self.end = end
        self.tokens_per_step = tokens_per_step
        self.eos_id = eos_id
        self.pos = 0
        self.closed = False

    def next(self, num_generated: int, limit: int) -> EngineOutput:
        take = min(self.tokens_per_step, limit)
        chunk = self.token_ids[self.pos : self.pos + take]
        self.pos += len(chunk)
        if self.pos < len(self.token_ids):
            return EngineOutput(token_ids=chunk)
        end = self.end
        if end in ("eos", "eos_hidden"):
            return EngineOutput(token_ids=chunk, finish="eos", matched=self.eos_id)
        if end == "eof":
            self.closed = True
            return EngineOutput(token_ids=chunk)
        if end == "error":
            return EngineOutput(token_ids=chunk, finish="error", error=SCRIPTED_ERROR)
        return EngineOutput(token_ids=chunk, finish="length" if end == "length" else "stop")
