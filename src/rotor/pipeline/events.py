"""The internal event stream of one response: what the frontend yields and
every API (and the terminal inputs) shapes in its own way.

One `ChoiceEvent` per engine output that moved a choice: the message pieces
it brought (content, reasoning, tool calls), the logprobs of its tokens (and,
when asked, their ids; on its first event, the prompt's logprobs), and — on
the choice's last event — how it finished. Nothing here is ever
serialised as it is: each API builds its JSON from an allow-list of fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from rotor.pipeline.decode import ChoiceDecoder, End
from rotor.pipeline.parse.base import Piece
from rotor.protocol.engine import EngineError, PromptLogprob, TokenLogprob

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
    # why an engine was unavailable (protocol/engine.Cause): "overloaded"
    # is the API's 503 or 529 (--overload-status); None for the other kinds
    cause: str | None = None

    @classmethod
    def from_engine(cls, error: EngineError) -> Failure:
        return cls(error.kind, error.message, error.param, error.cause)


class ResponseFailed(Exception):
    """The response cannot go on: an engine error, or output that broke its
    constraint. Raised by the event stream in the place of the failed
    choice's last event. Before the first event it is the response's status;
    after it, each API ends its stream in its own way."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass(slots=True)
class Finished:
    """The end of a choice as the APIs need it."""

    finish_reason: str  # stop | length | tool_calls
    stop_reason: int | str | None
    end: End
    failure: Failure | None = None  # set when end is ERROR (and for strict parse failures)


@dataclass(slots=True)
class ChoiceEvent:
    index: int  # the choice, across the whole response
    pieces: list[Piece]
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of this event's tokens
    finished: Finished | None = None
    # this event's token ids (`return_token_ids`; None when not asked)
    token_ids: list[int] | None = None
    # the prompt's logprobs, on the choice's first event when asked
    # (`EngineOutput.prompt_logprobs`: one per prompt token after the first)
    prompt_logprobs: list[PromptLogprob] | None = None


class Usage:
    """Token counts of one response. Completion tokens are not counted here:
    each choice's decoder counts the tokens it was given (the one count that
    usage, metrics and the access log all read), and this sums them."""

    __slots__ = ("prompt_tokens", "cached_tokens", "_decoders")

    def __init__(self, prompt_tokens: int = 0, decoders: Sequence[ChoiceDecoder] = ()) -> None:
        self.prompt_tokens = prompt_tokens
        self.cached_tokens: int | None = None
        self._decoders = decoders

    @property
    def choices(self) -> int:
        return len(self._decoders)

    @property
    def completion_tokens(self) -> int:
        """Tokens generated so far, over every choice (final once the events end)."""
        return sum(d.tokens for d in self._decoders)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
