"""A shaping bug on demand: chat's shaper raises on its Nth event, so a test
sees what a stream does when rotor's own code fails mid-answer."""

from __future__ import annotations

from typing import Any

import pytest

from rotor.api.openai.chat import ChatShaper


def break_chat_shaping(monkeypatch: pytest.MonkeyPatch, on_call: int) -> None:
    """`ChatShaper.frames` raises RuntimeError("a shaping bug") on call `on_call`."""
    real = ChatShaper.frames
    calls = 0

    def flaky(self: ChatShaper, event: Any) -> bytes | None:
        nonlocal calls
        calls += 1
        if calls == on_call:
            raise RuntimeError("a shaping bug")
        return real(self, event)

    monkeypatch.setattr(ChatShaper, "frames", flaky)
