"""Reasoning parsers: start tags and end tags around the model's thinking.

Every family rotor knows differs only in its tags (a family may have several
spellings of each), in whether the model starts inside the block (its template
opened it), and in two small extras: a label the model writes right after the
start tag (Gemma 4's `thought\\n`) and markers that frame the answer and are
dropped from content (Hunyuan's `</answer>`). The prompt decides too: when the
rendered prompt ends with the start tag, parsing starts inside.

Where a call begins is an *exit*: a model that starts a call while still
thinking, never closing the block, has the rest of its output handed on as
content instead of left as reasoning. A family declares its own exits
(`call_starts`: the tool-call marker its model writes, where vLLM's and SGLang's
reasoning parsers for it end reasoning too); with no tool parser behind, the
section goes out as content, marker included. A tool parser behind replaces
them with its own call-start markers (`exit_at`) and gets the section. Either
way, text from an exit on is held (not streamed) until the end tag proves it
was reasoning after all, or the output ends without one.
"""

from __future__ import annotations

from typing import ClassVar

from rotor.pipeline.parse.base import (
    Content,
    Piece,
    Reasoning,
    ReasoningParser,
    earliest,
    partial_marker_len,
)


class TagReasoningParser(ReasoningParser):
    end_tag: ClassVar[str] = ""
    # Every spelling of each tag; `start_tag` / `end_tag` are the first (derived).
    start_tags: ClassVar[tuple[str, ...]] = ()
    end_tags: ClassVar[tuple[str, ...]] = ()
    # Written right after a start tag and not part of the reasoning (Gemma 4).
    label: ClassVar[str] = ""
    # Markers outside reasoning that frame the answer: dropped from content.
    content_drops: ClassVar[tuple[str, ...]] = ()
    # Where the family's tool calls begin: the exits while no tool parser is behind.
    call_starts: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.start_tags:
            cls.start_tag, cls.end_tag = cls.start_tags[0], cls.end_tags[0]

    def __init__(self, inside: bool) -> None:
        super().__init__(inside or self.starts_inside)
        self._buf = ""
        # Before any text, a start tag is swallowed even when already inside
        # (models whose template opened the block sometimes repeat it).
        self._at_start = True
        self._label_pending = bool(self.label) and self.inside
        self._exits: tuple[str, ...] = self.call_starts
        self._exited = False  # inside, past an exit: held until an end tag or the end
        self._scan = 0  # where to resume looking for an end tag while exited
        self._set_tags()

    @classmethod
    def markers(cls) -> tuple[str, ...]:
        return (*cls.start_tags, *cls.end_tags, *cls.content_drops)

    def exit_at(self, markers: tuple[str, ...]) -> None:
        """The tool parser's call-start markers: they replace the family's own
        exits (`call_starts`), and what follows one is the tool parser's."""
        self._exits = tuple(m for m in markers if m)
        self._set_tags()

    def _set_tags(self) -> None:
        # Longest first: of two tags at the same place the longer is read.
        self._inside_tags = _longest_first((*self.end_tags, *self._exits))
        self._outside_tags = _longest_first((*self.start_tags, *self.content_drops))
        self._starts, self._ends = _longest_first(self.start_tags), _longest_first(self.end_tags)
        self._inside_firsts = frozenset(t[0] for t in self._inside_tags)
        self._outside_firsts = frozenset(t[0] for t in self._outside_tags)
        self._end_tail = max(len(t) for t in self.end_tags) - 1
        self._inside_around = _around(self._inside_tags)
        self._outside_around = _around(self._outside_tags)
        self._ends_around = _around(self._ends)

    def feed(self, text: str) -> list[Piece]:
        if not self._buf and not self._at_start and not self._label_pending:
            firsts = self._inside_firsts if self.inside else self._outside_firsts
            for c in firsts:
                if c in text:
                    break
            else:
                return [Reasoning(text) if self.inside else Content(text)] if text else []
        self._buf += text
        return self._drain()

    @staticmethod
    def _growing(around: _Around, buf: str, i: int, tag: str) -> int:
        """The earliest place where a longer tag that holds `tag` (found at `i`)
        may still be completed, `buf` ending inside it (Hunyuan's `<think>` may
        begin `<think>\\n`); -1 where none can."""
        first = -1
        for longer, at in around.get(tag, ()):
            j = i - at
            if j >= 0 and len(buf) - j < len(longer) and longer.startswith(buf[j:]):
                first = j if first < 0 else min(first, j)
        return first

    def _drain(self, final: bool = False) -> list[Piece]:
        """`final`: no text follows, a tag that could still grow is read as it is."""
        out: list[Piece] = []
        while self._buf:
            buf = self._buf
            if self._at_start:
                stripped = buf.lstrip()
                if not final and any(
                    len(t) > len(stripped) and t.startswith(stripped) for t in self.start_tags
                ):
                    return out  # could still be the opening tag (or a longer one)
                tag = next((t for t in self._starts if stripped.startswith(t)), None)
                if tag is not None:
                    self._buf = stripped[len(tag) :]
                    self._open()
                self._at_start = False
                continue
            if self._label_pending:
                if buf.startswith(self.label):
                    self._buf = buf[len(self.label) :]
                elif self.label.startswith(buf):
                    return out  # could still be the label
                self._label_pending = False
                continue
            if self._exited:
                i, tag = earliest(buf, self._ends, self._scan)
                if tag is None:
                    self._scan = max(0, len(buf) - self._end_tail)
                    return out
                if not final and (j := self._growing(self._ends_around, buf, i, tag)) >= 0:
                    self._scan = j
                    return out
                out.append(Reasoning(buf[:i]))
                self._buf = buf[i + len(tag) :]
                self._exited, self.inside, self._scan = False, False, 0
                continue
            if self.inside:
                tags, around = self._inside_tags, self._inside_around
            else:
                tags, around = self._outside_tags, self._outside_around
            i, tag = earliest(buf, tags)
            if tag is None:
                keep = partial_marker_len(buf, tags)
                if len(buf) > keep:
                    out.append(self._piece(buf[: len(buf) - keep]))
                    self._buf = buf[len(buf) - keep :]
                return out
            if not final and (j := self._growing(around, buf, i, tag)) >= 0:
                if j:
                    out.append(self._piece(buf[:j]))
                    self._buf = buf[j:]
                return out
            if i:
                out.append(self._piece(buf[:i]))
            if self.inside and tag in self._exits and tag not in self.end_tags:
                self._buf = buf[i:]  # the exit marker stays: it begins the section
                self._exited, self._scan = True, len(tag)
                continue
            self._buf = buf[i + len(tag) :]
            if self.inside:
                self.inside = False
            elif tag in self.start_tags:
                self._open()
            # else: an answer-framing marker, dropped
        return out

    def _open(self) -> None:
        self.inside = True
        self._label_pending = bool(self.label)

    def _piece(self, text: str) -> Piece:
        return Reasoning(text) if self.inside else Content(text)

    def finish(self) -> list[Piece]:
        out = self._drain(final=True)
        if self._buf:
            # Past an exit and never closed: the rest is content (a tool
            # parser behind reads its call there).
            out.append(Content(self._buf) if self._exited else self._piece(self._buf))
            self._buf = ""
        self._exited = False
        return out


