"""The mocker's LoRA adapters: loaded after their simulated load time, each
changing the seeded output deterministically (a script plays as written),
its KV blocks chained from the adapter's root, and an adapter unloaded while
in use kept until its last request ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rotor.engines.mocker import MockerEngine
from rotor.protocol.engine import EngineError, pulled
from rotor.protocol.kv import BlocksStored, KVEvent, block_hashes, lora_root

from support.adapters import write_adapter
from support.mocker import PROMPT, TOK, MakeEngine, collect, ids_of, request


@pytest.fixture
def adapter(tmp_path: Path) -> str:
    return str(write_adapter(tmp_path / "sql"))


async def test_loading_spends_the_simulated_load_time(
    make_engine: MakeEngine, adapter: str
) -> None:
    engine = await make_engine(speedup_ratio=2.0, lora_load_ms=80.0)
    slept: list[float] = []

    async def record(seconds: float) -> None:
        slept.append(seconds)

    engine.sleep = record
    await engine.load_adapter("sql", adapter)
    assert slept == [pytest.approx(0.04)]  # 80 ms / 2
    assert engine.adapters() == {"sql": adapter}


async def test_an_adapter_changes_seeded_output_the_same_way_each_time(
    make_engine: MakeEngine, adapter: str, tmp_path: Path
) -> None:
    engine = await make_engine()
    await engine.load_adapter("sql", adapter)
    await engine.load_adapter("chat", str(write_adapter(tmp_path / "chat")))

    async def tokens(lora: str | None) -> list[int]:
        req = request(sampling=_seeded(), lora=lora)
        req.stop.max_tokens, req.stop.ignore_eos = 12, True
        return ids_of(await collect(engine, req))

    base, sql, chat = await tokens(None), await tokens("sql"), await tokens("chat")
    assert sql == await tokens("sql") and base == await tokens(None)
    assert len({tuple(base), tuple(sql), tuple(chat)}) == 3


async def test_a_script_plays_as_written_under_an_adapter(
    make_engine: MakeEngine, adapter: str
) -> None:
    engine = await make_engine()
    await engine.load_adapter("sql", adapter)
    outs = await collect(engine, request({"output": "SELECT 1", "end": "stop"}, lora="sql"))
    assert TOK.decode(ids_of(outs)) == "SELECT 1"


async def test_an_adapter_s_blocks_chain_from_its_root(
    make_engine: MakeEngine, adapter: str
) -> None:
    engine = await make_engine(block_size=4)
    await engine.load_adapter("sql", adapter)
    events: list[KVEvent] = []
    engine.kv_events(events.append)
    prompt = TOK.encode(PROMPT)
    await collect(engine, request(lora="sql", stop=_one_token()))
    stored = [h for e in events if isinstance(e, BlocksStored) for h in e.block_hashes]
    first = next(e for e in events if isinstance(e, BlocksStored))
    assert first.parent_hash is None  # a first block: its root is in its hash
    assert stored[: len(prompt) // 4] == block_hashes(prompt, 4, lora_root("sql"))
    assert not set(stored) & set(block_hashes(prompt, 4))  # none is the base model's


async def test_unknown_and_unloaded_adapters_are_refused(
    make_engine: MakeEngine, adapter: str
) -> None:
    engine = await make_engine()
    with pytest.raises(EngineError, match="'sql' is not loaded") as e:
        await collect(engine, request(lora="sql"))
    assert (e.value.kind, e.value.param) == ("refused", "model")
    with pytest.raises(EngineError, match="no adapter 'sql'") as e:
        await engine.unload_adapter("sql")
    assert e.value.param == "lora_name"
    await engine.load_adapter("sql", adapter)
    with pytest.raises(EngineError, match="already loaded"):
        await engine.load_adapter("sql", adapter)
    with pytest.raises(EngineError, match="no such directory") as e:
        await engine.load_adapter("other", adapter + "-missing")
    assert e.value.param == "lora_path"


async def test_unloading_an_adapter_in_use_lets_its_request_finish(
    make_engine: MakeEngine, adapter: str
) -> None:
    engine: MockerEngine = await make_engine()
    await engine.load_adapter("sql", adapter)
    req = request(lora="sql", sampling=_seeded())
    req.stop.max_tokens, req.stop.ignore_eos = 40, True
    stream = pulled(engine.generate(req))
    first = await anext(stream)
    await engine.unload_adapter("sql")
    assert engine.adapters() == {}
    assert engine.adapter_book.leaving() == ["sql"]  # kept for the running request
    with pytest.raises(EngineError, match="not loaded"):
        await collect(engine, request(lora="sql"))
    rest = [out async for out in stream]
    assert rest[-1].finish == "length"
    assert len(first.token_ids) + sum(len(o.token_ids) for o in rest) == 40
    await asyncio.sleep(0)
    assert engine.adapter_book.leaving() == []  # gone with its last request


def _seeded():  # noqa: ANN202 - SamplingParams
    from rotor.protocol.engine import SamplingParams

    return SamplingParams(seed=3)


def _one_token():  # noqa: ANN202 - StopParams
    from rotor.protocol.engine import StopParams

    return StopParams(max_tokens=1)
