"""harmony — gpt-oss: an assistant turn made of channel segments.

The prompt ends with `<|start|>assistant`, so the output opens with a header;
later segments begin with `<|start|>assistant`. A header runs to `<|message|>`,
its body to `<|end|>`, `<|call|>` or `<|return|>`:

    <|channel|>analysis<|message|>…<|end|>                      → reasoning
    <|channel|>commentary<|message|>…<|end|>                    → content (preamble)
    <|channel|>commentary to=functions.f <|constrain|>json<|message|>{…}<|call|>   → call f
    <|start|>assistant to=functions.f<|channel|>commentary json<|message|>{…}<|call|>
    <|start|>assistant<|channel|>final<|message|>…<|return|>    → content

When nothing may be called (`tool_choice: "none"`) a recipient makes no call:
the segment is text of its channel, so a `commentary to=functions.f` body is
content, as written, and no call is returned (docs/tool-calling.md,
tool_choice). A request without tools still gets the call, to an undeclared
tool.

`HarmonyParser` is also the machine Beam (`beam.py`) builds on: the segment
framing is the same, only the call body and the rules at the end differ, and
those are the hooks below.
"""

from __future__ import annotations

from rotor.pipeline.parse.base import (
    Content,
    Piece,
    Reasoning,
    ToolCall,
    ToolParser,
    Tools,
    earliest,
    partial_marker_len,
)
from rotor.pipeline.parse.jsonutil import args_object, json_value_end

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
END = "<|end|>"
CALL = "<|call|>"
RETURN = "<|return|>"

TERMINATORS = (END, CALL, RETURN)
OPENERS = (START, CHANNEL)
_TEXT_STOPS = TERMINATORS + OPENERS
# A recipient may open a segment by itself (` to=f<|channel|>…`).
RECIPIENT = "to="
_OUT_STOPS = OPENERS + TERMINATORS + (MESSAGE, CONSTRAIN, RECIPIENT)
_TAIL = max(len(m) for m in _OUT_STOPS) - 1

# Where the machine is: between segments, in a header, in a text body, in a call body.
OUT, HEAD, TEXT, BODY = range(4)


def header_parts(header: str) -> tuple[str, str | None]:
    """(channel, recipient) of a header; the recipient may sit before or after the channel."""
    c = header.find(CHANNEL)
    channel = ""
    if c >= 0:
        rest = header[c + len(CHANNEL) :]
        channel = rest.split(maxsplit=1)[0] if rest.strip() else ""
        channel = channel.split("<|", 1)[0]
    k = header.find("to=")
    if k < 0:
        return channel, None
    if 0 <= k < c:
        name = header[k + 3 : c].strip()
    else:
        name = header[k + 3 :].split(maxsplit=1)[0] if header[k + 3 :].strip() else ""
        name = name.split("<|", 1)[0]
    return channel, name or None


