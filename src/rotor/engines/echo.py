"""The echo engine: answers with the request's own text, one character (or, with
a model directory, one prompt token) per step, then ends at model EOS.

It needs no model, so `rotor run` works on a bare machine; with `--model-path`
it echoes the rendered prompt's tokens, which makes it a template debugger.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from rotor.model.card import ECHO_EOS_ID, ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import (
    RESUME_FROM,
    EngineError,
    EngineOutput,
    EngineRequest,
    EngineState,
    EngineStream,
)
from rotor.protocol.flow import Pump

DEFAULT_DELAY_MS = 10.0
# With no delay, still yield to the event loop now and then so cancellation and
# other requests get their turn.
_YIELD_EVERY = 16


def delay_from_env() -> float:
    raw = os.environ.get("ROTOR_ECHO_DELAY_MS", "")
    try:
        return float(raw) if raw else DEFAULT_DELAY_MS
    except ValueError:
        raise ValueError(
            f"ROTOR_ECHO_DELAY_MS must be a number of milliseconds, got {raw!r}"
        ) from None


@dataclass(slots=True)
class _Running:
    """A request in flight: its choice count and the choices aborted so far."""

    n: int
    aborted: set[int] = field(default_factory=set)


class EchoEngine:
    def __init__(
        self, card: ModelCard, tokenizer: Tokenizer | None = None, delay_ms: float | None = None
    ) -> None:
        self.card = card
        self.tokenizer = tokenizer
        self.delay = (delay_from_env() if delay_ms is None else delay_ms) / 1000.0
        self._running: dict[str, _Running] = {}
        self.tokens_generated = 0

    def abort(self, request_id: str, index: int | None = None) -> None:
        running = self._running.get(request_id)
        if running is None:
            return
        if index is None:
            running.aborted.update(range(running.n))
        elif 0 <= index < running.n:
            running.aborted.add(index)

    def state(self) -> EngineState:
        return EngineState(
            active_requests=len(self._running), tokens_generated=self.tokens_generated
        )

    def _script(self, request: EngineRequest) -> list[str] | list[int]:
        """What each step sends: a character (text out) or a token id. A request
        resumed here after another engine died (`resume_from`: steps already
        sent; their tokens now end its prompt) goes on where that one stopped."""
        resume = int(request.annotations.get(RESUME_FROM, 0))
        if self.tokenizer is None:
            return list(request.annotations["echo_text"])[resume:]
        # An EOS id means "the model ended" to the frontend, so the prompt's own
        # EOS-id tokens (ChatML's <|im_end|> after every turn) are not echoed:
        # only the last token is the EOS.
        eos_ids = set(self.card.eos_token_ids)
        prompt = request.token_ids[: len(request.token_ids) - resume]
        script = [t for t in prompt if t not in eos_ids] + self.card.eos_token_ids[:1]
        return script[resume:]

    def generate(self, request: EngineRequest) -> EngineStream:
        """Its outputs, one step at a time (a generator pumped into a source)."""
        return Pump(self._generate(request))

    async def _generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        if self.tokenizer is None and request.annotations.get("echo_text") is None:
            raise EngineError("the echo engine needs the text to echo", "refused", "messages")
        rid = request.request_id
        if rid in self._running:
            raise EngineError(f"request_id {rid!r} is already running", "internal")
        script = self._script(request)
        n = request.n
        length = len(script)
        limit = min(length, request.stop.max_tokens)
        running = self._running[rid] = _Running(n)
        aborted = running.aborted
        try:
            for step in range(limit):
                if self.delay:
                    await asyncio.sleep(self.delay)
                elif step % _YIELD_EVERY == _YIELD_EVERY - 1:
                    await asyncio.sleep(0)
                item = script[step]
                last = step == length - 1
                for index in range(n):
                    if index in aborted:
                        continue
                    self.tokens_generated += 1
                    if isinstance(item, str):
                        out = EngineOutput(index=index, text=item)
                        if last:
                            out.finish, out.matched = "eos", ECHO_EOS_ID
                    else:
                        out = EngineOutput(index=index, token_ids=[item])
                        if last:
                            out.finish, out.matched = "eos", item
                    yield out
                if len(aborted) >= n:
                    return
            if length == 0:
                for index in range(n):
                    yield EngineOutput(index=index, finish="eos", matched=ECHO_EOS_ID)
            elif limit < length:
                for index in range(n):
                    if index not in aborted:
                        yield EngineOutput(index=index, finish="length")
        finally:
            self._running.pop(rid, None)
