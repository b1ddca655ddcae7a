"""The `terminal` fixture: `rotor run in=text` on a pty, closed after the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.terminal import PROMPT_ON, STARTUP_S, Terminal


@pytest.fixture
def terminal() -> Iterator[type[Terminal]]:
    """Opens a Terminal and waits for the first prompt; `opening` is what came
    before it (the banner)."""
    opened: list[Terminal] = []

    class Opened(Terminal):
        def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
            super().__init__(*args, env=env)
            opened.append(self)
            self.opening = self.expect(PROMPT_ON, STARTUP_S)

    yield Opened
    for t in opened:
        t.close()
