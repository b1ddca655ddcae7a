"""`rotor run in=text`: an interactive chat in the terminal.

The whole REPL runs in one event loop, so an answer streams while the loop
runs and Ctrl-C during an answer reaches us as a signal that cancels just that
answer (closing its chunk stream stops the engine). At the prompt, Ctrl-C
exits with status 130, the shell's convention for an interrupt; `/exit` and
Ctrl-D exit with 0.

On a terminal it opens with a banner (model, engine, context length) and
colours the turns (inputs/style.py); anything else gets the bare text.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from rotor import __version__
from rotor.frontend import ModelNotFound
from rotor.inputs.interrupt import EXIT_INTERRUPTED, Interrupted, until_interrupted
from rotor.inputs.render import Renderer
from rotor.inputs.session import System, stream_chat
from rotor.inputs.style import PLAIN, Style, choose
from rotor.pipeline.errors import RequestError, describe_validation
from rotor.pipeline.events import ResponseFailed
from rotor.pipeline.served import ServedModel
from rotor.protocol.openai import ChatCompletionRequest

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession

PROMPT = "> "

HELP = """\
commands:
  /system TEXT   set the system message (/system alone removes it)
  /reset         forget the conversation (the system message stays)
  /help          this list
  /exit          leave (Ctrl-D too); Ctrl-C stops an answer, or leaves at the prompt"""
HINT = "/help lists the commands · Ctrl-C stops an answer · Ctrl-D or /exit quits"


def banner(style: Style, model: ServedModel, engine: str) -> str:
    """What the REPL is talking to, and how to drive it."""
    facts = [f"model {model.name}"]
    if engine:
        facts.append(f"engine {engine}")
    facts.append(f"context {model.card.context_length:,} tokens")
    if model.reasoning_parser:
        facts.append(f"reasoning {model.reasoning_parser}")
    if model.tool_parser:
        facts.append(f"tools {model.tool_parser}")
    head = style.paint(style.title, f"rotor {__version__}")
    return f"{head}  {' · '.join(facts)}\n{style.paint(style.note, HINT)}\n"


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

    def __init__(self, style: Style = PLAIN) -> None:
        self._session: PromptSession[str] | None = None
        if sys.stdin.isatty() and sys.stdout.isatty():
            from prompt_toolkit import PromptSession
            from prompt_toolkit.styles import Style as ToolkitStyle

            # The "" class is the typed text.
            typed = ToolkitStyle.from_dict({"": style.user}) if style.user else None
            self._session = PromptSession(style=typed)

    async def read(self, prompt: str) -> str:
        """`prompt` may carry ANSI codes (prompt_toolkit reads them as styles)."""
        if self._session is not None:
            from prompt_toolkit.formatted_text import ANSI

            return await self._session.prompt_async(ANSI(prompt))
        # Nothing else runs while we wait for a line, so blocking the loop is
        # fine, and a SIGINT interrupts input() directly.
        return input(prompt)


class Repl:
    def __init__(
        self,
        system: System,
        max_tokens: int | None = None,
        style: Style = PLAIN,
        engine: str = "",
    ) -> None:
        self.system = system
        self.frontend = system.frontend
        self.max_tokens = max_tokens
        self.conversation = Conversation()
        self.style = style
        self.engine = engine
        self.reader = LineReader(style)
        self.prompt = style.paint(style.prompt, PROMPT)

    def say(self, text: str, code: str | None = None) -> None:
        """One reply of the REPL's own (not the model's), in the note style by default."""
        print(self.style.paint(self.style.note if code is None else code, text))

    async def run(self) -> int:
        await self.system.start()
        try:
            if self.style.decorate:
                entry = self.frontend.registry.entries()[0]
                print(banner(self.style, entry.model, self.engine), flush=True)
            while True:
                try:
                    line = await self.reader.read(self.prompt)
                except EOFError:
                    print()
                    return 0
                except KeyboardInterrupt:
                    print()
                    return EXIT_INTERRUPTED
                line = line.strip()
                if not await self.handle(line):
                    return 0
                if line and self.style.decorate:
                    print()  # air between one turn and the next prompt
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
            self.say("(conversation cleared)")
        elif name == "/system":
            self.conversation.system = arg or None
            self.say("(system message set)" if arg else "(system message removed)")
        else:
            self.say(f"unknown command {name}; /help lists them", self.style.error)
        return True

    async def turn(self, user: str) -> None:
        """Stream one answer; Ctrl-C cancels it. A failed or cancelled turn is
        not kept, so the conversation stays a clean user/assistant alternation."""
        renderer = Renderer(sys.stdout, style=self.style)
        try:
            request = ChatCompletionRequest(
                messages=self.conversation.messages(user), max_tokens=self.max_tokens
            )
        except ValidationError as e:
            self.say(f"error: {describe_validation(e)[0]}", self.style.error)
            return
        try:
            answer = await until_interrupted(stream_chat(self.frontend, request, renderer.piece))
        except Interrupted:
            renderer.finish()
            self.say("(cancelled)")
            return
        except (RequestError, ResponseFailed, ModelNotFound) as e:
            renderer.finish()
            self.say(f"error: {e}", self.style.error)
            return
        renderer.finish(answer.finish_reason)
        self.conversation.add(user, answer.message())


def run_text(
    system: System, max_tokens: int | None = None, color: str = "auto", engine: str = ""
) -> int:
    """Run the REPL to its end and return the exit status. `color` is
    `--color` (auto, always, never); `engine` names the engine in the banner.

    A loop of our own rather than asyncio.run: asyncio.run turns the first
    SIGINT into a task cancellation, which cannot interrupt a blocking input()."""
    loop = asyncio.new_event_loop()
    try:
        repl = Repl(system, max_tokens, choose(color, sys.stdout), engine)
        return loop.run_until_complete(repl.run())
    except KeyboardInterrupt:  # between the windows where we catch it ourselves
        return EXIT_INTERRUPTED
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
