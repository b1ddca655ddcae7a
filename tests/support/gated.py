"""A tokenizer that holds long texts at a gate the test opens: what a test
needs to observe that a long `mock` script is tokenized off the event loop,
and what the server does meanwhile."""

from __future__ import annotations

import asyncio
import threading

from rotor.engines.mocker.admission import OFF_LOOP_SCRIPT_CHARS
from rotor.model.tokenizer import Tokenizer


class GatedTokenizer(Tokenizer):
    """`base`'s tokenizer, except that a text longer than the mocker tokenizes
    on the loop waits at `gate` until the test opens it, and is refused
    outright on the event loop's thread (there it would hold the loop, and
    nothing could open the gate). Made on the loop's thread."""

    def __init__(self, base: Tokenizer) -> None:
        super().__init__(base.raw)
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.gate = threading.Event()
        self.entered = asyncio.Event()  # a long text reached the gate
        self.long_on: list[str] = []  # the threads long texts were tokenized on

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if len(text) > OFF_LOOP_SCRIPT_CHARS:
            self.long_on.append(threading.current_thread().name)
            if threading.get_ident() == self.loop_thread:
                raise AssertionError("a long script was tokenized on the event loop's thread")
            self.loop.call_soon_threadsafe(self.entered.set)
            self.gate.wait()
        return super().encode(text, add_special_tokens)

    async def reached(self, *tasks: asyncio.Future[object]) -> None:
        """Wait until a long text is at the gate; when the tasks all end first
        (their script refused on the loop), raise the first one's error."""
        entered = asyncio.ensure_future(self.entered.wait())
        pending = {entered, *tasks}
        while not entered.done():
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if not pending - {entered} and not entered.done():
                entered.cancel()
                for task in tasks:
                    task.result()  # the error it ended with, if any
                raise AssertionError("the requests ended before a script was tokenized")
