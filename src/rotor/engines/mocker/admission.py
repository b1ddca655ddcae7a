"""A mocker request's admission: its checks, and the sequences it runs as.

A request is checked (its prompt, its images, `n`, its `mock` script or the
seeded output's limits), its script's texts tokenized (`{images}` in them
first replaced by the images the request carried) (a long one off the event
loop, in the script pool), and each choice made a sequence with its token
source (the script's ids, a constrained answer, or seeded random tokens) and
its logprob maker, queued in the scheduler for the step loop. A request
whose admission waits (a KV fetch, a long script) is pending meanwhile: the
aborts that come for it are kept and applied once it is admitted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from rotor.engines.mocker.config import MockerConfig
from rotor.engines.mocker.constrained import constrained_text, refuse_unsupported
from rotor.engines.mocker.sampler import (
    LogprobMaker,
    RandomSource,
    biased,
    prompt_logprobs,
    readable_vocab,
)
from rotor.engines.mocker.scheduler import Scheduler
from rotor.engines.mocker.script import ScriptSource, parse_script
from rotor.engines.mocker.sequence import Sequence, TokenSource
from rotor.engines.mocker.stream import MockerStream, RequestState
from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import PREFILL_ONLY, RESUME_FROM, EngineError, EngineRequest
from rotor.protocol.kv import chain_root
from rotor.protocol.mock import MockScript

# The engine's log, named as before it was split up (its lines and filters keep it).
logger = logging.getLogger("rotor.engines.mocker.engine")

# Scripts longer than this (all choices' texts together) are tokenized off
# the event loop: a 1 MB script takes a third of a second to tokenize, and
# sixteen of them admitted at once held the loop (`/live` too) for seconds.
# The tokenizer releases the GIL while it works, so the loop really runs
# meanwhile. Shorter ones are tokenized on the loop: the hop costs more.
OFF_LOOP_SCRIPT_CHARS = 4096
# One thread tokenizes long scripts, one after another, as the loop did: a
# tokenization peaks at ~170 bytes per character of script (1.4 GB for 8 MB),
# so running them side by side would multiply the worst case.
SCRIPT_WORKERS = 1
# The most alternatives per prompt token it gives (the frontend's cap too)
MAX_PROMPT_LOGPROBS = 20
# In a script's text: replaced by the images the request carried (`images_seen`).
IMAGES = "{images}"


class Admission:
    """Checks requests and queues their sequences in the scheduler and the
    engine's `requests`, then `wake`s the step loop. Owns the script pool
    (running from `start` to `stop`, as the engine does) and the requests
    still pending."""

    def __init__(
        self,
        card: ModelCard,
        tokenizer: Tokenizer,
        config: MockerConfig,
        scheduler: Scheduler,
        requests: dict[str, RequestState],
        wake: Callable[[], None],
    ) -> None:
        self.card = card
        self.tokenizer = tokenizer
        self.config = config
        self.scheduler = scheduler
        self.requests = requests  # the engine's running requests, by id
        self.wake = wake  # the step loop has work
        self.max_seq_len = card.context_length  # the card's, within the KV cache
        self.vocab = readable_vocab(tokenizer)
        # Requests whose admission waits (a KV fetch, a long script being
        # tokenized), and the choices aborted meanwhile (None: all of them),
        # applied once admitted.
        self._pending: dict[str, set[int] | None] = {}
        self._script_pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        self._script_pool = ThreadPoolExecutor(
            SCRIPT_WORKERS, thread_name_prefix="rotor-mocker-script"
        )

    def stop(self) -> None:
        """Nothing is admitted any more; a script still tokenizing is refused once done."""
        pool, self._script_pool = self._script_pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    # -- requests pending ----------------------------------------------------

    @property
    def pending(self) -> int:
        """How many requests are being admitted (they count as active)."""
        return len(self._pending)

    def begin(self, rid: str) -> None:
        """The request's admission waits: aborts that come meanwhile are kept."""
        self._pending.setdefault(rid, set())

    def drop(self, rid: str) -> None:
        """Its admission failed: what was kept for it goes."""
        self._pending.pop(rid, None)

    def end(self, rid: str) -> set[int] | None:
        """Its admission is done: the choices aborted meanwhile (None: all of them)."""
        return self._pending.pop(rid, set())

    def abort_pending(self, rid: str, index: int | None) -> bool:
        """Keep an abort of one choice (or all) for a request being admitted;
        False when it is not being admitted."""
        if rid not in self._pending:
            return False
        aborted = self._pending[rid]
        if aborted is not None:
            if index is None:
                self._pending[rid] = None
            else:
                aborted.add(index)
        return True

    # -- checks ------------------------------------------------------------------

    def parse(self, request: EngineRequest) -> MockScript | None:
        """Check the request; its parsed `mock` script, or None for seeded output."""
        if request.n < 1:
            raise EngineError(f"n must be at least 1, got {request.n}", "refused", "n")
        if not request.token_ids:
            raise EngineError("token_ids: the prompt is empty", "refused", "prompt")
        top = request.output.prompt_logprobs
        if top is not None and not 0 <= top <= MAX_PROMPT_LOGPROBS:
            raise EngineError(
                f"prompt_logprobs must be between 0 and {MAX_PROMPT_LOGPROBS}, got {top}",
                "refused",
                "prompt_logprobs",
            )
        if request.images:
            self._check_images(request)
        if len(request.token_ids) >= self.max_seq_len:
            # The frontend's context check (against this engine's card) comes
            # first; this one keeps a direct caller from queueing a sequence that
            # could never be scheduled.
            raise EngineError(
                f"token_ids: the prompt has {len(request.token_ids)} tokens; this engine "
                f"holds at most {self.max_seq_len} per sequence, prompt and output",
                "refused",
                "prompt",
            )
        raw = request.annotations.get("mock")
        if raw is None:
            refuse_unsupported(request.sampling.guided)
            if request.stop.max_tokens < 1:
                raise EngineError(
                    f"stop.max_tokens must be at least 1, got {request.stop.max_tokens}",
                    "refused",
                    "max_tokens",
                )
            return None
        script = parse_script(raw, request.n)
        if script.end in ("eos", "eos_hidden") and self._eos_id(request) is None:
            raise EngineError(
                f"mock.end {script.end!r}: the model has no EOS token id", "refused", "mock"
            )
        return script

    def _check_images(self, request: EngineRequest) -> None:
        """Images only for a vision model's card, each span inside the prompt,
        in prompt order and apart (the frontend makes them so)."""
        if not self.card.capabilities.images:
            raise EngineError(
                f"the model {self.card.name!r} takes no images (its card has no vision)",
                "refused",
                "messages",
            )
        at = 0
        for i, image in enumerate(request.images):
            if image.offset < at or image.length < 1:
                raise EngineError(
                    f"images[{i}]: its span [{image.offset}, {image.offset + image.length}) "
                    "is empty, or not after the previous image's",
                    "refused",
                    "messages",
                )
            at = image.offset + image.length
        if at > len(request.token_ids):
            raise EngineError(
                f"images: a span ends at token {at}, past the prompt's {len(request.token_ids)}",
                "refused",
                "messages",
            )

    def check_admissible(self, rid: str) -> None:
        """The engine runs (its script pool with it), and `rid` is new."""
        if self._script_pool is None:
            raise EngineError("the mocker engine is not started", "unavailable")
        if rid in self.requests or rid in self._pending:
            raise EngineError(f"request_id {rid!r} is already running", "internal")

    def _eos_id(self, request: EngineRequest) -> int | None:
        eos = self.card.eos_token_ids or request.stop.eos_token_ids
        return eos[0] if eos else None

    # -- a script's token ids ----------------------------------------------------

    async def script_ids(self, request: EngineRequest, script: MockScript) -> list[list[int]]:
        """The token ids of each of the script's texts (its one text, or one
        per choice), as many as the request can play (`_playable`); a long
        script's are made in the script pool, off the loop, and the engine
        may have been stopped by the time they come."""
        texts = _texts(script)
        if any(IMAGES in text for text in texts):
            seen = images_seen(request)
            texts = tuple(text.replace(IMAGES, seen) for text in texts)
        encode, keep = self.tokenizer.encode, self._playable(request)

        def ids_of(text: str) -> list[int]:
            ids = encode(text)
            return ids if len(ids) <= keep else ids[:keep]

        if sum(map(len, texts)) <= OFF_LOOP_SCRIPT_CHARS:
            return [ids_of(text) for text in texts]
        pool = self._script_pool
        assert pool is not None  # started: `check_admissible`
        rid = request.request_id
        self.begin(rid)
        logger.debug("request %s: its mock script is tokenized off the event loop", rid)
        try:
            ids = await asyncio.get_running_loop().run_in_executor(
                pool, lambda: [ids_of(text) for text in texts]
            )
        except BaseException:
            self.drop(rid)
            raise
        logger.debug(
            "request %s: its mock script is tokenized (%d characters, %d tokens kept)",
            rid,
            sum(map(len, texts)),
            sum(map(len, ids)),
        )
        if self._script_pool is not pool:
            self.drop(rid)
            raise EngineError("engine stopped", "unavailable")
        return ids

    def _playable(self, request: EngineRequest) -> int:
        """How many of a script's tokens the request can reach, and one more: a
        sequence fills (finish `length`) after `max_seq_len - prompt` tokens,
        from `resume_from` on, so a script cut there plays as the whole one
        does, and a 1 MB script keeps 32k ids in memory, not 800k."""
        resume = int(request.annotations.get(RESUME_FROM, 0))
        return max(resume, 0) + max(self.max_seq_len - len(request.token_ids), 0) + 1

    # -- its sequences -------------------------------------------------------------

    def queue(
        self,
        request: EngineRequest,
        stream: MockerStream,
        parsed: MockScript | None,
        script_ids: list[list[int]] | None = None,
    ) -> RequestState:
        """Queue the request's sequences, read by `stream`; `script_ids`: the
        token ids of the script's texts (`script_ids`), when it has one."""
        eos_id = self._eos_id(request)
        seqs: list[Sequence] = []
        makers: list[LogprobMaker | None] = []
        seeded = request.sampling.seed is not None
        resume = max(int(request.annotations.get(RESUME_FROM, 0)), 0)
        root = chain_root(request.lora, request.cache_salt)
        for index in range(request.n):
            if seeded:
                key = f"{request.sampling.seed}:{index}"
            else:
                key = f"{self.config.seed}:{request.request_id}:{index}"
            if request.lora is not None:  # an adapter's answer is its own
                key += f":lora:{request.lora}"
            source = self._source(request, index, key, parsed, script_ids, eos_id)
            seqs.append(
                Sequence(
                    request.request_id,
                    index,
                    request.token_ids,
                    source,
                    root,
                    request.priority,
                    request.images,
                )
            )
            maker = None
            if request.output.logprobs:
                maker = LogprobMaker(
                    random.Random("logprobs:" + key), self.vocab, request.output.top_logprobs
                )
                if seeded:
                    maker.skip(resume)
            makers.append(maker)
        req = RequestState(seqs, makers, stream)
        req.prefill_only = bool(request.annotations.get(PREFILL_ONLY))
        top = request.output.prompt_logprobs
        if top is not None:
            req.prompt_logprobs = prompt_logprobs(self.vocab, request.token_ids, top)
        self.requests[request.request_id] = req
        for seq in seqs:
            self.scheduler.add(seq)
        self.wake()
        return req

    def _source(
        self,
        request: EngineRequest,
        index: int,
        key: str,
        parsed: MockScript | None,
        script_ids: list[list[int]] | None,
        eos_id: int | None,
    ) -> TokenSource:
        """Choice `index`'s tokens: its script's, a constrained answer, or
        seeded random ones (`key` seeds them)."""
        if parsed is not None:
            assert script_ids is not None, "a script's texts are tokenized before admission"
            ids = script_ids[0 if isinstance(parsed.outputs, str) else index]
            script = ScriptSource(ids, parsed.end, parsed.tokens_per_step, eos_id)
            # A request resumed on this engine after another one died: the
            # script goes on where that one stopped.
            script.pos = min(int(request.annotations.get(RESUME_FROM, 0)), len(ids))
            return script
        guided = request.sampling.guided
        if guided is not None:
            text = constrained_text(guided, random.Random("guided:" + key))
            if text is not None:
                # A constrained answer ends where the constraint ends it.
                end = "eos" if eos_id is not None else "stop"
                return ScriptSource(self.tokenizer.encode(text), end, 1, eos_id)
        source = RandomSource(
            random.Random(key),
            biased(self.vocab, request.sampling.logit_bias),
            eos_id,
            request.stop,
            self.config.eos_probability,
        )
        if request.sampling.seed is not None:
            source.skip(max(int(request.annotations.get(RESUME_FROM, 0)), 0))
        return source


def images_seen(request: EngineRequest) -> str:
    """What a script's `{images}` becomes: the request's images as the
    engine saw them, in prompt order, as compact JSON (tests read it)."""
    seen = [
        {
            "hash": image.content_hash,
            "offset": image.offset,
            "tokens": image.length,
            "bytes": len(image.data) if image.data is not None else 0,
        }
        for image in request.images
    ]
    return json.dumps(seen, separators=(",", ":"))


def _texts(script: MockScript) -> tuple[str, ...]:
    """A script's distinct texts: its one text, or one per choice."""
    return (script.outputs,) if isinstance(script.outputs, str) else script.outputs
