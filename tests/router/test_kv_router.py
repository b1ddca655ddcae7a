"""`--router kv`'s decisions (router/kv.py) on leases and a fake clock: the
response headers (`x-rotor-kv-overlap` the blocks, `x-rotor-kv-tiers` where
they sit), the prefill estimate, predicted routing — a prefix's second request
goes to the first one's worker before its KV events come, unlike with
`--router-predicted-ttl 0` — its entries confirmed, expired and dropped with
a worker that leaves the pool, the counts for /metrics and the route span's
attributes."""

from __future__ import annotations

from rotor.model.card import ModelCard
from rotor.protocol.engine import EngineRequest
from rotor.protocol.kv import BlocksStored, block_hashes
from rotor.router.kv import KVRouter
from rotor.router.kv_cost import KVCost
from rotor.router.kv_index import Overlap
from rotor.router.modes import LocalLoad
from rotor.router.pool import Pool
from rotor.router.spans import pick_attributes

from support.clock import FakeClock
from support.workers import FakeInbox, lease

BS = 4
PROMPT = list(range(3, 43))  # 10 full blocks
HASHES = block_hashes(PROMPT, BS)
WORKERS = [lease("a"), lease("b")]
# a decodes the first request (its prefill done): 10 blocks of KV in use
BUSY_A = [
    lease("a", kv_blocks_total=100, kv_blocks_free=90),
    lease("b", kv_blocks_total=100, kv_blocks_free=100),
]


def router(predicted_ttl: float = 2.0) -> tuple[KVRouter, FakeClock]:
    clock = FakeClock(10.0)
    return KVRouter(BS, KVCost(BS), predicted_ttl=predicted_ttl, clock=clock), clock


def ask(
    kv: KVRouter, rid: str, tokens: list[int] = PROMPT, workers: list | None = None
) -> tuple[str, dict[str, str]]:
    """One decision, among idle workers unless `workers` says otherwise."""
    pick = kv.choose(workers or WORKERS, EngineRequest(rid, "m", tokens), LocalLoad())
    return pick.worker_id, pick.headers


def test_a_second_request_follows_the_first_before_its_events_come() -> None:
    kv, _ = router()
    first, headers = ask(kv, "r1")
    assert (first, headers["x-rotor-kv-overlap"]) == ("a", "0")  # a tie: the smaller id
    assert headers["x-rotor-kv-tiers"] == "device=0,host=0,disk=0,predicted=0"
    # a decodes it; no KV event of it yet: its blocks are predicted on a, and
    # outweigh a's load (4 * 0 + 10 against b's 4 * 10 + 0)
    second, headers = ask(kv, "r2", PROMPT + [99, 98], BUSY_A)
    assert second == "a"
    assert headers["x-rotor-kv-overlap"] == "10"
    assert headers["x-rotor-kv-tiers"] == "device=0,host=0,disk=0,predicted=10"
    assert kv.stats.tier_blocks == {("a", "predicted"): 10}
    assert kv.stats.hits == {"a": 1} and kv.stats.prompt_blocks == {"a": 10 + 10}


def test_without_predictions_the_second_request_goes_elsewhere() -> None:
    kv, _ = router(predicted_ttl=0)
    assert ask(kv, "r1")[0] == "a"
    second, headers = ask(kv, "r2", PROMPT, BUSY_A)
    assert second == "b"  # nothing known of a's cache, and a is busier (4 * 10 + 10 > 40)
    assert headers["x-rotor-kv-overlap"] == "0"


def test_the_events_confirm_the_prediction_and_the_rest_expires() -> None:
    kv, clock = router(predicted_ttl=2.0)
    ask(kv, "r1")
    assert kv.index is not None
    kv.index.apply("a", BlocksStored(1, HASHES[:6], None, BS))  # a's events, late
    _, headers = ask(kv, "r2")
    assert headers["x-rotor-kv-tiers"] == "device=6,host=0,disk=0,predicted=4"
    clock.now = 12.0  # r2 refreshed a's predictions at 10.0: until 12.0
    _, headers = ask(kv, "r3")
    assert headers["x-rotor-kv-tiers"] == "device=6,host=0,disk=0,predicted=0"
    assert kv.index.predicted_of("a") == set(HASHES)  # r3's own (its whole prompt), until 14.0


def test_a_worker_leaving_the_pool_takes_its_predictions() -> None:
    kv, _ = router()
    pool = Pool(ModelCard("m"), FakeInbox(), kv)  # type: ignore[arg-type]
    for w in WORKERS:
        pool.upsert(w)
    request = EngineRequest("r1", "m", PROMPT)
    assert pool.choose(request, set()).worker_id == "a"
    assert kv.overlaps(HASHES) == {"a": 10}
    pool.remove("a")
    assert kv.overlaps(HASHES) == {}
    assert kv.index is not None and kv.index.predicted_of("a") == set()


def test_the_prefill_estimate_weighs_what_a_lower_medium_holds() -> None:
    kv, _ = router(predicted_ttl=0)
    assert kv.index is not None
    kv.index.apply("a", BlocksStored(1, HASHES[:2], None, BS))
    kv.index.apply("a", BlocksStored(2, HASHES[2:6], HASHES[1], BS, "host"))
    kv.index.apply("a", BlocksStored(3, HASHES[6:10], HASHES[5], BS, "disk"))
    request = EngineRequest("r", "m", PROMPT + [7, 7])  # 42 tokens
    pick = kv.choose(WORKERS, request, LocalLoad())
    assert pick.worker_id == "a"
    assert pick.headers["x-rotor-kv-overlap"] == "10"
    assert pick.headers["x-rotor-kv-tiers"] == "device=2,host=4,disk=4,predicted=0"
    # credited 2 + 0.75 * 4 + 0.25 * 4 = 6 blocks: 42 - 24 tokens to compute or bring up
    assert pick.prefill_tokens == 18
    attributes = pick_attributes(kv, WORKERS, request, pick)
    assert attributes["rotor.kv.overlap_blocks"] == 10
    assert attributes["rotor.kv.prefill_tokens"] == 18
    assert [attributes[f"rotor.kv.{m}_blocks"] for m in ("device", "host", "disk")] == [2, 4, 4]
    assert attributes["rotor.kv.predicted_blocks"] == 0
    assert kv.stats.tier_blocks == {("a", "device"): 2, ("a", "host"): 4, ("a", "disk"): 4}


def test_without_events_every_match_is_predicted() -> None:
    clock = FakeClock(0.0)
    kv = KVRouter(BS, KVCost(BS), approx_ttl=60.0, clock=clock)
    ask(kv, "r1")
    _, headers = ask(kv, "r2")
    assert headers["x-rotor-kv-tiers"] == "device=0,host=0,disk=0,predicted=10"
    assert kv.matches(HASHES) == {"a": Overlap(predicted=10)}
