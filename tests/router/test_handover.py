"""The disaggregated handover's decisions (router/handover.py), each on its
own: where a request's prefill is placed (and counted), whether the
prefill's first token ends the answer, and the request its decode worker
continues (its prompt, its limits, the blocks to fetch)."""

from __future__ import annotations

import pytest

from rotor.model.card import ModelCard
from rotor.protocol.engine import (
    KV_TRANSFER,
    RESUME_FROM,
    EngineError,
    EngineImage,
    EngineOutput,
    EngineRequest,
    EngineState,
    StopParams,
)
from rotor.protocol.lease import Lease
from rotor.router import handover, migration
from rotor.router.disagg import DisaggPolicy
from rotor.router.modes import Pick, RoundRobin
from rotor.router.pool import Pool
from rotor.tracing import NO_SPAN

from support.link import FakeLink


def pool_of(*workers: str, **kw: object) -> Pool:
    pool = Pool(ModelCard("m"), FakeLink(), RoundRobin(), prefill_router=RoundRobin(), **kw)  # type: ignore[arg-type]
    for spec in workers:
        wid, _, role = spec.partition(":")
        state = EngineState(max_batched_tokens=100, pending_prefill_tokens=0)
        pool.upsert(Lease(wid, "m", "card", "compat", "h:1", state=state, role=role))  # type: ignore[arg-type]
    return pool


def test_an_aggregated_model_has_no_placement_to_count() -> None:
    pool = pool_of("a")
    assert handover.place(pool, EngineRequest("r", "m", [1] * 10), Pick("a"), NO_SPAN) is None
    assert not pool.stats.disagg


def test_a_placement_follows_the_policy_and_a_local_one_is_counted() -> None:
    request = EngineRequest("r", "m", [1] * 10)
    remote = pool_of("p:prefill", "d:decode", disagg=DisaggPolicy("always"))
    placed = handover.place(remote, request, Pick("d"), NO_SPAN)
    assert placed is not None and (placed.where, placed.reason) == ("remote", "always")
    assert not remote.stats.disagg  # a remote one is counted once its prefill is done
    short = pool_of("p:prefill", "d:decode", disagg=DisaggPolicy("isl", min_tokens=100))
    placed = handover.place(short, request, Pick("d", prefill_tokens=10), NO_SPAN)
    assert placed is not None and (placed.where, placed.reason) == ("local", "short")
    assert short.stats.disagg == {("local", "short"): 1}


def test_an_enforced_split_with_no_prefill_worker_is_refused_and_counted() -> None:
    pool = pool_of("d:decode", disagg=DisaggPolicy(enforce=True))
    with pytest.raises(EngineError, match="--enforce-disagg") as e:
        handover.place(pool, EngineRequest("r", "m", [1]), Pick("d"), NO_SPAN)
    assert e.value.cause == "no_worker"
    assert pool.stats.disagg == {("refused", "enforced"): 1}


@pytest.mark.parametrize(
    ("stop", "first", "ends"),
    [
        (StopParams(max_tokens=1), [7], True),  # its last token allowed
        (StopParams(max_tokens=5), [7], False),
        (StopParams(max_tokens=5, eos_token_ids=[7]), [7], True),  # the model's EOS
        (StopParams(max_tokens=5, eos_token_ids=[7], ignore_eos=True), [7], False),
        (StopParams(max_tokens=5, eos_token_ids=[7], min_tokens=2), [7], False),  # too soon
        (StopParams(max_tokens=5, stop_token_ids=[7]), [7], True),  # the user's stop id
        (StopParams(max_tokens=5, visible_stop_token_ids=[7]), [7], True),
    ],
)
def test_whether_the_first_token_ends_the_answer(
    stop: StopParams, first: list[int], ends: bool
) -> None:
    request = EngineRequest("r", "m", [1, 2], stop=stop)
    assert handover.ends_the_answer(request, EngineOutput(token_ids=first)) is ends


@pytest.mark.parametrize("enforce", [False, True])
def test_the_decode_request_continues_after_the_first_token(enforce: bool) -> None:
    request = EngineRequest("r", "m", [1, 2, 3], stop=StopParams(max_tokens=10, min_tokens=3))
    progress = migration.Progress()
    first = EngineOutput(token_ids=[7])
    progress.add(first)
    handed = handover.Handover(first, "p", {"transfer_id": "t1", "block_hashes": [5]}, 0.0)
    decode = handover.decode_request(request, progress, handed, enforce)
    assert decode.request_id == "r-d" and decode.token_ids == [1, 2, 3, 7]
    assert (decode.stop.max_tokens, decode.stop.min_tokens) == (9, 2)
    assert decode.annotations[RESUME_FROM] == 1
    transfer = decode.annotations[KV_TRANSFER]
    assert transfer["worker"] == "p" and transfer["transfer_id"] == "t1"
    assert transfer.get("enforce", False) is enforce
    assert handed.transfer_id == "t1"


@pytest.mark.parametrize("keep", [False, True])
def test_the_decode_request_carries_image_bytes_only_when_its_engine_needs_them(
    keep: bool,
) -> None:
    image = EngineImage("ab" * 32, 1, 2, 9, b"png-bytes")
    request = EngineRequest("r", "m", [1, 9, 9, 3], images=[image])
    progress = migration.Progress()
    first = EngineOutput(token_ids=[7])
    progress.add(first)
    handed = handover.Handover(first, "p", {"transfer_id": "t1", "block_hashes": [5]}, 0.0)
    decode = handover.decode_request(request, progress, handed, False, keep_images=keep)
    (sent,) = decode.images
    assert (sent.content_hash, sent.offset, sent.length, sent.placeholder) == ("ab" * 32, 1, 2, 9)
    assert sent.data == (b"png-bytes" if keep else None)
    assert request.images[0].data == b"png-bytes"  # a migration resends the original
