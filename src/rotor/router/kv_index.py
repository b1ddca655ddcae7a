"""The frontend's prefix index of every worker's KV blocks, for KV-aware routing.

Why a hash map and not a radix tree: a block's chained hash names its whole
token prefix (`rotor.protocol.kv`), so "worker w holds the first k blocks of
this prompt" is just "w holds each of h_0 .. h_{k-1}". A radix tree keyed by
chained hash would store the same one node per distinct hash, plus child
links that the chain already implies; the flat map is that tree with the
edges left out. Each distinct hash maps to a bitmask of the workers holding
it (one bit per worker slot), so the overlap walk along a prompt's chain is
one dict lookup and one integer AND per block, whatever the number of
workers, and stops at the first block nobody holds.

Overlap is the *leading* run a worker holds, as an engine's prefix match
counts it: a worker that holds block 5 but not block 4 has an overlap of 4.

Tiers: a worker's blocks sit in layers — the device's memory, and the lower
media its engine offloads to (host memory, disk), plus the blocks this router
*predicts* the worker will hold (below). One map per layer, the worker slots
shared, so a block held in any layer continues a worker's run, and each block
of the run is counted in the best layer that holds it, in the order device,
predicted, host, disk (`Overlap`); the cost (router/kv_cost.py) weighs them.

Two indexes share that core:
- `KVIndex` is fed by workers' KV events, applied per worker strictly in event
  id order. A gap (a lost event) is reported, the worker's later events are
  held back, and `resync` with a snapshot replaces the worker's blocks and
  replays the held-back events that follow it, so the index converges even
  while events keep flowing during the resync. With a `predicted_ttl`, the
  blocks of a request routed to a worker are *predicted* entries there until
  that worker's events name them on the device (stored: they are real;
  removed, by news younger than the prediction: they are gone) or the TTL
  runs out, so the requests that follow one of a prefix find it before its
  events arrive.
- `ApproxKVIndex` is for engines that publish no events: the router records
  its own decisions, and each record expires after a TTL.
"""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from rotor.protocol.kv import (
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    KVSnapshot,
    Medium,
)

WorkerId = Hashable
MAX_HELD_EVENTS = 4096  # events held back per worker while it awaits a resync

# How long a routed request's blocks count as predicted on its worker when
# its KV events have not confirmed them (--router-predicted-ttl). The events
# confirm or drop an entry as soon as they can speak for it, so the TTL only
# bounds a guess they never speak of (a request aborted before its worker
# scheduled it, a held block never evicted): it must outlast the gap it bridges — the worker's event
# lag (up to the 1 s that docs/benchmarks.md measures) plus the wait in a busy
# worker's queue before the engine registers the blocks — and a guess that
# outlives its truth costs little (the prefix's next request goes where it
# was sent, and is computed there).
DEFAULT_PREDICTED_TTL_S = 5.0

# The layers of `KVIndex`'s map, best first: a block in several is counted in the first.
DEVICE, PREDICTED, HOST, DISK = 0, 1, 2, 3
LAYERS = 4
LAYER_OF_MEDIUM = {"device": DEVICE, "host": HOST, "disk": DISK}
REAL_LAYERS = (DEVICE, HOST, DISK)


class Overlap(NamedTuple):
    """A worker's leading run of a prompt's blocks, each block counted once,
    where its best copy sits: on the device, predicted (sent there, its
    events not yet come: credited as the device), in host memory, on disk.
    (A named tuple: one is made per candidate of every decision.)"""

    device: int = 0
    host: int = 0
    disk: int = 0
    predicted: int = 0

    @property
    def blocks(self) -> int:
        """The run's length: what `x-rotor-kv-overlap` says."""
        return self.device + self.host + self.disk + self.predicted

    def credit(self, host_weight: float, disk_weight: float) -> float:
        """The run in device blocks: a host or disk block counts its weight."""
        return self.device + self.predicted + host_weight * self.host + disk_weight * self.disk

    def capped(self, blocks: int) -> Overlap:
        """At most `blocks` long, the least credited blocks let go first."""
        excess = self.blocks - blocks
        if excess <= 0:
            return self
        counts = {"disk": self.disk, "host": self.host, "predicted": self.predicted}
        for name in counts:
            cut = min(excess, counts[name])
            counts[name] -= cut
            excess -= cut
        return Overlap(self.device - excess, counts["host"], counts["disk"], counts["predicted"])

    def describe(self) -> str:
        """`device=8,host=3,disk=1,predicted=0`: the value of `x-rotor-kv-tiers`."""
        return f"device={self.device},host={self.host},disk={self.disk},predicted={self.predicted}"


