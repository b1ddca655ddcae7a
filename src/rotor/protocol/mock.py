"""The `mock` request extension: exact output for tests, the mocker's test surface.

    {"output": "<text>" | ["<text for choice 0>", ...],
     "end": "eos" | "eos_hidden" | "length" | "stop" | "eof" | "error",
     "tokens_per_step": 1}

One schema, checked by `parse_mock` wherever a script enters: the API's
request validation (a 400 naming `mock`) and the mocker's admission (a
refused engine request, for callers that reach an engine directly or over
the wire). The frontend gives each choice's engine request its own text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator

ENDS = ("eos", "eos_hidden", "length", "stop", "eof", "error")
_KEYS = ("output", "end", "tokens_per_step")


@dataclass(frozen=True, slots=True)
class MockScript:
    outputs: tuple[str, ...] | str  # one text per choice, or one text for all
    end: str = "eos"
    tokens_per_step: int = 1

    def output(self, index: int) -> str:
        return self.outputs if isinstance(self.outputs, str) else self.outputs[index]

    def for_choice(self, index: int) -> dict[str, Any]:
        """The script of one choice, as its own engine request carries it."""
        return {
            "output": self.output(index),
            "end": self.end,
            "tokens_per_step": self.tokens_per_step,
        }


def parse_mock(raw: Any, n: int | None = None) -> MockScript:
    """Validate a `mock` object (ValueError naming the field); with `n`, a list
    of outputs must have one text per choice."""
    if not isinstance(raw, dict):
        raise ValueError(f"mock must be an object, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in _KEYS)
    if unknown:
        raise ValueError(
            f"mock: unknown field(s) {', '.join(unknown)}; expected {', '.join(_KEYS)}"
        )
    output = raw.get("output", "")
    outputs: tuple[str, ...] | str
    if isinstance(output, str):
        outputs = output
    elif isinstance(output, list) and all(isinstance(o, str) for o in output):
        if n is not None and len(output) != n:
            raise ValueError(
                f"mock.output: a list needs one text per choice (n={n}), got {len(output)}"
            )
        outputs = tuple(output)
    else:
        raise ValueError("mock.output must be a string or a list of strings")
    end = raw.get("end", "eos")
    if end not in ENDS:
        raise ValueError(f"mock.end must be one of {', '.join(ENDS)}, got {end!r}")
    per_step = raw.get("tokens_per_step", 1)
    if not isinstance(per_step, int) or isinstance(per_step, bool) or per_step < 1:
        raise ValueError(f"mock.tokens_per_step must be an integer >= 1, got {per_step!r}")
    return MockScript(outputs, end, per_step)


def _checked(raw: dict[str, Any]) -> dict[str, Any]:
    parse_mock(raw)
    return raw


# The request field in every API's model: the raw object, checked by parse_mock.
MockField = Annotated[dict[str, Any], AfterValidator(_checked)]
