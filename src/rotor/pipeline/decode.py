"""Incremental detokenization and the one End of every choice.

`ChoiceDecoder.push` takes one EngineOutput and returns the text the client
may see now; once a stop fires, `end` is set and the choice is closed. The
order of checks is `specs/stops-and-eos.md`, literally: count, token-id stops
(visible, model EOS, user ids), detokenize + stop strings, max_tokens, then
whatever the engine reported. Stop strings are matched on a held-back window,
so a client never sees a character that a later match would have cut.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from rotor.model.tokenizer import IncrementalDecoder
from rotor.pipeline.parse.base import partial_marker_len
from rotor.protocol.engine import EngineOutput, StopParams, TokenLogprob


class End(enum.Enum):
    MODEL_EOS = "model_eos"
    VISIBLE_STOP = "visible_stop"
    USER_STOP_TOKEN = "user_stop_token"
    USER_STOP_STRING = "user_stop_string"
    LENGTH = "length"
    TRANSPORT_EOF = "transport_eof"
    CANCELLED = "cancelled"
    ERROR = "error"


@dataclass(slots=True)
class Ended:
    """How a choice ended. Internal: never serialised to a client."""

    kind: End
    stop_reason: int | str | None = None
    eos_text: str | None = None  # retained EOS text, for a parser that asked for it
    error: str | None = None

    @property
    def finish_reason(self) -> str:
        return "length" if self.kind is End.LENGTH else "stop"


class ChoiceDecoder:
    """Token ids (or text) of one choice → client text, and exactly one End."""

    __slots__ = (
        "_stop",
        "_max_tokens",
        "_min_tokens",
        "_eos",
        "_user_ids",
        "_visible",
        "_any_id_stop",
        "_strings",
        "_include_stop",
        "_decoder",
        "_token_text",
        "_retain_eos",
        "_held",
        "_last_id",
        "_undecoded",
        "tokens",
        "end",
        "logprobs",
    )

    def __init__(
        self,
        stop: StopParams,
        stop_strings: list[str] | None = None,
        include_stop_str: bool = False,
        decoder: IncrementalDecoder | None = None,
        token_text: Callable[[list[int]], str] | None = None,
        retain_eos_text: bool = False,
    ) -> None:
        """`decoder` turns ids into text (None for text-out engines);
        `token_text` decodes ids verbatim, special tokens included (visible
        stops, retained EOS text, a dangling partial character at the end)."""
        self._stop = stop
        self._max_tokens = stop.max_tokens
        self._min_tokens = stop.min_tokens
        self._eos = frozenset(() if stop.ignore_eos else stop.eos_token_ids)
        self._user_ids = frozenset(stop.stop_token_ids)
        self._visible = frozenset(stop.visible_stop_token_ids)
        self._any_id_stop = self._eos | self._user_ids | self._visible
        self._strings = tuple(stop_strings or ())
        self._include_stop = include_stop_str
        self._decoder = decoder
        self._token_text = token_text
        self._retain_eos = retain_eos_text
        self._held = ""  # unsent text that may still start a stop string
        self._last_id: int | None = None
        self._undecoded: list[int] = []  # ids whose character is not complete yet
        self.tokens = 0
        self.end: Ended | None = None
        self.logprobs: list[TokenLogprob] = []

    # -- per output ---------------------------------------------------------------

    def push(self, out: EngineOutput) -> str:
        """Text released by this output. Check `end` afterwards."""
        if self.end is not None:
            return ""
        if out.text is not None and not out.token_ids:
            text = self._text_token(out.text)
        else:
            text = self._token_ids(out)
        if self.end is None and out.finish is not None:
            text += self._engine_finish(out)
        return text

    def close(self, kind: End = End.TRANSPORT_EOF, error: str | None = None) -> str:
        """The stream ended (or was cut) with no finish: release what is held."""
        if self.end is not None:
            return ""
        self.end = Ended(kind, error=error)
        return self._flush()

    # -- the checks ---------------------------------------------------------------

    def _token_ids(self, out: EngineOutput) -> str:
        parts: list[str] = []
        lps = out.logprobs
        for i, tid in enumerate(out.token_ids):
            self.tokens += 1
            self._last_id = tid
            if lps is not None and i < len(lps):
                self.logprobs.append(lps[i])
            if tid in self._any_id_stop and self.tokens >= self._min_tokens:
                ended = self._id_stop(tid)
                if ended is not None:
                    parts.append(self._flush())
                    if ended.kind is End.VISIBLE_STOP:
                        parts.append(self._verbatim([tid]))
                    self.end = ended
                    return "".join(parts)
            piece = self._decoder.step(tid) if self._decoder is not None else ""
            if piece:
                self._undecoded.clear()
            else:
                self._undecoded.append(tid)
            parts.append(self._window(piece))
            if self.end is not None:
                return "".join(parts)
            if self.tokens >= self._max_tokens:
                parts.append(self._flush())
                self.end = Ended(End.LENGTH)
                return "".join(parts)
        return "".join(parts)

    def _text_token(self, text: str) -> str:
        """Text-out engines: one output is one token."""
        self.tokens += 1
        released = self._window(text)
        if self.end is None and self.tokens >= self._max_tokens:
            released += self._flush()
            self.end = Ended(End.LENGTH)
        return released

    def _id_stop(self, tid: int) -> Ended | None:
        if tid in self._visible:
            return Ended(End.VISIBLE_STOP)
        if tid in self._eos:
            return Ended(
                End.MODEL_EOS,
                stop_reason=tid if tid in self._user_ids else None,
                eos_text=self._verbatim([tid]) if self._retain_eos else None,
            )
        if tid in self._user_ids:
            return Ended(End.USER_STOP_TOKEN, stop_reason=tid)
        return None

    def _window(self, piece: str) -> str:
        """Append text; cut at the earliest stop string; hold a possible prefix."""
        if not self._strings:
            return piece
        window = self._held + piece
        if not window:
            return ""
        best, match = -1, None
        for s in self._strings:
            i = window.find(s)
            if i >= 0 and (best < 0 or i < best):
                best, match = i, s
        if match is not None:
            self._held = ""
            self.end = Ended(End.USER_STOP_STRING, stop_reason=match)
            return window[: best + len(match)] if self._include_stop else window[:best]
        keep = partial_marker_len(window, self._strings)
        self._held = window[len(window) - keep :] if keep else ""
        return window[: len(window) - keep]

    def _engine_finish(self, out: EngineOutput) -> str:
        """Step 5: the engine ended the choice without one of our stops firing."""
        finish, matched = out.finish, out.matched
        ended: Ended
        if finish == "eos":
            if self._stop.ignore_eos:
                ended = Ended(End.TRANSPORT_EOF)
            elif isinstance(matched, int):
                ended = self._id_stop(matched) or Ended(End.MODEL_EOS)
                if ended.kind is End.MODEL_EOS and self._retain_eos and ended.eos_text is None:
                    ended.eos_text = self._verbatim([matched])
            elif self._last_id is not None and self._last_id in self._eos:
                ended = Ended(End.MODEL_EOS, eos_text=self._eos_text(self._last_id))
            else:
                ended = Ended(End.TRANSPORT_EOF)
        elif finish == "length":
            ended = Ended(End.LENGTH)
        elif finish == "stop":
            if isinstance(matched, int) and matched in self._any_id_stop:
                ended = self._id_stop(matched) or Ended(End.TRANSPORT_EOF)
            elif isinstance(matched, str) and matched in self._strings:
                ended = Ended(End.USER_STOP_STRING, stop_reason=matched)
            else:
                ended = Ended(End.TRANSPORT_EOF)
        elif finish == "cancelled":
            ended = Ended(End.CANCELLED)
        else:
            ended = Ended(End.ERROR, error=out.error or "engine error")
        text = self._flush() if ended.kind is not End.ERROR else ""
        if ended.kind is End.VISIBLE_STOP and isinstance(matched, int):
            text += self._verbatim([matched])
        self.end = ended
        return text

    def _eos_text(self, tid: int) -> str | None:
        return self._verbatim([tid]) if self._retain_eos else None

    def _flush(self) -> str:
        """At the End: a dangling partial character, then the held window."""
        text = ""
        if self._undecoded:
            text = self._verbatim(self._undecoded)
            self._undecoded.clear()
        held, self._held = self._held, ""
        return held + text if held else text

    def _verbatim(self, ids: list[int]) -> str:
        return self._token_text(ids) if self._token_text is not None else ""
