"""Migration: a request whose worker became unavailable mid-stream goes on
on another worker, with the tokens generated so far appended to its prompt
and its limits reduced by them, so its consumer sees one uninterrupted
stream. What decides whether it may move is the error's `cause` and kind,
never its message."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rotor.model.card import ModelCard
from rotor.protocol.engine import RESUME_FROM, EngineError, EngineOutput, EngineRequest


class Progress:
    """What a request's engines generated over all its attempts: the token
    ids (the resumed prompt's tail) and outputs of text-out engines (one
    token each)."""

    __slots__ = ("token_ids", "text_tokens")

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.text_tokens = 0

    def add(self, out: EngineOutput) -> None:
        self.token_ids.extend(out.token_ids)
        if out.text is not None:
            self.text_tokens += 1

    @property
    def tokens(self) -> int:
        return len(self.token_ids) + self.text_tokens


def refusal(
    error: EngineError, migrations: int, limit: int, request: EngineRequest, card: ModelCard
) -> EngineError | None:
    """Why the request may not move after `error` (the error to end it
    with), or None: it may."""
    if error.kind != "unavailable" or error.cause == "kv_transfer":
        return error  # (a decode worker that may not prefill itself: the same elsewhere)
    if migrations >= limit:
        return EngineError(
            f"{error.message}; gave up after {migrations} migration(s)",
            "unavailable",
            cause=error.cause,
        )
    if request.sampling.guided is not None and not card.capabilities.resumable_constraints:
        return EngineError(
            f"{error.message}; the request's decoding constraint cannot resume on another worker",
            "unavailable",
            cause=error.cause,
        )
    return None


def resumed(
    request: EngineRequest,
    progress: Progress,
    request_id: str,
    annotations: dict[str, Any] | None = None,
) -> EngineRequest:
    """The request as another worker continues it (as `request_id`, with
    these annotations added): its output so far is now part of the prompt,
    and the limits count what is already done (and the prompt's logprobs,
    which came with its first output, are not asked again)."""
    done = progress.tokens
    stop = replace(
        request.stop,
        max_tokens=max(1, request.stop.max_tokens - done),
        min_tokens=max(0, request.stop.min_tokens - done),
    )
    extra = dict(request.annotations)
    extra[RESUME_FROM] = extra.get(RESUME_FROM, 0) + done
    extra.update(annotations or {})
    output = request.output
    if done and output.prompt_logprobs is not None:  # the first output carried them
        output = replace(output, prompt_logprobs=None)
    return replace(
        request,
        request_id=request_id,
        token_ids=[*request.token_ids, *progress.token_ids],
        stop=stop,
        output=output,
        annotations=extra,
    )
