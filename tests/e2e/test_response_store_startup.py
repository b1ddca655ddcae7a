"""Where a real server keeps stored responses (serve/response_store.py):
`rotor run` opens its SQLite file (the XDG state folder's by default,
`--response-store PATH` else) before it serves, a file it cannot open stops
startup in one line, and `rotor frontend` makes the JetStream bucket on its
NATS server when it connects."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import nats as nats_py

from rotor.runtime.nats import subjects

from support.cluster import cluster_procs, nats_server, start_frontend
from support.server import free_port, rotor_server


def test_rotor_run_keeps_them_in_the_state_folder_by_default(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with rotor_server(env={"XDG_STATE_HOME": str(state)}):
        assert (state / "rotor" / "responses.sqlite3").is_file()


def test_rotor_run_keeps_them_where_the_flag_says(tmp_path: Path) -> None:
    path = tmp_path / "mine" / "store.db"
    state = tmp_path / "state"
    with rotor_server(
        "--response-store", str(path), "--http-workers", "2", env={"XDG_STATE_HOME": str(state)}
    ):
        assert path.is_file()
    assert not state.exists()


def test_rotor_run_in_memory_writes_no_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with rotor_server("--response-store", "memory", env={"XDG_STATE_HOME": str(state)}):
        pass
    assert not state.exists()


def rotor_run(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rotor.cli", "run", *args, "--port", str(free_port())]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def test_a_file_that_cannot_be_opened_stops_startup(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = rotor_run("--response-store", str(blocker / "responses.sqlite3"))
    assert done.returncode == 2
    assert "--response-store: cannot open the response store" in done.stderr
    assert "a-file" in done.stderr


def test_rotor_run_has_no_bucket() -> None:
    done = rotor_run("--response-store", "nats")
    assert done.returncode == 2
    assert "the JetStream bucket is rotor frontend's" in done.stderr


def test_rotor_frontend_makes_the_bucket_with_its_flags() -> None:
    with nats_server() as nats, cluster_procs() as procs:
        frontend = start_frontend(
            nats, "--response-store-ttl", "3600", "--response-store-max-bytes", "1048576"
        )
        procs.append(frontend.proc)

        async def bucket() -> tuple[float | None, int | None]:
            nc = await nats_py.connect(nats.url)
            try:
                info = await nc.jetstream().stream_info(f"KV_{subjects.RESPONSES_BUCKET}")
                return info.config.max_age, info.config.max_bytes
            finally:
                await nc.close()

        # the frontend is live once it has connected, and it makes the bucket then
        assert asyncio.run(bucket()) == (3600, 1048576)
