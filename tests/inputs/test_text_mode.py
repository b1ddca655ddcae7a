"""`rotor run in=text` driven through a real pseudo-terminal (support/terminal.py)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from rotor.engines.echo import EchoEngine
from rotor.inputs.session import stream_chat
from rotor.model.card import echo_card
from rotor.protocol.openai import ChatCompletionRequest

from support.app import system_over
from support.models import chatml_model
from support.terminal import PROMPT_BACK_S, PROMPT_OFF, PROMPT_ON, Terminal, plain

DIM = b"\x1b[2m"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")


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
    system = system_over(engine)
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
