"""The echo engine: answers with the request's own text, one character (or, with
a model directory, one prompt token) per step, then ends at model EOS.

It needs no model, so `rotor run` works on a bare machine; with `--model-path`
it echoes the rendered prompt's tokens, which makes it a template debugger.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from rotor.engines.base import EngineError
from rotor.model.card import ECHO_EOS_ID, ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import EngineOutput, EngineRequest

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


class EchoEngine:
    def __init__(
        self, card: ModelCard, tokenizer: Tokenizer | None = None, delay_ms: float | None = None
    ) -> None:
        self.card = card
        self.tokenizer = tokenizer
        self.delay = (delay_from_env() if delay_ms is None else delay_ms) / 1000.0
        self._aborted: dict[str, set[int]] = {}
        self.tokens_generated = 0

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self._aborted.clear()

    def abort(self, request_id: str, index: int | None = None) -> None:
        aborted = self._aborted.get(request_id)
        if aborted is not None:
            aborted.update(range(1 << 16) if index is None else (index,))

    def state(self) -> dict[str, Any]:
        return {"active_requests": len(self._aborted), "tokens_generated": self.tokens_generated}

    def _script(self, request: EngineRequest) -> tuple[list[str] | None, list[int] | None]:
        if self.tokenizer is None:
            text = request.annotations.get("echo_text")
            if text is None:
                raise EngineError("the echo engine needs the text to echo")
            return list(text), None
        # An EOS id means "the model ended" to the frontend, so the prompt's own
        # EOS-id tokens (ChatML's <|im_end|> after every turn) are not echoed:
        # only the last token is the EOS.
        eos_ids = set(self.card.eos_token_ids)
        prompt = [t for t in request.token_ids if t not in eos_ids]
        return None, prompt + self.card.eos_token_ids[:1]

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        chars, ids = self._script(request)
        rid = request.request_id
        aborted: set[int] = set()
        self._aborted[rid] = aborted
        n = request.n
        length = len(chars) if chars is not None else len(ids)  # type: ignore[arg-type]
        limit = min(length, request.stop.max_tokens)
        try:
            for step in range(limit):
                if self.delay:
                    await asyncio.sleep(self.delay)
                elif step % _YIELD_EVERY == _YIELD_EVERY - 1:
                    await asyncio.sleep(0)
                last = step == length - 1
                for index in range(n):
                    if index in aborted:
                        continue
                    self.tokens_generated += 1
                    if chars is not None:
                        out = EngineOutput(index=index, text=chars[step])
                        if last:
                            out.finish, out.matched = "eos", ECHO_EOS_ID
                    else:
                        tid = ids[step]  # type: ignore[index]
                        out = EngineOutput(index=index, token_ids=[tid])
                        if last:
                            out.finish, out.matched = "eos", tid
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
            self._aborted.pop(rid, None)