def _longest_first(tags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(tags, key=len, reverse=True))


# tag → the longer tags it sits in, and where in them.
_Around = dict[str, tuple[tuple[str, int], ...]]


def _around(tags: tuple[str, ...]) -> _Around:
    """Where each tag sits in a longer one: only a family whose spellings nest
    (Hunyuan's `</think>` in `\\n</think>\\n<answer>\\n`) has any."""
    found: dict[str, list[tuple[str, int]]] = {}
    for tag in tags:
        for longer in tags:
            if len(longer) > len(tag):
                at = longer.find(tag)
                while at >= 0:
                    found.setdefault(tag, []).append((longer, at))
                    at = longer.find(tag, at + 1)
    return {tag: tuple(where) for tag, where in found.items()}


def _family(
    name: str,
    start: str | tuple[str, ...],
    end: str | tuple[str, ...],
    inside: bool = False,
    **extra: object,
) -> type[TagReasoningParser]:
    starts = (start,) if isinstance(start, str) else start
    ends = (end,) if isinstance(end, str) else end
    return type(
        f"{name.title().replace('_', '')}ReasoningParser",
        (TagReasoningParser,),
        {"name": name, "start_tags": starts, "end_tags": ends, "starts_inside": inside, **extra},
    )


# The exits (`call_starts`) are the families' tool-call markers where vLLM's
# reasoning parsers (vllm/reasoning/, vllm/parser/) or SGLang's
# (srt/parser/reasoning_parser.py, `tool_start_token`) end reasoning for them.
_TOOL_CALL = ("<tool_call>",)  # Qwen3 / Qwen3.5, GLM 4.5-4.7, Nemotron 3
_KIMI_SECTION = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")

REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    p.name: p
    for p in (
        _family("think", "<think>", "</think>"),
        _family("qwen3", "<think>", "</think>", call_starts=_TOOL_CALL),
        _family("deepseek_r1", "<think>", "</think>", inside=True),
        _family("glm45", "<think>", "</think>", call_starts=_TOOL_CALL),
        # Kimi K2.5: the section marker, in both spellings the kimi_k2 family reads.
        _family("kimi_k25", "<think>", "</think>", call_starts=_KIMI_SECTION),
        _family("mistral", "[THINK]", "[/THINK]", call_starts=("[TOOL_CALLS]",)),
        # Granite writes "Here's" as well as "Here is", mixed within one answer.
        _family(
            "granite",
            ("Here is my thought process:", "Here's my thought process:"),
            ("Here is my response:", "Here's my response:"),
        ),
        _family("kimi", "◁think▷", "◁/think▷"),
        # Nemotron 3: its template opens the block when thinking is on (the
        # prompt ends with `<think>\n`: the prompt rule starts it inside) and
        # closes it when off (`<think></think>`): a plain answer is content then.
        _family("nemotron3", "<think>", "</think>", call_starts=_TOOL_CALL),
        # Hunyuan A13B: `<think>\n…\n</think>\n<answer>\n…\n</answer>`; the
        # newlines are part of its markers, the answer's frame is dropped.
        # Hunyuan's plain `<think>…</think>` (SGLang's hunyuan detector, later
        # Hunyuan models) too; where both fit, A13B's longer tag is read.
        _family(
            "hunyuan",
            ("<think>\n", "<think>"),
            ("\n</think>\n<answer>\n", "</think>"),
            content_drops=("<answer>\n", "\n</answer>"),
            call_starts=("<tool_calls>",),
        ),
        # Gemma 4: `<|channel>thought\n…<channel|>`; `thought\n` is the channel's
        # name, not reasoning.
        _family(
            "gemma4", "<|channel>", "<channel|>", label="thought\n", call_starts=("<|tool_call>",)
        ),
    )
}


def reasoning_parser(name: str) -> type[ReasoningParser]:
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        valid = ", ".join(sorted(REASONING_PARSERS))
        raise ValueError(f"unknown reasoning parser {name!r}; valid: {valid}") from None
