"""seed_oss — ByteDance Seed-OSS: Qwen3-Coder's call layout inside its own
section markers,

    <seed:tool_call>
    <function=f>
    <parameter=a>1</parameter>
    </function>
    </seed:tool_call>

one newline on each side of a value belongs to the markup; values are typed
as Qwen's reference converter types them (Seed-OSS's reference parser is that
converter).

Seed-OSS thinks in `<seed:think>` … `</seed:think>`, and with an unlimited
thinking budget it writes out the call it plans inside its thought before
making it. As in vLLM's reference parser, a think block the model closes is
content, tags and any call markup in it included, streamed as it comes; a call
inside one the model never closes is read as a call. From a call's start
marker inside a thought on, the text is held until the thought closes (all
of it content then) or the output ends (it goes on to the call parser)."""

from __future__ import annotations

from rotor.pipeline.parse.base import Content, Piece, Tools, earliest, partial_marker_len
from rotor.pipeline.parse.families.qwen3_coder import Qwen3CoderParser

CALL = "<seed:tool_call>"
THINK, THINK_END = "<seed:think>", "</seed:think>"
_IN_THOUGHT = (THINK_END, CALL)


class SeedOssParser(Qwen3CoderParser):
    name = "seed_oss"
    # `<seed:tool_call>` / `</seed:tool_call>` and the think tags are single
    # tokens of Seed-OSS's tokenizer (its reference parser looks them up by id).
    needs_special_tokens = True
    start_markers = (CALL, THINK)
    end_markers = ("</seed:tool_call>",)
    call_starts = (CALL,)  # the section marker alone starts a call

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._tag_out = False  # the open thought's start tag has gone out as content
        self._held = False  # in a thought, from a call's start marker on
        self._held_scan = 0  # where to resume looking for the thought's end

    def open_section(self) -> None:
        self._tag_out = self._held = False
        self._held_scan = 0

    def section_end(self, buf: str, scan_from: int) -> tuple[int, int] | None:
        if self._open == THINK:
            return None  # a thought is streamed by `_thought`, never buffered whole
        return super().section_end(buf, scan_from)

    def _drain(self) -> list[Piece]:
        out = super()._drain()
        while self._open == THINK and self._thought(out):
            out.extend(super()._drain())
        return out

    def _thought(self, out: list[Piece]) -> bool:
        """Stream the open thought as content; whether it closed."""
        buf = self._buf
        head = "" if self._tag_out else THINK
        self._tag_out = True
        if not self._held:
            j, found = earliest(buf, _IN_THOUGHT)
            if found == THINK_END:
                return self._close(out, head + buf[: j + len(THINK_END)], j + len(THINK_END))
            cut = j if found == CALL else len(buf) - partial_marker_len(buf, _IN_THOUGHT)
            if head or cut:
                out.append(Content(head + buf[:cut]))
            self._buf = buf = buf[cut:]
            if found is None:
                return False
            self._held = True
        j = buf.find(THINK_END, self._held_scan)
        if j < 0:
            self._held_scan = max(0, len(buf) - len(THINK_END) + 1)
            return False
        return self._close(out, buf[: j + len(THINK_END)], j + len(THINK_END))

    def _close(self, out: list[Piece], text: str, end: int) -> bool:
        out.append(Content(text))
        self._buf = self._buf[end:]
        self._open = None
        self._held = False
        return True

    def finish(self) -> list[Piece]:
        out = self._drain()
        while self._open == THINK:
            # Never closed: a held call goes on to the call parser, the rest is content.
            self._open = None
            if self._held:
                self._held = False
                out.extend(self._drain())
            elif self._buf:
                out.append(Content(self._buf))
                self._buf = ""
        return out + super().finish()
