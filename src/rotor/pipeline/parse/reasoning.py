"""Reasoning parsers: a start tag and an end tag around the model's thinking.

Every family rotor knows differs only in its tags and in whether the model
starts inside the block (its template opened it). The prompt decides too: when
the rendered prompt ends with the start tag, parsing starts inside.
"""

from __future__ import annotations

from typing import ClassVar

from rotor.pipeline.parse.base import Content, Piece, Reasoning, ReasoningParser, partial_marker_len


class TagReasoningParser(ReasoningParser):
    end_tag: ClassVar[str] = ""

    def __init__(self, inside: bool) -> None:
        super().__init__(inside or self.starts_inside)
        self._buf = ""
        # Before any text, a start tag is swallowed even when already inside
        # (models whose template opened the block sometimes repeat it).
        self._at_start = True

    def feed(self, text: str) -> list[Piece]:
        if not self._buf and not self._at_start:
            tag = self.end_tag if self.inside else self.start_tag
            if tag[0] not in text:
                return [Reasoning(text) if self.inside else Content(text)] if text else []
        self._buf += text
        return self._drain()

    def _drain(self) -> list[Piece]:
        out: list[Piece] = []
        while self._buf:
            buf = self._buf
            if self._at_start:
                stripped = buf.lstrip()
                if stripped.startswith(self.start_tag):
                    self._buf = stripped[len(self.start_tag) :]
                    self.inside = True
                elif self.start_tag.startswith(stripped):
                    return out  # could still be the opening tag
                self._at_start = False
                continue
            tag = self.end_tag if self.inside else self.start_tag
            i = buf.find(tag)
            if i < 0:
                keep = partial_marker_len(buf, (tag,))
                if len(buf) > keep:
                    out.append(self._piece(buf[: len(buf) - keep]))
                    self._buf = buf[len(buf) - keep :]
                return out
            if i:
                out.append(self._piece(buf[:i]))
            self._buf = buf[i + len(tag) :]
            self.inside = not self.inside
        return out

    def _piece(self, text: str) -> Piece:
        return Reasoning(text) if self.inside else Content(text)

    def finish(self) -> list[Piece]:
        out = self._drain()
        if self._buf:
            out.append(self._piece(self._buf))
            self._buf = ""
        return out


def _family(name: str, start: str, end: str, inside: bool = False) -> type[TagReasoningParser]:
    return type(
        f"{name.title().replace('_', '')}ReasoningParser",
        (TagReasoningParser,),
        {"name": name, "start_tag": start, "end_tag": end, "starts_inside": inside},
    )


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    p.name: p
    for p in (
        _family("think", "<think>", "</think>"),
        _family("qwen3", "<think>", "</think>"),
        _family("deepseek_r1", "<think>", "</think>", inside=True),
        _family("glm45", "<think>", "</think>"),
        _family("kimi_k25", "<think>", "</think>"),
        _family("mistral", "[THINK]", "[/THINK]"),
        _family("granite", "Here is my thought process:", "Here is my response:"),
        _family("kimi", "◁think▷", "◁/think▷"),
    )
}


def reasoning_parser(name: str) -> type[ReasoningParser]:
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        valid = ", ".join(sorted(REASONING_PARSERS))
        raise ValueError(f"unknown reasoning parser {name!r}; valid: {valid}") from None
