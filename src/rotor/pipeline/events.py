"""The internal event stream of one response: what the frontend yields and
every API (and the terminal inputs) shapes in its own way.

One `ChoiceEvent` per engine output that moved a choice: the message pieces
it brought (content, reasoning, tool calls), the logprobs of its tokens, and
— on the choice's last event — how it finished. Nothing here is ever
serialised as it is: each API builds its JSON from an allow-list of fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rotor.pipeline.decode import End
from rotor.pipeline.parse.base import Piece
from rotor.protocol.engine import EngineError, TokenLogprob

# refused: the request (400); unavailable: no engine can serve it now (503);
# internal: a bug or a broken engine (500, message logged, not sent);
# malformed: the model's output broke a constraint it was held to (500, the
# message names the problem and is sent).
FailureKind = Literal["refused", "unavailable", "internal", "malformed"]


@dataclass(slots=True)
class Failure:
    kind: FailureKind
    message: str
    param: str | None = None

    @classmethod
    def from_engine(cls, error: EngineError) -> Failure:
        return cls(error.kind, error.message, error.param)


@dataclass(slots=True)
class Finished:
    """The end of a choice as the APIs need it."""

    finish_reason: str  # stop | length | tool_calls
    stop_reason: int | str | None
    completion_tokens: int
    end: End
    failure: Failure | None = None  # set when end is ERROR (and for strict parse failures)


@dataclass(slots=True)
class ChoiceEvent:
    index: int  # the choice, across the whole response
    pieces: list[Piece]
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of this event's tokens
    finished: Finished | None = None


class Usage:
    """Token counts of one response, summed over its engine requests."""

    __slots__ = ("prompt_tokens", "completion_tokens", "cached_tokens")

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
