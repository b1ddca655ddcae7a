"""`rotor run in=stdin`: the whole of stdin is one user message; the answer
streams to stdout, then a final newline.

stdout carries the answer only (and tool calls as `→ name(arguments)` lines),
so `... | rotor run in=stdin > answer.txt` keeps just the answer: reasoning
goes to stderr, dimmed when stderr is a terminal.
"""

from __future__ import annotations

import signal
import sys

from pydantic import ValidationError

from rotor.frontend import ModelNotFound
from rotor.inputs.interrupt import EXIT_INTERRUPTED, Interrupted, until_interrupted
from rotor.inputs.render import Renderer
from rotor.inputs.session import System, stream_chat
from rotor.inputs.style import choose, reasoning_only
from rotor.pipeline.errors import RequestError, describe_validation
from rotor.pipeline.events import ResponseFailed
from rotor.protocol.openai import ChatCompletionRequest


def read_message() -> str:
    """All of stdin as UTF-8, less the newline a shell or `echo` adds at the end.

    Ctrl-C while someone types it raises KeyboardInterrupt here: asyncio.run's
    own handler would only cancel a task, which a blocking read never notices."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        data = sys.stdin.buffer.read()
    finally:
        signal.signal(signal.SIGINT, previous)
    return data.decode("utf-8").rstrip("\r\n")


async def run_stdin(system: System, max_tokens: int | None = None, color: str = "auto") -> int:
    """0 on an answer, 1 on an error (message on stderr), 130 on Ctrl-C. `color`
    (`--color`) only dims the reasoning on stderr: stdout is always the bare answer."""
    try:
        text = read_message()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except UnicodeDecodeError as e:
        print(f"rotor: stdin is not UTF-8 text: {e}", file=sys.stderr)
        return 1
    if not text.strip():
        print("rotor: stdin is empty: nothing to send", file=sys.stderr)
        return 1
    try:
        request = ChatCompletionRequest(
            messages=[{"role": "user", "content": text}], max_tokens=max_tokens
        )
    except ValidationError as e:
        print(f"rotor: {describe_validation(e)[0]}", file=sys.stderr)
        return 1
    style = reasoning_only(choose(color, sys.stderr))
    renderer = Renderer(sys.stdout, reasoning_out=sys.stderr, style=style)
    await system.start()
    try:
        # Ctrl-C stops the answer cleanly (engine work closed), no traceback.
        await until_interrupted(stream_chat(system.frontend, request, renderer.piece))
    except Interrupted:
        renderer.finish()
        return EXIT_INTERRUPTED
    except (RequestError, ResponseFailed, ModelNotFound) as e:
        renderer.finish()
        print(f"rotor: {e}", file=sys.stderr)
        return 1
    finally:
        await system.stop()
    renderer.finish()
    return 0
