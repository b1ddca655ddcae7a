"""`rotor run in=text` driven through a real pseudo-terminal.

The child gets the pty as its controlling terminal, so Ctrl-C is a real SIGINT
from the line discipline and line editing is prompt_toolkit's. The harness
answers cursor-position requests like a terminal does. prompt_toolkit turns
bracketed paste on when a prompt starts and off when the line is accepted,
so the text between those two marks is exactly what rotor printed for a line.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rotor.engines.echo import EchoEngine
from rotor.inputs.session import stream_chat
from rotor.model.card import echo_card
from rotor.model.served import ServedModel
from rotor.protocol.openai import ChatCompletionRequest
from rotor.system import System

from support.models import chatml_model

PROMPT_ON = b"\x1b[?2004h"  # a prompt is waiting for input
PROMPT_OFF = b"\x1b[?2004l"  # the line was accepted
CPR_REQUEST = b"\x1b[6n"
ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|[\r\x08]")
DIM = b"\x1b[2m"
STARTUP_S = 20.0  # the first prompt (interpreter start, imports)
PROMPT_BACK_S = 5.0  # a few dozen 5 ms tokens take far less; a cancelled answer would take 10 s

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")


class Terminal:
    """A child process on a pty, read with deadlines (never a blind sleep)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        full_env = {**os.environ, "TERM": "xterm-256color", **(env or {})}
        full_env.pop("ROTOR_IN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rotor.cli", "run", "in=text", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=full_env,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.buf = b""
        self.pos = 0  # how far expect() has consumed

    def _pump(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        # A CPR request may be split across reads; answer each complete one once.
        before = self.buf.count(CPR_REQUEST)
        self.buf += data
        for _ in range(self.buf.count(CPR_REQUEST) - before):
            os.write(self.master, b"\x1b[1;1R")
        return True

    def expect(self, marker: bytes, timeout: float) -> bytes:
        """Wait for `marker` after what was consumed; return the bytes before it."""
        deadline = time.monotonic() + timeout
        while True:
            at = self.buf.find(marker, self.pos)
            if at >= 0:
                before = self.buf[self.pos : at]
                self.pos = at + len(marker)
                return before
            left = deadline - time.monotonic()
            if left <= 0 or not self._pump(min(left, 0.1)):
                if self.buf.find(marker, self.pos) >= 0:
                    continue
                raise AssertionError(
                    f"no {marker!r} within {timeout}s; output since: {self.buf[self.pos :]!r}"
                )

    def prompt(self, timeout: float = PROMPT_BACK_S) -> None:
        self.expect(PROMPT_ON, timeout)

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def line(self, text: str, timeout: float = PROMPT_BACK_S) -> bytes:
        """Type a line at the prompt; what was printed for it before the prompt
        came back (within `timeout`, or this fails)."""
        self.send(text.encode() + b"\r")
        self.expect(PROMPT_OFF, timeout)
        return self.expect(PROMPT_ON, timeout)

    def wait_exit(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._pump(0.05)
        return self.proc.wait(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def plain(data: bytes) -> str:
    return ESCAPES.sub(b"", data).decode()


@pytest.fixture
def terminal() -> Iterator[type[Terminal]]:
    opened: list[Terminal] = []

    class Opened(Terminal):
        def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
            super().__init__(*args, env=env)
            opened.append(self)
            self.prompt(STARTUP_S)

    yield Opened
    for t in opened:
        t.close()


def test_answer_streams_and_prompt_comes_back(terminal: type[Terminal]) -> None:
    term = terminal(env={"ROTOR_ECHO_DELAY_MS": "5"})
    printed = term.line("hello there")  # the prompt is back within PROMPT_BACK_S
    assert plain(printed).strip() == "hello there"
    printed = term.line("a second turn")
    assert plain(printed).strip() == "a second turn"
    term.send(b"/exit\r")
    assert term.wait_exit() == 0


def test_conversation_keeps_history_and_system(terminal: type[Terminal], tmp_path: Path) -> None:
    # With a model directory the echo engine echoes the whole rendered prompt,
    # so the answer shows exactly which messages were sent. This template puts
    # no end-of-message token between them: the echo would stop at the first.
    model = chatml_model(tmp_path)
    template = tmp_path / "plain.jinja"
    template.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    term = terminal(
        "--model-path",
        str(model),
        "--chat-template",
        str(template),
        env={"ROTOR_ECHO_DELAY_MS": "1"},
    )
    printed = term.line("/system Be brief")
    assert "system message set" in plain(printed)
    first = term.line("first question")
    assert "Be brief" in plain(first) and "first question" in plain(first)
    second = term.line("second question")
    assert all(s in plain(second) for s in ("Be brief", "first question", "second question"))
    term.line("/reset")
    third = term.line("third question")
    assert "Be brief" in plain(third) and "third question" in plain(third)
    assert "first question" not in plain(third)


def test_help_lists_commands(terminal: type[Terminal]) -> None:
    term = terminal()
    printed = term.line("/help")
    for command in ("/system", "/reset", "/help", "/exit"):
        assert command in plain(printed)
    printed = term.line("/nonsense")
    assert "unknown command" in plain(printed)


def test_ctrl_d_at_the_prompt_exits_0(terminal: type[Terminal]) -> None:
    term = terminal()
    term.send(b"\x04")
    assert term.wait_exit() == 0


def test_ctrl_c_cancels_the_answer_then_exits_at_the_prompt(terminal: type[Terminal]) -> None:
    term = terminal(env={"ROTOR_ECHO_DELAY_MS": "50"})
    long_line = "abcdefghij" * 20  # 200 tokens × 50 ms = 10 s if left to run
    term.send(long_line.encode() + b"\r")
    term.expect(PROMPT_OFF, PROMPT_BACK_S)
    term.expect(b"abc", PROMPT_BACK_S)  # the answer has started streaming
    term.send(b"\x03")
    printed = term.expect(PROMPT_ON, PROMPT_BACK_S)  # well before the 10 s answer would end
    assert "cancelled" in plain(printed)
    assert long_line[5:] not in plain(printed)
    # The REPL still works after a cancel, and the cancelled turn left no trace.
    printed = term.line("after")
    assert plain(printed).strip() == "after"
    term.send(b"\x03")  # Ctrl-C at the prompt leaves, with the interrupt status
    assert term.wait_exit() == 130


def test_reasoning_is_dimmed_on_a_terminal(terminal: type[Terminal]) -> None:
    term = terminal("--reasoning-parser", "qwen3", env={"ROTOR_ECHO_DELAY_MS": "1"})
    printed = term.line("<think>pondering</think>the answer")
    assert DIM + b"pondering" in printed
    text = plain(printed)
    assert text.index("pondering") < text.index("the answer")


def test_request_error_is_one_line_and_the_prompt_returns(terminal: type[Terminal]) -> None:
    term = terminal("--max-model-len", "8", env={"ROTOR_ECHO_DELAY_MS": "1"})
    printed = term.line("a message longer than the context")
    lines = [ln for ln in plain(printed).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:")
    printed = term.line("hi")
    assert plain(printed).strip() == "hi"


async def test_cancelling_a_streaming_turn_stops_the_engine_work() -> None:
    card = echo_card()
    engine = EchoEngine(card, None, delay_ms=50)
    system = System.local(engine, ServedModel.build(card, None))
    frontend = system.frontend
    await system.start()
    try:
        text = "x" * 200
        started = asyncio.Event()
        request = ChatCompletionRequest(messages=[{"role": "user", "content": text}])
        task = asyncio.ensure_future(stream_chat(frontend, request, lambda piece: started.set()))
        await asyncio.wait_for(started.wait(), PROMPT_BACK_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        state = engine.state()
        assert state.active_requests == 0  # the engine's generator was closed
        assert state.tokens_generated < len(text)
    finally:
        await system.stop()


def test_mocker_with_a_model_directory(terminal: type[Terminal], tmp_path: Path) -> None:
    # `in=text out=mocker --model-path DIR` works like the echo path: the answer
    # (seeded tokens, at most 8) streams and the prompt comes back at its finish.
    model = chatml_model(tmp_path)
    term = terminal(
        "out=mocker", "--model-path", str(model), "--speedup-ratio", "1", "--max-tokens", "8"
    )
    for line in ("hello", "and again"):
        printed = term.line(line)  # the prompt is back within PROMPT_BACK_S
        assert "error" not in plain(printed).lower()
    term.send(b"\x04")
    assert term.wait_exit() == 0
