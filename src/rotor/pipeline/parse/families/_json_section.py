"""What the JSON families share: a section whose body is JSON calls (hermes,
internlm, jamba, nemotron_deci), a section that is one JSON value with no end
marker (granite, phi4, mistral), and a section made of `begin…end` call blocks
(deepseek_v3, deepseek_v31, kimi_k2).

The parsing helpers answer None for malformed input, so the family's section
is released as content instead of raising."""

from __future__ import annotations

from typing import ClassVar

from rotor.pipeline.parse.base import Content, Piece, ToolCall, Tools, skip_space, trim_partial
from rotor.pipeline.parse.jsonutil import JsonValueEnd, calls_from_json
from rotor.pipeline.parse.marker import MarkerToolParser


class JsonCallsParser(MarkerToolParser):
    """A section whose body is one JSON object (a call) or a list of them."""

    # Exactly one call per section: a list of several is malformed.
    single: ClassVar[bool] = False

    def parse_section(self, body: str) -> list[ToolCall] | None:
        calls = calls_from_json(body)
        if self.single and calls and len(calls) > 1:
            return None
        return calls


class JsonValueSectionParser(JsonCallsParser):
    """No end marker: the section is the one JSON value that follows the start
    marker (after whitespace), and text after it is content. A body that opens
    with anything but one of `opens` ends at once, empty, and is malformed."""

    opens: ClassVar[str] = "[{"

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._value_end = JsonValueEnd(self.opens)

    def open_section(self) -> None:
        self._value_end.reset()

    def section_end(self, buf: str, scan_from: int) -> tuple[int, int] | None:
        return self._value_end.find(buf)


def call_blocks(
    body: str, begin: str, end: str, open_last: bool = False
) -> list[tuple[str, bool]] | None:
    """The insides of the `begin…end` blocks a section body is made of, each
    with whether it was closed.

    Only whitespace may lie around and between blocks; None otherwise, or when
    there is no block. `open_last` lets the last block lack its end (a stream
    cut off), a partial end marker trimmed; a stream cut inside the next
    block's begin marker ends after the last whole block."""
    blocks: list[tuple[str, bool]] = []
    pos, n = 0, len(body)
    while True:
        pos = skip_space(body, pos)
        if pos == n:
            break
        if not body.startswith(begin, pos):
            if open_last and blocks and begin.startswith(body[pos:]):
                break
            return None
        inner = pos + len(begin)
        stop = body.find(end, inner)
        if stop < 0:
            if not open_last:
                return None
            blocks.append((trim_partial(body[inner:], (end,)), False))
            break
        blocks.append((body[inner:stop], True))
        pos = stop + len(end)
    return blocks or None


class BlockSectionParser(MarkerToolParser):
    """A section (start/end markers) holding `call_begin…call_end` blocks, one
    call each; the family parses one block's inside.

    By default a section with any bad block is malformed as a whole: released
    as content, never half-parsed. A family with `salvage` keeps the good
    blocks of such a section (and of one cut off mid-block) and releases each
    bad block, markers included, as content in its place; a section with no
    good block is still released whole."""

    call_begin: ClassVar[str] = ""
    call_end: ClassVar[str] = ""
    salvage: ClassVar[bool] = False

    def parse_call(self, block: str) -> ToolCall | None:
        """One block's inside (markers excluded) → a call; None when malformed."""
        raise NotImplementedError

    def parse_section(self, body: str) -> list[Piece] | None:
        return self._pieces(call_blocks(body, self.call_begin, self.call_end))

    def unterminated(self, body: str) -> list[Piece] | None:
        return self._pieces(call_blocks(body, self.call_begin, self.call_end, open_last=True))

    def _pieces(self, blocks: list[tuple[str, bool]] | None) -> list[Piece] | None:
        if blocks is None:
            return None
        out: list[Piece] = []
        found = False
        for block, closed in blocks:
            call = self.parse_call(block)
            if call is not None:
                out.append(call)
                found = True
            elif self.salvage:
                out.append(Content(self.call_begin + block + (self.call_end if closed else "")))
            else:
                return None
        return out if found else None
