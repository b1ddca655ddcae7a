"""`rotor run in=text`: an interactive chat in the terminal.

The whole REPL runs in one event loop, so an answer streams while the loop
runs and Ctrl-C during an answer reaches us as a signal that cancels just that
answer (closing its chunk stream stops the engine). At the prompt, Ctrl-C
exits with status 130, the shell's convention for an interrupt; `/exit` and
Ctrl-D exit with 0.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from pydantic import ValidationError

from rotor.api.errors import describe_validation
from rotor.frontend import ModelNotFound, ResponseFailed
from rotor.inputs.interrupt import EXIT_INTERRUPTED, Interrupted, until_interrupted
from rotor.inputs.render import Renderer
from rotor.inputs.session import stream_chat
from rotor.pipeline.errors import RequestError
from rotor.protocol.openai import ChatCompletionRequest
from rotor.system import System

PROMPT = "> "

HELP = """\
commands:
  /system TEXT   set the system message (/system alone removes it)
  /reset         forget the conversation (the system message stays)
  /help          this list
  /exit          leave (Ctrl-D too); Ctrl-C stops an answer, or leaves at the prompt"""


class Conversation:
    """The messages sent with each turn: an optional system message, then turns."""

    def __init__(self) -> None:
        self.system: str | None = None
        self.turns: list[dict[str, Any]] = []

    def messages(self, user: str) -> list[dict[str, Any]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return [*head, *self.turns, {"role": "user", "content": user}]

    def add(self, user: str, assistant: dict[str, Any]) -> None:
        self.turns += [{"role": "user", "content": user}, assistant]

    def reset(self) -> None:
        self.turns.clear()


class LineReader:
    """prompt_toolkit (line editing, history) on a terminal; plain input() otherwise.

    Raises EOFError on Ctrl-D / end of input, KeyboardInterrupt on Ctrl-C."""

    def __init__(self) -> None:
        self._session: Any = None
        if sys.stdin.isatty() and sys.stdout.isatty():
            from prompt_toolkit import PromptSession

            self._session = PromptSession()

    async def read(self, prompt: str) -> str:
        if self._session is not None:
            return await self._session.prompt_async(prompt)
        # Nothing else runs while we wait for a line, so blocking the loop is
        # fine, and a SIGINT interrupts input() directly.
        return input(prompt)


class Repl:
    def __init__(self, system: System, max_tokens: int | None = None) -> None:
        self.system = system
        self.frontend = system.frontend
        self.max_tokens = max_tokens
        self.conversation = Conversation()
        self.reader = LineReader()
        self.dim = sys.stdout.isatty()

    async def run(self) -> int:
        await self.system.start()
        try:
            while True:
                try:
                    line = await self.reader.read(PROMPT)
                except EOFError:
                    print()
                    return 0
                except KeyboardInterrupt:
                    print()
                    return EXIT_INTERRUPTED
                if not await self.handle(line.strip()):
                    return 0
        finally:
            await self.system.stop()

    async def handle(self, line: str) -> bool:
        """Handle one input line; False means leave."""
        if not line:
            return True
        if not line.startswith("/"):
            await self.turn(line)
            return True
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name == "/exit":
            return False
        if name == "/help":
            print(HELP)
        elif name == "/reset":
            self.conversation.reset()
            print("(conversation cleared)")
        elif name == "/system":
            self.conversation.system = arg or None
            print("(system message set)" if arg else "(system message removed)")
        else:
            print(f"unknown command {name}; /help lists them")
        return True

    async def turn(self, user: str) -> None:
        """Stream one answer; Ctrl-C cancels it. A failed or cancelled turn is
        not kept, so the conversation stays a clean user/assistant alternation."""
        renderer = Renderer(sys.stdout, dim=self.dim)
        try:
            request = ChatCompletionRequest(
                messages=self.conversation.messages(user), max_tokens=self.max_tokens
            )
        except ValidationError as e:
            print(f"error: {describe_validation(e)[0]}")
            return
        try:
            answer = await until_interrupted(stream_chat(self.frontend, request, renderer.piece))
        except Interrupted:
            renderer.finish()
            print("(cancelled)")
            return
        except (RequestError, ResponseFailed, ModelNotFound) as e:
            renderer.finish()
            print(f"error: {e}")
            return
        renderer.finish()
        self.conversation.add(user, answer.message())


def run_text(system: System, max_tokens: int | None = None) -> int:
    """Run the REPL to its end and return the exit status.

    A loop of our own rather than asyncio.run: asyncio.run turns the first
    SIGINT into a task cancellation, which cannot interrupt a blocking input()."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(Repl(system, max_tokens).run())
    except KeyboardInterrupt:  # between the windows where we catch it ourselves
        return EXIT_INTERRUPTED
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
