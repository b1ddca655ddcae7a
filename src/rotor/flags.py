"""One command-line flag, described where it belongs: the `rotor` commands'
own (cli.py) and each engine's (engines/registry.py), each also read from
`ROTOR_<NAME>`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flag:
    name: str  # "--max-num-seqs"
    help: str
    type: Any = str
    default: Any = None
    # "store_true"; "extend": repeatable, one or more values each; "append": repeatable,
    # one value each (ROTOR_<NAME>: split on spaces)
    action: str | None = None
    choices: tuple[str, ...] | None = None
    minimum: float | None = None  # numbers: the smallest value allowed
    maximum: float | None = None
    nargs: str | None = None  # "+": one or more values (ROTOR_<NAME>: split on spaces)

    def parse(self, raw: str) -> Any:
        """The flag's value from its text; ValueError saying what is wrong."""
        try:
            value = self.type(raw)
        except ValueError as e:
            kind = {int: "an integer", float: "a number"}.get(self.type)
            if kind is None and str(e):  # a parser of rotor's own says what it expects
                raise
            raise ValueError(f"expected {kind or 'a valid value'}, got {raw!r}") from None
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be at least {self.minimum:g}, got {raw}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"must be at most {self.maximum:g}, got {raw}")
        return value

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")
