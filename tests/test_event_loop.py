"""`event_loop.run`: the commands' coroutine on uvloop (installed with
uvicorn[standard]), its result returned and the loop closed after."""

from __future__ import annotations

import asyncio

import uvloop

from rotor import event_loop


def test_a_command_runs_on_uvloop_and_gets_its_result() -> None:
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> int:
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return 7

    assert event_loop.run(main()) == 7
    (loop,) = seen
    assert isinstance(loop, uvloop.Loop) and loop.is_closed()