class PrefixMap:
    """Which workers hold which block hashes, in one or more layers: per layer,
    hash -> bitmask of worker slots (the slots shared by the layers), and per
    worker and layer the set of its hashes (for clear and removal)."""

    __slots__ = ("_masks", "_slots", "_workers", "_free", "_held")

    def __init__(self, layers: int = 1) -> None:
        if layers < 1:
            raise ValueError(f"layers must be at least 1, got {layers}")
        self._masks: list[dict[int, int]] = [{} for _ in range(layers)]
        self._slots: dict[WorkerId, int] = {}
        self._workers: list[WorkerId | None] = []  # slot -> worker
        self._free: list[int] = []  # slots of removed workers, reused
        self._held: dict[WorkerId, list[set[int]]] = {}

    def __len__(self) -> int:
        """Distinct block hashes held by any worker in the first layer."""
        return len(self._masks[0])

    @property
    def layers(self) -> int:
        return len(self._masks)

    def layer_size(self, layer: int) -> int:
        """Distinct block hashes held by any worker in the layer."""
        return len(self._masks[layer])

    @property
    def workers(self) -> list[WorkerId]:
        return list(self._slots)

    def active_layers(self) -> list[int]:
        """The layers that hold any block."""
        return [layer for layer, masks in enumerate(self._masks) if masks]

    def blocks_of(self, worker: WorkerId, layer: int = 0) -> set[int]:
        """A copy of the hashes the worker holds in the layer (empty for an unknown worker)."""
        held = self._held.get(worker)
        return set(held[layer]) if held is not None else set()

    def num_blocks(self, worker: WorkerId, layer: int = 0) -> int:
        held = self._held.get(worker)
        return len(held[layer]) if held is not None else 0

    def add_worker(self, worker: WorkerId) -> None:
        if worker in self._slots:
            return
        slot = self._free.pop() if self._free else len(self._workers)
        if slot == len(self._workers):
            self._workers.append(worker)
        else:
            self._workers[slot] = worker
        self._slots[worker] = slot
        self._held[worker] = [set() for _ in self._masks]

    def missing(self, worker: WorkerId, hashes: Iterable[int], layer: int = 0) -> list[int]:
        """Those of the hashes the worker does not hold in the layer."""
        held = self._held.get(worker)
        if held is None:
            return list(hashes)
        mine = held[layer]
        return [h for h in hashes if h not in mine]

    def add(self, worker: WorkerId, hashes: Iterable[int], layer: int = 0) -> None:
        self.add_worker(worker)
        bit = 1 << self._slots[worker]
        masks, held = self._masks[layer], self._held[worker][layer]
        for h in hashes:
            if h not in held:
                held.add(h)
                masks[h] = masks.get(h, 0) | bit

    def discard(self, worker: WorkerId, hashes: Iterable[int], layer: int = 0) -> None:
        held_by_layer = self._held.get(worker)
        if held_by_layer is None:
            return
        held = held_by_layer[layer]
        keep = ~(1 << self._slots[worker])
        masks = self._masks[layer]
        for h in hashes:
            if h in held:
                held.discard(h)
                mask = masks[h] & keep
                if mask:
                    masks[h] = mask
                else:
                    del masks[h]

    def clear(self, worker: WorkerId, layers: Iterable[int] | None = None) -> None:
        """Drop the worker's hashes of those layers (None: of every layer)."""
        held = self._held.get(worker)
        if held is None:
            return
        for layer in range(len(self._masks)) if layers is None else layers:
            if held[layer]:
                self.discard(worker, list(held[layer]), layer)

    def remove_worker(self, worker: WorkerId) -> None:
        if worker not in self._slots:
            return
        self.clear(worker)
        slot = self._slots.pop(worker)
        del self._held[worker]
        self._workers[slot] = None
        self._free.append(slot)

    def overlaps(self, block_hashes: Sequence[int]) -> dict[WorkerId, int]:
        """Per worker, how many leading blocks of the chain it holds in any
        layer; workers holding none are left out."""
        layered = [m for m in self._masks if m]
        if len(layered) > 1:
            return {w: sum(counts) for w, counts in self.matches(block_hashes).items()}
        if not layered:
            return {}
        workers = self._workers
        return {workers[slot]: run for slot, run in _runs(layered[0], block_hashes).items()}

    def matches(self, block_hashes: Sequence[int]) -> dict[WorkerId, list[int]]:
        """Per worker, its leading run of the chain over every layer, as one
        count per layer: each block counted in the first layer that holds it.
        Workers holding none are left out.

        One walk: per block, a lookup per layer that holds anything, the
        workers still in the run are those holding it in some layer; a block
        a worker holds in its best layer costs nothing more, one it holds only
        lower down is counted bit by bit (so the price is what sits lower)."""
        active = [(layer, m) for layer, m in enumerate(self._masks) if m]
        if not block_hashes or not active:
            return {}
        layers = len(self._masks)
        best, best_masks = active[0]
        lower = active[1:]
        if not lower:  # one layer holds anything: the plain walk
            out_one: dict[WorkerId, list[int]] = {}
            for slot, run in _runs(best_masks, block_hashes).items():
                per_layer = [0] * layers
                per_layer[best] = run
                out_one[self._workers[slot]] = per_layer
            return out_one
        runs: dict[int, int] = {}  # slot -> run length
        below: dict[int, list[int]] = {}  # slot -> counts of blocks held only lower down
        alive = 0
        depth = 0
        for depth, h in enumerate(block_hashes):  # noqa: B007 - read after the loop
            top = best_masks.get(h, 0)
            held = top
            lows = []
            for layer, masks in lower:
                mask = masks.get(h, 0)
                if mask:
                    lows.append((layer, mask))
                    held |= mask
            still = held if depth == 0 else alive & held
            gone = alive ^ still if depth else 0
            while gone:
                low = gone & -gone
                runs[low.bit_length() - 1] = depth
                gone ^= low
            alive = still
            if not alive:
                break
            rest = alive & ~top
            for layer, mask in lows:
                here = rest & mask
                rest ^= here
                while here:
                    low = here & -here
                    slot = low.bit_length() - 1
                    counts = below.get(slot)
                    if counts is None:
                        counts = below[slot] = [0] * layers
                    counts[layer] += 1
                    here ^= low
                if not rest:
                    break
        else:
            depth = len(block_hashes)
        while alive:
            low = alive & -alive
            runs[low.bit_length() - 1] = depth
            alive ^= low
        out: dict[WorkerId, list[int]] = {}
        workers = self._workers
        for slot, run in runs.items():
            counts = below.get(slot) or [0] * layers
            counts[best] = run - sum(counts)
            out[workers[slot]] = counts
        return out


