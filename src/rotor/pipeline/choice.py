"""One choice, end to end inside the frontend: decode, then parse, then the
finish_reason that both imply. Streaming and non-streaming both consume this."""

from __future__ import annotations

from dataclasses import dataclass

from rotor.pipeline.decode import ChoiceDecoder, End, Ended
from rotor.pipeline.parse.base import ParseError, Piece, ToolCall
from rotor.pipeline.parse.message import MessageParser
from rotor.protocol.engine import EngineOutput, TokenLogprob


@dataclass(slots=True)
class Finished:
    """The end of a choice as the APIs need it (internal; shaped per API)."""

    finish_reason: str  # stop | length | tool_calls
    stop_reason: int | str | None
    completion_tokens: int
    end: End
    error: str | None = None  # set for ERROR and strict parse failures (a request error)


class ChoicePipeline:
    __slots__ = ("index", "decoder", "parser", "grammar", "named_tool", "calls", "finished")

    def __init__(
        self,
        index: int,
        decoder: ChoiceDecoder,
        parser: MessageParser,
        grammar_installed: bool = False,
        named_tool: bool = False,
    ) -> None:
        self.index = index
        self.decoder = decoder
        self.parser = parser
        self.grammar = grammar_installed
        self.named_tool = named_tool
        self.calls = 0
        self.finished: Finished | None = None

    @property
    def logprobs(self) -> list[TokenLogprob]:
        return self.decoder.logprobs

    def push(self, out: EngineOutput) -> list[Piece]:
        """Pieces for one engine output; nothing once the choice has finished."""
        if self.finished is not None:
            return []
        text = self.decoder.push(out)
        pieces = self.parser.feed(text) if text else []
        if self.decoder.end is not None:
            return self._end(pieces, self.decoder.end)
        if pieces:
            self._count(pieces)
        return pieces

    def close(self, kind: End = End.TRANSPORT_EOF, error: str | None = None) -> list[Piece]:
        """The engine stream ended (or broke, or the client left) before an End."""
        if self.finished is not None:
            return []
        text = self.decoder.close(kind, error)
        pieces = self.parser.feed(text) if text else []
        assert self.decoder.end is not None
        return self._end(pieces, self.decoder.end)

    def _end(self, pieces: list[Piece], ended: Ended) -> list[Piece]:
        kind = ended.kind
        tokens = self.decoder.tokens
        if kind is End.ERROR or kind is End.CANCELLED:
            error = ended.error or ("cancelled" if kind is End.CANCELLED else "engine error")
            self.finished = Finished("stop", None, tokens, kind, error)
            return []
        strict = kind is End.MODEL_EOS and self.grammar
        try:
            pieces = pieces + self.parser.finish(strict=strict, eos_text=ended.eos_text)
        except ParseError as e:
            self.finished = Finished(
                "stop", None, tokens, End.ERROR, f"malformed tool call: {e.detail}"
            )
            return []
        self._count(pieces)
        if kind is End.LENGTH:
            reason = "length"
        elif self.calls and not self.named_tool:
            reason = "tool_calls"
        else:
            reason = "stop"
        self.finished = Finished(reason, ended.stop_reason, tokens, kind)
        return pieces

    def _count(self, pieces: list[Piece]) -> None:
        for p in pieces:
            if type(p) is ToolCall:
                self.calls += 1
