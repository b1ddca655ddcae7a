"""Incremental detokenization and the one End of every choice.

`ChoiceDecoder.feed` takes one EngineOutput and returns the text the client
may see now; once a stop fires, `end` is set and the choice is closed. The
order of checks is `docs/stops-and-eos.md`, literally: count, token-id stops
(visible, model EOS, user ids), detokenize + stop strings, max_tokens, then
whatever the engine reported. Stop strings are matched on a held-back window,
so a client never sees a character that a later match would have cut.

"Earliest match" means the match that completes first in the character stream
(ties: the one that starts first). That is the only reading under which a stop
string behaves the same however the text is cut into tokens: with overlapping
stops "lo w" and "o", "hello world" stops at "hell" whether "hello" arrives
in one token or one character at a time.
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
        stops, retained EOS text)."""
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
        self.tokens = 0
        # max_tokens 0 (completions' echo: the prompt alone): ended before its
        # first token, which it never takes
        self.end: Ended | None = Ended(End.LENGTH) if stop.max_tokens == 0 else None
        self.logprobs: list[TokenLogprob] = []

    # -- per output ---------------------------------------------------------------

    def feed(self, out: EngineOutput) -> str:
        """Text released by this output. Check `end` afterwards."""
        if self.end is not None:
            return ""
        if out.text is not None and not out.token_ids:
            text = self._text_token(out.text)
        else:
            text = self._token_ids(out)
        if out.finish is not None and not self.ended():
            text += self._engine_finish(out)
        return text

    def ended(self) -> bool:
        """Whether the choice has its End (read anew: the checks above set it)."""
        return self.end is not None

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
        step = self._decoder.step if self._decoder is not None else None
        stops, strings = self._any_id_stop, self._strings
        for i, tid in enumerate(out.token_ids):
            tokens = self.tokens = self.tokens + 1
            self._last_id = tid
            if lps is not None and i < len(lps):
                self.logprobs.append(lps[i])
            checked = tokens >= self._min_tokens
            if checked and tid in stops:
                ended = self._id_stop(tid)
                if ended is not None:
                    parts.append(self._flush())
                    if ended.kind is End.VISIBLE_STOP:
                        parts.append(self._verbatim([tid]))
                    self.end = ended
                    return "".join(parts)
            # '' while a character is incomplete: DecodeStream holds its bytes, and
            # a character that never completes is never released (no U+FFFD).
            piece = step(tid) if step is not None else ""
            if piece:
                parts.append(self._window(piece, checked) if strings else piece)
                if self.end is not None:
                    return "".join(parts)
            if tokens >= self._max_tokens:
                parts.append(self._flush())
                self.end = Ended(End.LENGTH)
                return "".join(parts)
        return parts[0] if len(parts) == 1 else "".join(parts)

    def _text_token(self, text: str) -> str:
        """Text-out engines: one output is one token."""
        self.tokens += 1
        released = self._window(text, self.tokens >= self._min_tokens) if text else ""
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

    def _window(self, piece: str, check: bool) -> str:
        """Append new text; cut at the first stop string to complete in it; hold
        a suffix that may still start one. Below min_tokens (`check` false) no
        stop is matched, but the suffix is still held: a match may straddle."""
        if not self._strings:
            return piece
        held = self._held
        window = held + piece if held else piece
        if check:
            # Only a match that ends in the new text counts (one wholly inside
            # the held text was there below min_tokens). Earliest end wins,
            # then earliest start.
            floor = len(held)
            best_end, best_start, match = 0, 0, None
            for s in self._strings:
                i = window.find(s, max(0, floor - len(s) + 1))
                if i >= 0:
                    e = i + len(s)
                    if match is None or e < best_end or (e == best_end and i < best_start):
                        best_end, best_start, match = e, i, s
            if match is not None:
                self._held = ""
                self.end = Ended(End.USER_STOP_STRING, stop_reason=match)
                return window[:best_end] if self._include_stop else window[:best_start]
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
                ended = self._id_stop(self._last_id) or Ended(End.MODEL_EOS)
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
        if ended.kind is End.ERROR:
            text = ""
        elif ended.kind is End.USER_STOP_STRING and isinstance(matched, str):
            text = self._cut_held(matched)
        else:
            text = self._flush()
        if ended.kind is End.VISIBLE_STOP and isinstance(matched, int):
            text += self._verbatim([matched])
        self.end = ended
        return text

    def _cut_held(self, match: str) -> str:
        """The engine matched `match` past the text we have: the held suffix that
        starts it is the match, not text to release."""
        held, self._held = self._held, ""
        keep = partial_marker_len(held, (match,))
        text = held[: len(held) - keep]
        return text + match if self._include_stop else text

    def _flush(self) -> str:
        """At the End (not a stop string's): release the held window."""
        held, self._held = self._held, ""
        return held

    def _verbatim(self, ids: list[int]) -> str:
        return self._token_text(ids) if self._token_text is not None else ""