def _runs(masks: dict[int, int], block_hashes: Sequence[int]) -> dict[int, int]:
    """Per worker slot, the leading run of the chain in one map (one dict
    lookup and one AND per block, until nobody is left); slots holding none
    are left out."""
    if not block_hashes:
        return {}
    alive = masks.get(block_hashes[0], 0)
    out: dict[int, int] = {}
    if not alive:
        return out
    depth = 1
    for h in block_hashes[1:]:
        still = alive & masks.get(h, 0)
        if still != alive:
            gone = alive ^ still
            while gone:
                low = gone & -gone
                out[low.bit_length() - 1] = depth
                gone ^= low
            alive = still
            if not alive:
                return out
        depth += 1
    while alive:
        low = alive & -alive
        out[low.bit_length() - 1] = depth
        alive ^= low
    return out


class _Expiring:
    """Entries of one layer of a map that each last until their expiry: the
    approximate index's records, `KVIndex`'s predicted blocks. A constant TTL
    and a clock that never goes back keep `_until` sorted, oldest first.
    Each entry also keeps when it was first recorded (a refresh keeps that)."""

    __slots__ = ("_map", "_layer", "ttl", "_until")

    def __init__(self, pm: PrefixMap, layer: int, ttl: float) -> None:
        self._map = pm
        self._layer = layer
        self.ttl = ttl
        # (worker, hash) -> (first recorded, expiry)
        self._until: OrderedDict[tuple[WorkerId, int], tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._until)

    def record(self, worker: WorkerId, hashes: Iterable[int], now: float) -> None:
        """The worker holds these until `now + ttl` (a later record refreshes that)."""
        self.expire(now)
        until = now + self.ttl
        entries = self._until
        added = []
        for h in hashes:
            key = (worker, h)
            held = entries.get(key)
            if held is not None:
                entries.move_to_end(key)
                entries[key] = (held[0], until)
            else:
                added.append(h)
                entries[key] = (now, until)
        self._map.add(worker, added, self._layer)

    def recorded(self, worker: WorkerId, h: int) -> tuple[float, float] | None:
        """When the entry was first recorded and last refreshed (None: no entry)."""
        held = self._until.get((worker, h))
        return None if held is None else (held[0], held[1] - self.ttl)

    def expire(self, now: float) -> int:
        """Drop the entries whose TTL has run out; how many were dropped."""
        entries, dropped = self._until, 0
        while entries:
            key, (_, until) = next(iter(entries.items()))
            if until > now:
                break
            del entries[key]
            self._map.discard(key[0], (key[1],), self._layer)
            dropped += 1
        return dropped

    def drop(self, worker: WorkerId, hashes: Iterable[int]) -> None:
        """The worker's entries for these hashes go now."""
        entries = self._until
        if not entries:
            return
        gone = [h for h in hashes if entries.pop((worker, h), None) is not None]
        if gone:
            self._map.discard(worker, gone, self._layer)

    def forget(self, worker: WorkerId) -> None:
        """Every entry of the worker goes."""
        held = self._map.blocks_of(worker, self._layer)
        for h in held:
            self._until.pop((worker, h), None)
        self._map.discard(worker, held, self._layer)


