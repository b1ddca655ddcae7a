"""One choice of one request as the scheduler sees it: tokens, progress, KV blocks.

A request with n choices becomes n sequences. Each owns where its next tokens
come from (a `TokenSource`: the seeded sampler or a `mock` script), so the
scheduler and KV cache treat scripted and sampled output alike.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from enum import Enum, auto
from typing import Protocol

from rotor.protocol.engine import EngineOutput
from rotor.protocol.kv import Placed


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class TokenSource(Protocol):
    # True once the source has ended its choice with no finish at all (script
    # end "eof"): the output it last returned is the choice's last.
    closed: bool

    def next(self, num_generated: int, limit: int) -> EngineOutput:
        """The next tokens (at most `limit`) after `num_generated` were produced,
        and the finish if they end the choice; the engine sets the output's index."""
        ...


class Sequence:
    __slots__ = (
        "request_id",
        "index",
        "token_ids",
        "num_prompt_tokens",
        "source",
        "status",
        "num_computed",
        "prefilled",
        "block_table",
        "num_hashed_blocks",
        "block_hashes",
        "root",
        "images",
        "cached_tokens",
        "priority",
        "arrival",
    )

    def __init__(
        self,
        request_id: str,
        index: int,
        prompt: list[int],
        source: TokenSource,
        root: int | None = None,
        priority: int = 0,
        images: Seq[Placed] = (),
    ) -> None:
        self.request_id = request_id
        self.index = index
        self.token_ids = list(prompt)  # prompt, then everything generated
        self.num_prompt_tokens = len(prompt)
        self.source = source
        self.status = SequenceStatus.WAITING
        self.num_computed = 0  # tokens whose KV exists
        self.prefilled = False  # caught up since the last (re)admission
        self.block_table: list[int] = []
        self.num_hashed_blocks = 0  # leading blocks registered in the prefix cache
        self.block_hashes: list[int] = []  # memo of full-block hashes; tokens never change
        self.root = root  # its first block's parent: a LoRA adapter's root (protocol/kv.py)
        # the prompt's images (EngineImage), in prompt order: the blocks holding
        # their tokens hash their content hashes too (protocol/kv.block_hashes)
        self.images = images
        self.cached_tokens: int | None = None  # prompt tokens served from cache, first admission
        self.priority = priority  # the request's: lower first (--scheduling-policy priority)
        self.arrival = 0  # the scheduler's count when first queued: ties in priority by it

    def __repr__(self) -> str:
        return f"Sequence({self.request_id!r}, {self.index}, {self.status.name}, {self.num_computed}/{self.num_tokens})"

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_pending(self) -> int:
        """Tokens still to compute before the next ones can be sampled."""
        return len(self.token_ids) - self.num_computed
