"""The mocker's prefix cache per cache_salt: a tenant's prompt is cached for
that tenant alone (another salt, or none, finds nothing), and its blocks
chain from the salted root, as the router hashes them."""

from __future__ import annotations

from rotor.protocol.engine import EngineOutput, StopParams
from rotor.protocol.kv import BlocksStored, KVEvent, block_hashes, chain_root

from support.mocker import PROMPT, TOK, MakeEngine, collect, request


def _cached(outs: list[EngineOutput]) -> int | None:
    return outs[0].cached_tokens


async def test_a_second_tenant_never_reports_the_first_tenant_s_cache(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine(block_size=4)
    full = len(TOK.encode(PROMPT)) // 4 * 4
    one = StopParams(max_tokens=1)
    assert _cached(await collect(engine, request(cache_salt="tenant-a", stop=one))) == 0
    # the same prompt, another tenant or none: nothing cached for it
    assert _cached(await collect(engine, request(cache_salt="tenant-b", stop=one))) == 0
    assert _cached(await collect(engine, request(stop=one))) == 0
    # the same tenant again: its prompt's full blocks are cached
    again = await collect(engine, request(cache_salt="tenant-a", stop=one))
    assert _cached(again) == full > 0


async def test_a_salted_request_s_blocks_chain_from_the_salted_root(
    make_engine: MakeEngine,
) -> None:
    engine = await make_engine(block_size=4)
    events: list[KVEvent] = []
    engine.kv_events(events.append)
    prompt = TOK.encode(PROMPT)
    await collect(engine, request(cache_salt="tenant-a", stop=StopParams(max_tokens=1)))
    stored = [h for e in events if isinstance(e, BlocksStored) for h in e.block_hashes]
    assert stored[: len(prompt) // 4] == block_hashes(prompt, 4, chain_root(None, "tenant-a"))
    assert not set(stored) & set(block_hashes(prompt, 4))  # none is the unsalted prompt's