class Applied(enum.Enum):
    """What `KVIndex.apply` did with an event."""

    APPLIED = "applied"  # the worker's next event, now in the index
    STALE = (
        "stale"  # not newer than the last applied (a duplicate, or covered by a snapshot): ignored
    )
    GAP = "gap"  # an event is missing before this one: held back; resync the worker
    HELD = "held"  # the worker already awaits a resync: held back, no new resync needed


@dataclass(slots=True)
class _Stream:
    """One worker's position in its event stream."""

    last_id: int = 0  # the last event applied (or the snapshot's id)
    awaiting_resync: bool = False
    held: dict[int, KVEvent] = field(default_factory=dict)  # id -> event, while awaiting


class KVIndex:
    """Every worker's KV blocks, from their KV events and snapshots, per medium
    (a stored or removed event names its medium; a snapshot lists the device's
    blocks and each lower medium's), and with `predicted_ttl` > 0 the blocks
    the router predicts (`predict`).

    A predicted block is the worker's until its events name it on the device
    — a stored event makes it real, a removal drops it, and so does a cleared cache or a snapshot that holds it — or until
    `predicted_ttl` seconds on `clock` have passed, or the worker leaves. It
    counts as a device block (`Overlap.predicted`): the worker will have
    computed it.

    Events come late, so a removal may be older than a prediction: the block
    was evicted, then a request sent there computed it again. Such a removal
    must not drop the prediction (the next request of the prefix would go
    elsewhere, and compute it once more). The events are in order, so a
    stored event that confirms a prediction first made at t says the
    worker's stream has caught up with the requests sent to it by t; a
    removal drops only the predictions last made by then, the younger ones
    wait for their own confirmation, the TTL, or a removal after it.

    A worker id names one worker *instance*: a restarted worker numbers its
    events from 1 again, so it must come back under a new id (or be removed
    and resynced), or all its events would look stale.
    """

    def __init__(
        self,
        block_size: int,
        predicted_ttl: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`predicted_ttl`: seconds a predicted block counts unconfirmed (0:
        nothing is predicted). `clock` must not go backwards."""
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        if not 0 <= predicted_ttl < float("inf"):
            raise ValueError(f"predicted_ttl must be a finite number >= 0, got {predicted_ttl}")
        self.block_size = block_size
        self.predicted_ttl = predicted_ttl
        self.clock = clock
        self._map = PrefixMap(LAYERS)
        self._streams: dict[WorkerId, _Stream] = {}
        self._predicted = _Expiring(self._map, PREDICTED, predicted_ttl)
        # per worker: predictions made by then are older than its events' news
        self._caught_up: dict[WorkerId, float] = {}

    def __len__(self) -> int:
        """Distinct block hashes held by any worker on the device."""
        return len(self._map)

    @property
    def workers(self) -> list[WorkerId]:
        return list(self._streams)

    def num_blocks(self, worker: WorkerId, medium: Medium = "device") -> int:
        return self._map.num_blocks(worker, LAYER_OF_MEDIUM[medium])

    def blocks_of(self, worker: WorkerId, medium: Medium = "device") -> set[int]:
        return self._map.blocks_of(worker, LAYER_OF_MEDIUM[medium])

    def predicted_of(self, worker: WorkerId) -> set[int]:
        """The worker's predicted blocks (expired ones may linger until the
        next `expire`, `predict`, `overlaps` or `matches`)."""
        return self._map.blocks_of(worker, PREDICTED)

    def predict(
        self, worker: WorkerId, block_hashes: Sequence[int], now: float | None = None
    ) -> int:
        """A request with this prompt was sent to the worker: every block of
        the prompt is predicted there for `predicted_ttl` seconds (a later
        prediction refreshes that) — those it lacks it computes or brings up,
        and those it holds it keeps in use, whatever late removal of theirs
        is on its way; how many it lacks on its device. Nothing with a TTL
        of 0."""
        if not self.predicted_ttl:
            return 0
        self._map.add_worker(worker)
        self._predicted.record(worker, block_hashes, self.clock() if now is None else now)
        return len(self._map.missing(worker, block_hashes, DEVICE))

    def expire(self, now: float | None = None) -> int:
        """Drop the predictions whose TTL has run out; how many were dropped."""
        if not self._predicted:
            return 0
        return self._predicted.expire(self.clock() if now is None else now)

    def last_event_id(self, worker: WorkerId) -> int | None:
        """The last event id applied for the worker (None: never heard of it)."""
        stream = self._streams.get(worker)
        return None if stream is None else stream.last_id

    def awaiting_resync(self, worker: WorkerId) -> bool:
        stream = self._streams.get(worker)
        return stream is not None and stream.awaiting_resync

    def apply(self, worker: WorkerId, event: KVEvent) -> Applied:
        """Apply the worker's next event, or say why not. An unknown worker starts
        at event id 0, so its first event must be 1 (else: GAP, resync it)."""
        stream = self._streams.get(worker)
        if stream is None:
            stream = self._streams[worker] = _Stream()
            self._map.add_worker(worker)
        eid = event.event_id
        if eid <= stream.last_id:
            return Applied.STALE
        if stream.awaiting_resync:
            self._hold(stream, event)
            return Applied.HELD
        if eid != stream.last_id + 1:
            stream.awaiting_resync = True
            self._hold(stream, event)
            return Applied.GAP
        self._apply(worker, event)
        stream.last_id = eid
        return Applied.APPLIED

    def resync(self, worker: WorkerId, snapshot: KVSnapshot) -> bool:
        """Replace the worker's blocks (every medium's) with the snapshot's,
        then apply the events held back since that follow it without a gap.
        False: the held events still show a gap after the snapshot, so
        resync again (a later one)."""
        self._check_block_size(snapshot.block_size, worker)
        stream = self._streams.get(worker)
        if stream is None:
            stream = self._streams[worker] = _Stream()
        pm = self._map
        pm.add_worker(worker)
        pm.clear(worker, REAL_LAYERS)
        device = [h for h, _parent in snapshot.blocks]
        pm.add(worker, device, DEVICE)
        self._predicted.drop(worker, device)
        for medium, blocks in snapshot.lower.items():
            layer = LAYER_OF_MEDIUM.get(medium)
            if layer is not None:
                hashes = [h for h, _parent in blocks]
                pm.add(worker, hashes, layer)
        stream.last_id = snapshot.event_id
        held, stream.held = stream.held, {}
        stream.awaiting_resync = False
        for eid in sorted(held):
            if eid > stream.last_id:
                self.apply(worker, held[eid])
        return not stream.awaiting_resync

    def remove_worker(self, worker: WorkerId) -> None:
        """Forget the worker, its blocks and its predictions (it left, or its
        lease expired)."""
        self._streams.pop(worker, None)
        self._caught_up.pop(worker, None)
        self._predicted.forget(worker)
        self._map.remove_worker(worker)

    def overlaps(
        self, block_hashes: Sequence[int], now: float | None = None
    ) -> dict[WorkerId, int]:
        """Per worker, how many leading blocks of the prompt's chain it holds,
        in any medium or predicted (workers holding none are left out)."""
        self.expire(now)
        return self._map.overlaps(block_hashes)

    def matches(
        self, block_hashes: Sequence[int], now: float | None = None
    ) -> dict[WorkerId, Overlap]:
        """Per worker, its leading run of the prompt's chain (in any medium, or
        predicted), each block counted where its best copy sits — a real device
        copy, else a prediction, else the host, else disk: so a block is
        credited the larger of what is real and what is predicted (workers
        holding none are left out)."""
        self.expire(now)
        pm = self._map
        active = pm.active_layers()
        if len(active) == 1:  # (the usual: only the device's blocks, or only predictions)
            make = _ONE_LAYER[active[0]]
            return {w: make(n) for w, n in pm.overlaps(block_hashes).items()}
        return {w: _overlap(c) for w, c in pm.matches(block_hashes).items()}

    def _apply(self, worker: WorkerId, event: KVEvent) -> None:
        if isinstance(event, BlocksStored):
            if event.block_size:
                self._check_block_size(event.block_size, worker)
            self._map.add(worker, event.block_hashes, LAYER_OF_MEDIUM[event.medium])
            if event.medium == "device":  # (one moved down may have left before the request)
                self._confirm(worker, event.block_hashes)  # real now
        elif isinstance(event, BlocksRemoved):
            self._map.discard(worker, event.block_hashes, LAYER_OF_MEDIUM[event.medium])
            if event.medium == "device":
                self._unpredict(worker, event.block_hashes)
        elif isinstance(event, AllCleared):  # every registration of every medium
            self._map.clear(worker, REAL_LAYERS)
            self._predicted.forget(worker)
        else:
            raise TypeError(f"not a KV event: {type(event).__name__}")

    def _confirm(self, worker: WorkerId, hashes: Sequence[int]) -> None:
        """Stored: the worker's events have caught up with the requests sent
        to it by when these blocks were first predicted, and their
        predictions are real now — but for one predicted again since (that
        request's news is still to come: a removal before it is none)."""
        predicted = self._predicted
        if not predicted:
            return
        caught_up = self._caught_up.get(worker, float("-inf"))
        made = [(h, predicted.recorded(worker, h)) for h in hashes]
        for _, when in made:
            if when is not None and when[0] > caught_up:
                caught_up = when[0]
        self._caught_up[worker] = caught_up
        predicted.drop(worker, [h for h, when in made if when is not None and when[1] <= caught_up])

    def _unpredict(self, worker: WorkerId, hashes: Sequence[int]) -> None:
        """Removed from the device: the predictions this removal is news for
        (last made before the worker's events caught up) go."""
        predicted = self._predicted
        if not predicted:
            return
        caught_up = self._caught_up.get(worker, float("-inf"))
        gone = []
        for h in hashes:
            made = predicted.recorded(worker, h)
            if made is not None and made[1] <= caught_up:
                gone.append(h)
        predicted.drop(worker, gone)

    def _check_block_size(self, block_size: int, worker: WorkerId) -> None:
        if block_size != self.block_size:
            raise ValueError(
                f"worker {worker!r} hashes blocks of {block_size} tokens; this index "
                f"(and the prompts it is asked about) uses {self.block_size}"
            )

    @staticmethod
    def _hold(stream: _Stream, event: KVEvent) -> None:
        if len(stream.held) < MAX_HELD_EVENTS:  # beyond that, the resync just retries
            stream.held[event.event_id] = event


def _overlap(counts: list[int]) -> Overlap:
    """A `PrefixMap.matches` count per layer of `KVIndex`'s map, as an Overlap."""
    return Overlap(counts[DEVICE], counts[HOST], counts[DISK], counts[PREDICTED])


# A run held in one layer of `KVIndex`'s map, as an Overlap.
_ONE_LAYER: dict[int, Callable[[int], Overlap]] = {
    DEVICE: lambda n: Overlap(n),
    HOST: lambda n: Overlap(host=n),
    DISK: lambda n: Overlap(disk=n),
    PREDICTED: lambda n: Overlap(predicted=n),
}


class ApproxKVIndex:
    """Blocks the router *believes* workers hold, for engines without KV events:
    the router records each decision's prompt blocks for the chosen worker, and
    a record expires `ttl` seconds after it was last made (as Dynamo's and
    llm-d's approximate routers do). `clock` must not go backwards."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be > 0 seconds, got {ttl}")
        self.ttl = ttl
        self.clock = clock
        self._map = PrefixMap()
        self._records = _Expiring(self._map, 0, ttl)

    def __len__(self) -> int:
        return len(self._map)

    @property
    def workers(self) -> list[WorkerId]:
        return self._map.workers

    def num_blocks(self, worker: WorkerId) -> int:
        return self._map.num_blocks(worker)

    def record(
        self, worker: WorkerId, block_hashes: Sequence[int], now: float | None = None
    ) -> None:
        """The worker was sent a prompt with these blocks: it holds them until
        `now + ttl` (a later record refreshes that)."""
        self._map.add_worker(worker)
        self._records.record(worker, block_hashes, self.clock() if now is None else now)

    def expire(self, now: float | None = None) -> int:
        """Drop the records whose TTL has run out; how many were dropped."""
        return self._records.expire(self.clock() if now is None else now)

    def remove_worker(self, worker: WorkerId) -> None:
        self._records.forget(worker)
        self._map.remove_worker(worker)

    def overlaps(
        self, block_hashes: Sequence[int], now: float | None = None
    ) -> dict[WorkerId, int]:
        self.expire(now)
        return self._map.overlaps(block_hashes)

    def matches(
        self, block_hashes: Sequence[int], now: float | None = None
    ) -> dict[WorkerId, Overlap]:
        """`overlaps` as `KVIndex.matches` says them: every block is one this
        router sent there, so each counts as predicted (credited as the device)."""
        return {w: Overlap(predicted=n) for w, n in self.overlaps(block_hashes, now).items()}
