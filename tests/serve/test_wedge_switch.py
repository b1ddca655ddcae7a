"""The wedge switch on a worker's --system-port (serve/worker_status.py,
docs/cli.md#the-wedge-switch): `POST /debug/wedge {"seconds": S}`
wedges the mocker for S seconds (no body, or 0: until `DELETE`), `GET` says
how it stands, a bad body is a 400 naming `seconds`, and an engine without
the switch answers 501."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from rotor.engines.echo import EchoEngine
from rotor.engines.mocker import MockerEngine
from rotor.model.builtin import builtin_test_model
from rotor.serve.worker_status import register_wedge

from support.clock import FakeClock

CARD, TOK = builtin_test_model()


def client(engine: object) -> httpx.AsyncClient:
    app = FastAPI()
    register_wedge(app, engine)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://worker")


async def test_the_switch_wedges_for_a_time_or_until_switched_off() -> None:
    engine = MockerEngine(CARD, TOK)
    engine.step_loop.clock = clock = FakeClock(10.0)
    async with client(engine) as http:
        assert (await http.get("/debug/wedge")).json() == {"wedged": False, "seconds_left": None}
        r = await http.post("/debug/wedge", json={"seconds": 30})
        assert r.json() == {"wedged": True, "seconds_left": 30.0}
        clock.now += 12
        assert (await http.get("/debug/wedge")).json()["seconds_left"] == 18.0
        r = await http.post("/debug/wedge")  # no body: until switched off
        assert r.json() == {"wedged": True, "seconds_left": None} and engine.wedged() is not None
        assert (await http.delete("/debug/wedge")).json() == {"wedged": False, "seconds_left": None}
        assert engine.wedged() is None
        for bad in (b'{"seconds": -1}', b'{"seconds": "5"}', b"[5]", b"{", b'{"seconds": true}'):
            r = await http.post("/debug/wedge", content=bad)
            assert r.status_code == 400 and r.json()["error"]["param"] == "seconds", bad
        assert engine.wedged() is None and engine.step_loop.wedges == 2


async def test_an_engine_without_the_switch_answers_501() -> None:
    async with client(EchoEngine(CARD, TOK, 0)) as http:
        for method in ("GET", "POST", "DELETE"):
            r = await http.request(method, "/debug/wedge")
            assert r.status_code == 501 and "no wedge switch" in r.json()["error"]["message"]
