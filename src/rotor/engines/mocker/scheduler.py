"""Which sequences compute how many tokens this step (vLLM v1's policy, small).

Every sequence has tokens it still has to compute: its whole prompt when it
arrives (less what the prefix cache already holds), one token per step while
decoding. Each step spends a budget of `max_num_batched_tokens`: running
sequences first, oldest first, then waiting ones while KV blocks and
`max_num_seqs` allow. A prompt larger than the budget is prefilled in chunks
over several steps. When a running sequence cannot get a block, the youngest
running sequence is preempted by recompute: its blocks are freed and it goes
back to the head of the waiting queue, to be prefilled again (prompt and
output so far) when there is room.

Under `scheduling_policy` "priority" (vLLM's), the waiting queue is ordered
by (priority, arrival) instead — lower priority first, ties in arrival order,
a preempted sequence keeping its place — and the sequence preempted is the
running one last in that order rather than the youngest. As in vLLM, a
waiting request never preempts a running one: priority decides who is
admitted next and who gives way when blocks run out.

A request whose consumer lags (its outputs not read, `held`) is skipped: it
keeps its blocks but computes nothing until it is read again.

With KV tiers below the device, a prompt's leading blocks found on the host
or on disk count as cached (`cached_tokens`) and are brought back to the
device when it is admitted; their transfer time (`MockerConfig.load_ms`) is
the batch's `load_ms`, which lengthens the step that admits it.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from dataclasses import dataclass, field

from rotor.engines.mocker.config import MockerConfig
from rotor.engines.mocker.kv_cache import KVCache
from rotor.engines.mocker.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class Batch:
    items: list[tuple[Sequence, int]] = field(default_factory=list)  # (seq, tokens to compute)
    prefill_tokens: int = 0
    decode_seqs: int = 0
    load_ms: float = 0.0  # blocks brought back to the device from lower media


class Scheduler:
    def __init__(self, config: MockerConfig) -> None:
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.kv = KVCache(
            config.num_kv_blocks,
            config.block_size,
            host_blocks=config.host_kv_blocks,
            disk_blocks=config.disk_kv_blocks,
        )
        self._load_ms = config.load_ms
        self.by_priority = config.scheduling_policy == "priority"
        self.arrivals = 0  # sequences queued so far: each one's arrival
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: the last is the youngest
        self.preemptions = 0
        self.held: set[str] = set()  # request ids whose consumer lags

    def pending_prefill_tokens(self) -> int:
        """Prompt tokens admitted or queued and not computed yet (the router's
        view of the prefill work ahead of a new request)."""
        pending = sum(s.num_pending for s in self.waiting)
        return pending + sum(s.num_pending for s in self.running if not s.prefilled)

    def has_work(self) -> bool:
        if self.waiting:
            return True
        held = self.held
        return any(seq.request_id not in held for seq in self.running)

    def add(self, seq: Sequence) -> None:
        self.arrivals += 1
        seq.arrival = self.arrivals
        if self.by_priority:
            insort(self.waiting, seq, key=_rank)
        else:
            self.waiting.append(seq)

    def schedule(self) -> Batch:
        batch = Batch()
        budget = self.max_num_batched_tokens
        preemptions = self.preemptions
        running, held, items = self.running, self.held, batch.items
        in_place = self.kv.in_place
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            i += 1
            if held and seq.request_id in held:
                continue
            tokens = len(seq.token_ids)
            pending = tokens - seq.num_computed
            if pending == 1 and seq.prefilled and in_place(seq, tokens):
                # A decode step inside its last block: nothing to reserve
                # (KVCache.allocate's own first case, without the calls to it).
                items.append((seq, 1))
                batch.decode_seqs += 1
                budget -= 1
                continue
            n = min(pending, budget)
            fits, refund, before = self._reserve(seq, n, batch)
            budget += refund  # victims already in this step's batch give theirs back
            i -= before
            if not fits:
                break  # seq preempted itself: last in order, so nothing after it runs
            self._add(batch, seq, n)
            budget -= n
        # Admitting right after a preemption would only thrash the cache.
        admit = self.preemptions == preemptions
        kv = self.kv
        loaded = dict(kv.loaded) if kv.lower and admit and self.waiting else None
        while admit and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            hits = self.kv.match(seq)
            cached = len(hits) * self.kv.block_size
            n = min(seq.num_tokens - cached, budget)
            if not self.kv.allocate(seq, cached + n, hits):
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            seq.num_computed = cached
            seq.prefilled = False
            if seq.cached_tokens is None:
                seq.cached_tokens = min(cached, seq.num_prompt_tokens)
            self.running.append(seq)
            self._add(batch, seq, n)
            budget -= n
        if loaded is not None:  # what admission brought up from below the device
            for medium, count in kv.loaded.items():
                if count > loaded[medium]:
                    batch.load_ms += self._load_ms(medium, count - loaded[medium])
        return batch

    def advance(self, batch: Batch) -> list[Sequence]:
        """Apply a computed step: the sequences that now sample new tokens."""
        sampling = []
        running = SequenceStatus.RUNNING
        for seq, n in batch.items:
            if seq.status is not running:
                continue  # aborted while the step ran
            computed = seq.num_computed = seq.num_computed + n
            if computed == len(seq.token_ids):
                seq.prefilled = True
                sampling.append(seq)
        return sampling

    def finish(self, seq: Sequence) -> None:
        """Take the seq out of the queues for good and free its blocks."""
        if seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        elif seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        else:
            return
        self.kv.free(seq)
        seq.status = SequenceStatus.FINISHED

    def _reserve(self, seq: Sequence, n: int, batch: Batch) -> tuple[bool, int, int]:
        """Blocks for n more tokens of seq, preempting until they fit: whether
        seq itself still runs, the tokens victims already in `batch` gave
        back, and how many victims stood before seq in `running` (under fcfs
        the victim is the youngest, never before seq; under priority, any)."""
        refund = before = 0
        running = self.running
        while not self.kv.allocate(seq, seq.num_computed + n):
            if self.by_priority:  # vLLM: the last in (priority, arrival) order
                at = running.index(max(running, key=_rank))
                if at < running.index(seq):
                    before += 1
                    refund += self._unbatch(batch, running[at])
            else:
                at = len(running) - 1
            victim = running.pop(at)
            self._preempt(victim)
            if victim is seq:
                return False, refund, before
        return True, refund, before

    @staticmethod
    def _unbatch(batch: Batch, seq: Sequence) -> int:
        """Take seq's item out of this step's batch (it is being preempted):
        its tokens, 0 if it had none (held)."""
        for k, (other, n) in enumerate(batch.items):
            if other is seq:
                del batch.items[k]
                if seq.prefilled:
                    batch.decode_seqs -= 1
                else:
                    batch.prefill_tokens -= n
                return n
        return 0

    def _preempt(self, seq: Sequence) -> None:
        self.kv.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_computed = 0
        seq.prefilled = False
        if self.by_priority:
            insort(self.waiting, seq, key=_rank)
        else:
            self.waiting.appendleft(seq)
        self.preemptions += 1

    @staticmethod
    def _add(batch: Batch, seq: Sequence, n: int) -> None:
        batch.items.append((seq, n))
        if seq.prefilled:
            batch.decode_seqs += 1
        else:
            batch.prefill_tokens += n


def _rank(seq: Sequence) -> tuple[int, int]:
    """A sequence's place under the priority policy: lower priority, then earlier arrival."""
    return seq.priority, seq.arrival
