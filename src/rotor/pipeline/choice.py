"""One choice, end to end inside the frontend: decode, then parse, then the
finish_reason that both imply. Streaming and non-streaming both consume this."""

from __future__ import annotations

from rotor.pipeline.decode import ChoiceDecoder, End, Ended
from rotor.pipeline.events import ChoiceEvent, Failure, Finished
from rotor.pipeline.parse.base import ParseError, Piece
from rotor.pipeline.parse.message import MessageParser
from rotor.protocol.engine import EngineOutput, TokenLogprob


class ChoicePipeline:
    __slots__ = (
        "index",
        "decoder",
        "parser",
        "grammar",
        "named_tool",
        "finished",
        "_lp_sent",
    )

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
        self.finished: Finished | None = None
        self._lp_sent = 0

    @property
    def calls(self) -> int:
        """The tool calls the choice has handed out (its parser counts them)."""
        return self.parser.calls

    @property
    def logprobs(self) -> list[TokenLogprob]:
        return self.decoder.logprobs

    def event(self, index: int, pieces: list[Piece]) -> ChoiceEvent:
        """The event for what the last feed/close brought: its pieces, the
        logprobs not handed out yet (they go with text, or with the finish:
        tokens whose text is still held back keep theirs), and the finish."""
        lps = self.decoder.logprobs
        if lps and (pieces or self.finished is not None) and len(lps) > self._lp_sent:
            new = lps[self._lp_sent :]
            self._lp_sent = len(lps)
            return ChoiceEvent(index, pieces, new, self.finished)
        return ChoiceEvent(index, pieces, [], self.finished)

    def feed(self, out: EngineOutput) -> list[Piece]:
        """Pieces for one engine output; nothing once the choice has finished."""
        if self.finished is not None:
            return []
        decoder = self.decoder
        text = decoder.feed(out)
        pieces = self.parser.feed(text) if text else []
        if decoder.end is not None:
            return self._end(pieces, decoder.end)
        return pieces

    def close(self, kind: End = End.TRANSPORT_EOF, failure: Failure | None = None) -> list[Piece]:
        """The engine stream ended (or broke, or the client left) before an End."""
        if self.finished is not None:
            return []
        text = self.decoder.close(kind, failure.message if failure else None)
        pieces = self.parser.feed(text) if text else []
        assert self.decoder.end is not None
        return self._end(pieces, self.decoder.end, failure)

    def _end(
        self, pieces: list[Piece], ended: Ended, failure: Failure | None = None
    ) -> list[Piece]:
        kind = ended.kind
        if kind is End.ERROR:
            # An engine output that says "error" is the engine breaking: internal.
            failure = failure or Failure("internal", ended.error or "engine error")
            self.finished = Finished("stop", None, kind, failure)
            return []
        if kind is End.CANCELLED:
            self.finished = Finished("stop", None, kind)
            return []
        strict = kind is End.MODEL_EOS and self.grammar
        try:
            pieces = pieces + self.parser.finish(strict=strict, eos_text=ended.eos_text)
        except ParseError as e:
            failure = Failure("malformed", f"malformed tool call: {e.detail}")
            self.finished = Finished("stop", None, End.ERROR, failure)
            return []
        if kind is End.LENGTH:
            reason = "length"
        elif self.calls and not self.named_tool:
            reason = "tool_calls"
        else:
            reason = "stop"
        self.finished = Finished(reason, ended.stop_reason, kind)
        return pieces