class HarmonyParser(ToolParser):
    name = "harmony"
    needs_special_tokens = True
    visible_stop_markers = (CALL,)
    handles_reasoning = True

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._mode = OUT
        self._buf = ""
        self._scan = 0  # where to resume looking for a header's or a call body's end
        self._reasoning = False  # TEXT: analysis (reasoning) or content
        self._recipient = ""  # BODY: the called name
        self._head = ""  # the raw header of the open segment, for a malformed release
        # One step per mode (OUT, HEAD, TEXT, BODY); a step says whether it moved on.
        self._steps = (self._out, self._header, self._body_text, self._body_call)

    # -- the hooks a Harmony-framed family may change --------------------------

    def segment(self, header: str) -> tuple[bool, str | None]:
        """(is reasoning, called name or None) for a complete header. When
        nothing may be called, the segment is its channel's text."""
        channel, name = header_parts(header)
        if name is not None and self.tools.calls:
            return False, name.removeprefix("functions.")
        return channel == "analysis", None

    def call(self, name: str, body: str, closed: bool) -> ToolCall | None:
        """The call a body makes, None when malformed. An unclosed body counts
        only when it is one complete JSON object."""
        text = body.strip()
        if not text:
            return ToolCall(name, "{}") if closed else None
        if not closed and json_value_end(text) != len(text):
            return None
        args = args_object(text)
        return None if args is None else ToolCall(name, args)

    def malformed(self, raw: str, why: str) -> list[Piece]:
        """Markup that never became a segment or a call: released as written."""
        return [Content(raw)] if raw else []

    def stray(self, text: str) -> list[Piece]:
        """Text outside any segment is content."""
        return [Content(text)]

    def stray_marker(self, marker: str) -> None:
        """A terminator or `<|message|>` outside any segment: framing, dropped."""

    def closed(self, marker: str | None) -> None:
        """A text segment ended at `marker` (None: the next segment began)."""

    def emit(self, call: ToolCall) -> list[Piece]:
        return [call]

    # -- the machine ------------------------------------------------------------

    def feed(self, text: str) -> list[Piece]:
        if self._mode == TEXT and not self._buf and "<" not in text:
            return [self._text(text)] if text else []
        self._buf += text
        return self._drain()

    def _text(self, text: str) -> Piece:
        return Reasoning(text) if self._reasoning else Content(text)

    def _drain(self) -> list[Piece]:
        out: list[Piece] = []
        steps = self._steps
        while steps[self._mode](out):
            pass
        return out

    def _out(self, out: list[Piece]) -> bool:
        buf = self._buf
        if not buf:
            return False
        i, marker = earliest(buf, _OUT_STOPS)
        if marker is None:
            keep = partial_marker_len(buf, _OUT_STOPS + (" " + RECIPIENT,))
            if len(buf) > keep:
                out.extend(self.stray(buf[: len(buf) - keep]))
                self._buf = buf[len(buf) - keep :]
            return False
        if marker == RECIPIENT and i and buf[i - 1] == " ":
            i -= 1
        if i:
            out.extend(self.stray(buf[:i]))
        if marker in OPENERS or marker == RECIPIENT:
            self._buf = buf[i:]
            self._open_header()
        else:
            self.stray_marker(marker)
            self._buf = buf[i + len(marker) :]
        return True

    def _open_header(self) -> None:
        self._mode = HEAD
        self._scan = 1

    def _header(self, out: list[Piece]) -> bool:
        buf = self._buf
        j, stop = earliest(buf, (MESSAGE, *TERMINATORS, START, "\n"), self._scan)
        if stop is None:
            self._scan = max(1, len(buf) - _TAIL)
            return False
        self._mode = OUT
        if stop == MESSAGE:
            self._head = buf[: j + len(MESSAGE)]
            self._buf = buf[j + len(MESSAGE) :]
            reasoning, name = self.segment(buf[:j])
            self._reasoning = reasoning  # the segment's channel, for a call body too
            if name is None:
                self._mode = TEXT
            else:
                self._mode, self._recipient, self._scan = BODY, name, 0
            return True
        cut = j if stop == START else j + len(stop)
        out.extend(self.malformed(buf[:cut], "a segment header cut short"))
        self._buf = buf[cut:]
        if stop in TERMINATORS:
            self.stray_marker(stop)
        return True

    def _body_text(self, out: list[Piece]) -> bool:
        buf = self._buf
        i, marker = earliest(buf, _TEXT_STOPS)
        if marker is None:
            keep = partial_marker_len(buf, _TEXT_STOPS)
            if len(buf) > keep:
                out.append(self._text(buf[: len(buf) - keep]))
                self._buf = buf[len(buf) - keep :]
            return False
        if i:
            out.append(self._text(buf[:i]))
        if marker in TERMINATORS:
            self._buf = buf[i + len(marker) :]
            self.closed(marker)
        else:
            self._buf = buf[i:]
            self.closed(None)
        self._mode = OUT
        return True

    def _body_call(self, out: list[Piece]) -> bool:
        buf = self._buf
        i, marker = earliest(buf, TERMINATORS, self._scan)
        if marker is None:
            self._scan = max(0, len(buf) - _TAIL)
            return False
        body = buf[:i]
        self._buf = buf[i + len(marker) :]
        self._mode = OUT
        call = self.call(self._recipient, body, closed=True)
        if call is None:
            out.extend(self.malformed(self._head + body + marker, "a malformed call body"))
        else:
            out.extend(self.emit(call))
        return True

    def finish(self) -> list[Piece]:
        out = self._drain()
        buf = self._buf
        if self._mode == OUT and buf:
            out.extend(self.stray(buf))
        elif self._mode == HEAD:
            out.extend(self.malformed(buf, "a segment header cut off"))
        elif self._mode == TEXT and buf:
            out.append(self._text(buf))
        elif self._mode == BODY:
            call = self.call(self._recipient, buf, closed=False)
            if call is None:
                out.extend(self.malformed(self._head + buf, "a call cut off"))
            else:
                out.extend(self.emit(call))
        self._reset()
        return out

    def _reset(self) -> None:
        self._mode, self._buf, self._scan = OUT, "", 0
