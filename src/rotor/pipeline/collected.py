"""A choice's whole answer, collected from its internal events: what every
non-streaming response (and the terminal inputs) is built from.

The pieces stay in the order they came, with consecutive text of one kind
(content, reasoning) joined, because the Anthropic and Responses bodies keep
that order (blocks, items); the OpenAI message joins all of each kind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from rotor.pipeline.decode import End
from rotor.pipeline.events import ChoiceEvent, Finished
from rotor.pipeline.parse.base import Content, Piece, Reasoning, ToolCall
from rotor.protocol.engine import PromptLogprob, TokenLogprob

# a run of text: its kind and its texts, joined when asked for
_Run = tuple[type[Content] | type[Reasoning], list[str]]


class Collected:
    __slots__ = ("_runs", "logprobs", "token_ids", "prompt_logprobs", "finished")

    def __init__(self) -> None:
        # runs of text, and tool calls in their place among them
        self._runs: list[_Run | ToolCall] = []
        self.logprobs: list[TokenLogprob] = []
        self.token_ids: list[int] = []  # (`return_token_ids`)
        self.prompt_logprobs: list[PromptLogprob] | None = None  # (when asked)
        self.finished: Finished | None = None

    def add(self, event: ChoiceEvent) -> None:
        runs = self._runs
        for piece in event.pieces:
            if isinstance(piece, ToolCall):
                runs.append(piece)
                continue
            last = runs[-1] if runs else None
            if isinstance(last, tuple) and last[0] is type(piece):
                last[1].append(piece.text)
            else:
                runs.append((type(piece), [piece.text]))
        if event.logprobs:
            self.logprobs.extend(event.logprobs)
        if event.token_ids:
            self.token_ids.extend(event.token_ids)
        if event.prompt_logprobs is not None:
            self.prompt_logprobs = event.prompt_logprobs
        if event.finished is not None:
            self.finished = event.finished

    def pieces(self) -> list[Piece]:
        """The answer in order, consecutive text of one kind joined."""
        return [run if isinstance(run, ToolCall) else run[0]("".join(run[1])) for run in self._runs]

    def _texts(self, kind: type[Content] | type[Reasoning]) -> list[str]:
        return ["".join(run[1]) for run in self._runs if isinstance(run, tuple) and run[0] is kind]

    def text(self) -> str:
        return "".join(self._texts(Content))

    def reasoning(self) -> str | None:
        """All the reasoning; None when there was none."""
        parts = self._texts(Reasoning)
        return "".join(parts) if parts else None

    def tool_calls(self) -> list[ToolCall]:
        return [run for run in self._runs if isinstance(run, ToolCall)]

    @property
    def finish_reason(self) -> str | None:
        """How it finished, as a client is told (None for a cancelled choice)."""
        f = self.finished
        return f.finish_reason if f is not None and f.end is not End.CANCELLED else None

    @property
    def stop_reason(self) -> int | str | None:
        f = self.finished
        return f.stop_reason if f is not None and f.end is not End.CANCELLED else None


async def collect(events: AsyncIterator[ChoiceEvent], n: int) -> list[Collected]:
    """Every choice of a response, collected (the events of choice i go to [i])."""
    choices = [Collected() for _ in range(n)]
    async for event in events:
        choices[event.index].add(event)
    return choices
