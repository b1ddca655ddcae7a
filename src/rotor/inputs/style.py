"""How the terminal inputs look, chosen once per run.

Every look is one `Style`: the ANSI variant has escape codes, the others have
empty strings, so plain output goes through the very same writes and a pipe
gets exactly the text with no escape byte. `decorate` is what a person at a
terminal gets beyond colour (a banner, a reasoning label, a blank line between
turns, finish reasons other than `stop`); a pipe gets none of it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

COLOR_MODES = ("auto", "always", "never")


@dataclass(frozen=True)
class Style:
    decorate: bool = False
    title: str = ""  # the banner's first words
    prompt: str = ""  # the "> " before the user's line
    user: str = ""  # the typed line, as a prompt_toolkit style string
    answer: str = ""
    reasoning: str = ""
    label: str = ""  # "thinking:" before reasoning
    tool: str = ""  # a tool call's line
    note: str = ""  # finish reasons, (cancelled), command replies, the banner's details
    error: str = ""
    reset: str = ""

    def paint(self, code: str, text: str) -> str:
        """`text` in `code`, closed again; just `text` when the code is empty."""
        return f"{code}{text}{self.reset}" if code else text


PLAIN = Style()
TERMINAL = Style(decorate=True)  # a terminal without colour (NO_COLOR, TERM=dumb, never)
ANSI = Style(
    decorate=True,
    title="\x1b[1m",
    prompt="\x1b[1;32m",
    user="bold",
    answer="\x1b[36m",
    reasoning="\x1b[2m",
    label="\x1b[2;3m",
    tool="\x1b[33m",
    note="\x1b[2m",
    error="\x1b[31m",
    reset="\x1b[0m",
)


def colour_wanted(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """auto: a terminal, NO_COLOR unset (or empty) and TERM not `dumb` (no-color.org)."""
    env = os.environ if env is None else env
    return _isatty(stream) and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


def choose(mode: str, stream: TextIO, env: Mapping[str, str] | None = None) -> Style:
    """The look of what goes to `stream` under `--color MODE`."""
    if mode not in COLOR_MODES:
        raise ValueError(f"--color must be one of {', '.join(COLOR_MODES)}, got {mode!r}")
    if mode == "always" or (mode == "auto" and colour_wanted(stream, env)):
        return ANSI
    return TERMINAL if _isatty(stream) else PLAIN


def reasoning_only(style: Style) -> Style:
    """Just the reasoning's dimming: stdin mode's stderr, where nothing else is decorated."""
    return Style(reasoning=style.reasoning, reset=style.reset if style.reasoning else "")


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False
