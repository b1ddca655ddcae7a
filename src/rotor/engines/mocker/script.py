"""The `mock` request extension: exact output for tests, the mocker's test surface.

    {"output": "<text>" | ["<text for choice 0>", ...],
     "end": "eos" | "eos_hidden" | "length" | "stop" | "eof" | "error",
     "tokens_per_step": 1}

The text is tokenized (special tokens written literally become their ids) and
streamed `tokens_per_step` ids per step; `end` says how the choice ends, so a
test can produce every end signal a real engine can send.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rotor.engines.base import EngineError
from rotor.protocol.engine import EngineOutput

ENDS = ("eos", "eos_hidden", "length", "stop", "eof", "error")
_KEYS = ("output", "end", "tokens_per_step")
SCRIPTED_ERROR = "mock: scripted error"


@dataclass(frozen=True, slots=True)
class Script:
    outputs: tuple[str, ...]  # one per choice
    end: str = "eos"
    tokens_per_step: int = 1


def parse_script(raw: Any, n: int) -> Script:
    """Validate a `mock` annotation; EngineError names the offending field."""
    if not isinstance(raw, dict):
        raise EngineError(f"mock must be an object, got {type(raw).__name__}", "mock")
    unknown = sorted(str(k) for k in raw if k not in _KEYS)
    if unknown:
        raise EngineError(
            f"mock: unknown field(s) {', '.join(unknown)}; expected {', '.join(_KEYS)}", "mock"
        )
    output = raw.get("output", "")
    if isinstance(output, str):
        outputs = (output,) * n
    elif isinstance(output, list) and all(isinstance(o, str) for o in output):
        if len(output) != n:
            raise EngineError(
                f"mock.output: a list needs one text per choice (n={n}), got {len(output)}",
                "mock",
            )
        outputs = tuple(output)
    else:
        raise EngineError("mock.output must be a string or a list of strings", "mock")
    end = raw.get("end", "eos")
    if end not in ENDS:
        raise EngineError(f"mock.end must be one of {', '.join(ENDS)}, got {end!r}", "mock")
    per_step = raw.get("tokens_per_step", 1)
    if not isinstance(per_step, int) or isinstance(per_step, bool) or per_step < 1:
        raise EngineError(f"mock.tokens_per_step must be an integer >= 1, got {per_step!r}", "mock")
    return Script(outputs, end, per_step)


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
