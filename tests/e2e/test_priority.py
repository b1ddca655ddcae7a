"""`priority` end to end through `rotor run out=mocker`: refused by name where
the engine schedules first come, first served, taken (and acted on) under
`--scheduling-policy priority`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from support.server import Server, rotor_server

pytestmark = pytest.mark.e2e

ASK = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fcfs() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0") as srv:
        yield srv


@pytest.fixture(scope="module")
def by_priority() -> Iterator[Server]:
    # one sequence at a time at 10 ms a step: a queue forms behind the first
    with rotor_server(
        "out=mocker", "--speedup-ratio", "1", "--scheduling-policy", "priority",
        "--max-num-seqs", "1",
    ) as srv:  # fmt: skip
        yield srv


def test_a_nonzero_priority_to_an_fcfs_engine_is_a_400_naming_the_flag(fcfs: Server) -> None:
    client = openai.OpenAI(base_url=fcfs.url + "/v1", api_key="x")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="mock-model", messages=ASK, max_tokens=2, extra_body={"priority": -1}
        )
    body = e.value.body
    assert isinstance(body, dict)
    assert body["param"] == "priority"
    assert "--scheduling-policy priority" in body["message"]
    r = httpx.post(
        fcfs.url + "/v1/completions",
        json={"model": "mock-model", "prompt": "x", "max_tokens": 2, "priority": 0},
        timeout=10,
    )
    assert r.status_code == 200, r.text  # 0 is every request's default, as in vLLM


def test_under_the_priority_policy_the_high_priority_request_overtakes(
    by_priority: Server,
) -> None:
    """Behind a long request holding the only slot, a low-priority request
    sent first and a high-priority one sent after it: the high one finishes
    first (fcfs would run them in arrival order)."""

    async def run() -> list[str]:
        done: list[str] = []
        async with httpx.AsyncClient(base_url=by_priority.url, timeout=30) as client:

            async def ask(name: str, priority: int, tokens: int) -> None:
                r = await client.post(
                    "/v1/completions",
                    json={
                        "model": "mock-model",
                        "prompt": name,
                        "max_tokens": tokens,
                        "ignore_eos": True,
                        "priority": priority,
                    },
                )
                assert r.status_code == 200, r.text
                done.append(name)

            blocker = asyncio.create_task(ask("blocker", 0, 150))  # ~1.5 s of steps
            await asyncio.sleep(0.1)
            low = asyncio.create_task(ask("low", 10, 2))
            await asyncio.sleep(0.05)
            high = asyncio.create_task(ask("high", 0, 2))
            await asyncio.gather(blocker, low, high)
        return done

    started = time.monotonic()
    assert asyncio.run(run()) == ["blocker", "high", "low"]
    assert time.monotonic() - started < 10
