"""How `rotor run in=text` looks: coloured and decorated on a terminal, the
bare text anywhere else (a pty for the first, pipes for the second)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from rotor.inputs.style import ANSI

from support.terminal import PROMPT_ON, Terminal, plain

SGR = re.compile(rb"\x1b\[[0-9;]*m")  # a colour / attribute code
ANSWER = ANSI.answer.encode()
RESET = ANSI.reset.encode()
NOTE = ANSI.note.encode()
TOOL = ANSI.tool.encode()
DIM = ANSI.reasoning.encode()
FAST = {"ROTOR_ECHO_DELAY_MS": "0"}
HARMONY_CALL = (
    "<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>'
)
TIMEOUT_S = 30  # a deadline for a hung process, not an expected duration

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")


def test_the_banner_names_model_engine_context_and_commands(terminal: type[Terminal]) -> None:
    term = terminal("--model-name", "chatbot", "--max-model-len", "4096", env=FAST)
    banner = plain(term.opening)
    assert "model chatbot" in banner
    assert "engine echo" in banner
    assert "context 4,096 tokens" in banner
    assert "/help" in banner and "Ctrl-D" in banner
    assert SGR.search(term.opening)  # the banner is coloured too


def test_the_banner_of_the_mocker_names_it(terminal: type[Terminal]) -> None:
    term = terminal("out=mocker", "--reasoning-parser", "qwen3", env=FAST)
    banner = plain(term.opening)
    assert "model mock-model" in banner and "engine mocker" in banner
    assert "reasoning qwen3" in banner


def test_the_prompt_is_coloured(terminal: type[Terminal]) -> None:
    term = terminal(env=FAST)
    before_prompt = term.expect(b"> ", 5)
    # prompt_toolkit draws the prompt after its own codes; the last one is ours (green).
    assert re.search(rb"\x1b\[[0-9;]*\b32\b[0-9;]*m$", before_prompt), before_prompt


def test_the_answer_is_coloured_and_followed_by_a_blank_line(terminal: type[Terminal]) -> None:
    term = terminal(env=FAST)
    printed = term.line("hello there")
    assert printed.startswith(ANSWER + b"hello there" + RESET)
    assert printed.count(ANSWER) == 1  # one code around the run, not one per token
    assert plain(printed) == "hello there\n\n"  # the blank line separates the turns


def test_reasoning_is_dimmed_and_labelled_before_the_answer(terminal: type[Terminal]) -> None:
    term = terminal("--reasoning-parser", "qwen3", env=FAST)
    printed = term.line("<think>pondering</think>the answer")
    assert DIM + b"pondering" + RESET in printed
    assert ANSWER + b"the answer" + RESET in printed
    assert plain(printed).splitlines()[:2] == ["thinking: pondering", "the answer"]


def test_a_tool_call_is_a_line_of_its_own_colour(terminal: type[Terminal]) -> None:
    term = terminal("--tool-call-parser", "harmony", env=FAST)
    printed = term.line(HARMONY_CALL)
    assert TOOL + '→ get_weather({"city": "Paris"})'.encode() + RESET in printed
    assert NOTE + b"[tool_calls]" + RESET in printed


def test_a_finish_other_than_stop_is_noted_dimly(terminal: type[Terminal]) -> None:
    term = terminal("--max-tokens", "5", env=FAST)
    printed = term.line("hello world")
    assert printed.startswith(ANSWER + b"hello" + RESET + b" " + NOTE + b"[length]" + RESET)
    printed = term.line("hi")
    assert "[" not in plain(printed)  # a stop is the normal end: nothing to note


def test_errors_and_replies_are_styled(terminal: type[Terminal]) -> None:
    term = terminal(env=FAST)
    assert term.line("/reset").startswith(NOTE + b"(conversation cleared)" + RESET)
    assert term.line("/nonsense").startswith(ANSI.error.encode() + b"unknown command")


@pytest.mark.parametrize(
    ("args", "env"),
    [((), {"NO_COLOR": "1"}), (("--color", "never"), {}), ((), {"ROTOR_COLOR": "never"})],
    ids=["NO_COLOR", "--color never", "ROTOR_COLOR"],
)
def test_no_colour_on_request_keeps_the_banner_and_labels(
    terminal: type[Terminal], args: tuple[str, ...], env: dict[str, str]
) -> None:
    term = terminal("--reasoning-parser", "qwen3", *args, env={**FAST, **env})
    assert not SGR.search(term.opening)
    assert "model echo" in plain(term.opening)
    printed = term.line("<think>pondering</think>the answer")
    # prompt_toolkit's own cursor requests may sit at the end; rotor wrote no code.
    assert not SGR.search(printed)
    assert plain(printed) == "thinking: pondering\nthe answer\n\n"


def _text_mode_through_pipes(data: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, **FAST}
    for name in ("ROTOR_IN", "NO_COLOR", "ROTOR_COLOR"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "rotor.cli", "run", "in=text", *args],
        input=data,
        capture_output=True,
        env=env,
        timeout=TIMEOUT_S,
    )


@pytest.mark.parametrize(
    ("args", "lines", "expected"),
    [
        (
            ("--reasoning-parser", "qwen3"),
            b"hello\n<think>p</think>a\n/reset\n",
            b"> hello\n> p\na\n> (conversation cleared)\n> \n",
        ),
        (
            ("--tool-call-parser", "harmony"),
            HARMONY_CALL.encode() + b"\nhello\n",
            '> → get_weather({"city": "Paris"})\n> hello\n> \n'.encode(),
        ),
    ],
    ids=["reasoning", "tool call"],
)
def test_piped_text_mode_is_the_bare_text(
    args: tuple[str, ...], lines: bytes, expected: bytes
) -> None:
    done = _text_mode_through_pipes(lines, *args)
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout + done.stderr
    # No banner, no labels, no notes, no blank lines: each prompt, then its answer.
    assert done.stdout == expected


def test_color_always_colours_a_pipe() -> None:
    done = _text_mode_through_pipes(b"hello\n", "--color", "always")
    assert done.returncode == 0, done.stderr
    assert ANSWER + b"hello" + RESET in done.stdout
    assert b"engine echo" in done.stdout  # the banner comes with the colours


def test_stdin_mode_keeps_stdout_bare_under_color_always() -> None:
    env = {**os.environ, **FAST}
    env.pop("ROTOR_IN", None)
    done = subprocess.run(
        [sys.executable, "-m", "rotor.cli", "run", "in=stdin", "--color", "always"]
        + ["--reasoning-parser", "qwen3"],
        input=b"<think>pondering</think>the answer\n",
        capture_output=True,
        env=env,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"the answer\n"
    assert DIM + b"pondering" + RESET in done.stderr


def test_the_prompt_waits_after_the_banner(terminal: type[Terminal]) -> None:
    # The banner is printed once, before the first prompt, not before each one.
    term = terminal(env=FAST)
    printed = term.line("hi")
    assert b"engine echo" not in printed
    assert term.buf.count(b"engine echo") == 1
    assert term.buf.index(b"engine echo") < term.buf.index(PROMPT_ON)
