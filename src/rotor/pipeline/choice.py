"""One choice, end to end inside the frontend: decode, then parse, then the
finish_reason that both imply. Streaming and non-streaming both consume this.

With `return_token_ids` a choice also keeps the ids its decoder took: the
engine's own ids, up to and including the one that ended the choice (a stop
string's last token too, as vLLM returns it); ids past that end are dropped,
as their text is."""

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
        "token_ids",
        "_lp_sent",
        "_ids_sent",
    )

    def __init__(
        self,
        index: int,
        decoder: ChoiceDecoder,
        parser: MessageParser,
        grammar_installed: bool = False,
        named_tool: bool = False,
        keep_ids: bool = False,
    ) -> None:
        self.index = index
        self.decoder = decoder
        self.parser = parser
        self.grammar = grammar_installed
        self.named_tool = named_tool
        self.finished: Finished | None = None
        # the ids the decoder took (`return_token_ids`); None when not asked
        self.token_ids: list[int] | None = [] if keep_ids else None
        self._lp_sent = 0
        self._ids_sent = 0

    @property
    def calls(self) -> int:
        """The tool calls the choice has handed out (its parser counts them)."""
        return self.parser.calls

    @property
    def logprobs(self) -> list[TokenLogprob]:
        return self.decoder.logprobs

    def event(self, index: int, pieces: list[Piece]) -> ChoiceEvent:
        """The event for what the last feed/close brought: its pieces, the
        logprobs and token ids not handed out yet (they go with text, or with
        the finish: tokens whose text is still held back keep theirs), and
        the finish."""
        if self.token_ids is not None:
            return self._event_with_ids(index, pieces)
        lps = self.decoder.logprobs
        if lps and (pieces or self.finished is not None) and len(lps) > self._lp_sent:
            new = lps[self._lp_sent :]
            self._lp_sent = len(lps)
            return ChoiceEvent(index, pieces, new, self.finished)
        return ChoiceEvent(index, pieces, [], self.finished)

    def _event_with_ids(self, index: int, pieces: list[Piece]) -> ChoiceEvent:
        """`event` when the ids are kept: they go where the logprobs go."""
        event = ChoiceEvent(index, pieces, [], self.finished, [])
        if not pieces and self.finished is None:
            return event
        lps = self.decoder.logprobs
        if len(lps) > self._lp_sent:
            event.logprobs = lps[self._lp_sent :]
            self._lp_sent = len(lps)
        ids = self.token_ids
        assert ids is not None
        if len(ids) > self._ids_sent:
            event.token_ids = ids[self._ids_sent :]
            self._ids_sent = len(ids)
        return event

    def feed(self, out: EngineOutput) -> list[Piece]:
        """Pieces for one engine output; nothing once the choice has finished."""
        if self.finished is not None:
            return []
        decoder = self.decoder
        ids = self.token_ids
        if ids is not None:
            taken = decoder.tokens
            text = decoder.feed(out)
            ids.extend(out.token_ids[: decoder.tokens - taken])
        else:
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
