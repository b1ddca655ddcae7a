"""What the JSON families share: a section made of `begin…end` call blocks
(deepseek_v3, deepseek_v31, kimi_k2), a section that is one JSON value with no
end marker (granite), and the small checks on a name and an arguments object.

The parsing helpers answer None for malformed input, so the family's section
is released as content instead of raising."""

from __future__ import annotations

import json
from typing import ClassVar

from rotor.pipeline.parse.base import ToolCall, partial_marker_len
from rotor.pipeline.parse.jsonutil import dumps_args
from rotor.pipeline.parse.marker import MarkerToolParser


def call_blocks(body: str, begin: str, end: str, open_last: bool = False) -> list[str] | None:
    """The insides of the `begin…end` blocks a section body is made of.

    Only whitespace may lie around and between blocks; None otherwise, or when
    there is no block. `open_last` lets the last block lack its end (a stream
    cut off right after a complete call), a partial end marker included."""
    blocks: list[str] = []
    pos, n = 0, len(body)
    while True:
        while pos < n and body[pos].isspace():
            pos += 1
        if pos == n:
            break
        if not body.startswith(begin, pos):
            return None
        inner = pos + len(begin)
        stop = body.find(end, inner)
        if stop < 0:
            if not open_last:
                return None
            blocks.append(trim_partial(body[inner:], end))
            break
        blocks.append(body[inner:stop])
        pos = stop + len(end)
    return blocks or None


def trim_partial(text: str, marker: str | None) -> str:
    """`text` less a trailing proper prefix of `marker`: at the end of a stream
    the model may have stopped halfway through writing it."""
    if not marker:
        return text
    cut = partial_marker_len(text, (marker,))
    return text[: len(text) - cut] if cut else text


def call_name(text: str) -> str | None:
    """A function name: non-empty, one word once the surrounding space is gone."""
    name = text.strip()
    if not name or any(c.isspace() for c in name):
        return None
    return name


def args_object(text: str) -> str | None:
    """Serialised arguments from a JSON object's text; nothing at all is `{}`."""
    text = text.strip()
    if not text:
        return "{}"
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return dumps_args(value) if isinstance(value, dict) else None


class BlockSectionParser(MarkerToolParser):
    """A section (start/end markers) holding `call_begin…call_end` blocks, one
    call each; the family parses one block's inside. A section with any bad
    block is malformed as a whole: released as content, never half-parsed."""

    call_begin: ClassVar[str] = ""
    call_end: ClassVar[str] = ""

    def parse_call(self, block: str) -> ToolCall | None:
        """One block's inside (markers excluded) → a call; None when malformed."""
        raise NotImplementedError

    def parse_section(self, body: str) -> list[ToolCall] | None:
        return self._calls(call_blocks(body, self.call_begin, self.call_end))

    def unterminated(self, body: str) -> list[ToolCall] | None:
        body = trim_partial(body, self.end_marker)
        return self._calls(call_blocks(body, self.call_begin, self.call_end, open_last=True))

    def _calls(self, blocks: list[str] | None) -> list[ToolCall] | None:
        if blocks is None:
            return None
        calls: list[ToolCall] = []
        for block in blocks:
            call = self.parse_call(block)
            if call is None:
                return None
            calls.append(call)
        return calls
