"""`rotor run`: a whole system in one process, and the chosen input on it."""

from __future__ import annotations

import asyncio
import logging

from rotor import logs
from rotor.config import HTTPConfig, RunConfig
from rotor.serve.build import StartupError, build_system, check_limits
from rotor.serve.http import http_server
from rotor.serve.response_store import check_response_store
from rotor.serve.system import System


def run(config: RunConfig) -> int:
    logs.setup(config.log_level, config.log_format)
    try:
        check_limits(config)
        if config.input == "http":
            check_response_store(config.http.response_store, "file")
        system = build_system(config)
    except StartupError as e:
        logs.say(str(e), logging.ERROR)
        return 2
    if config.input == "http":
        return serve(system, config.http, config.log_level)
    if config.input == "text":
        from rotor.inputs.text import run_text

        return run_text(
            system, max_tokens=config.max_tokens, color=config.color, engine=config.engine.name
        )
    if config.input == "stdin":
        from rotor.inputs.stdin import run_stdin

        return asyncio.run(run_stdin(system, max_tokens=config.max_tokens, color=config.color))
    from rotor.inputs.batch import run_batch

    assert config.batch_file is not None
    return asyncio.run(
        run_batch(system, config.batch_file, config.output, max_tokens=config.max_tokens)
    )


def serve(system: System, http: HTTPConfig, log_level: str) -> int:
    """The HTTP API over `system`: in this process, or (`--http-workers N`) in
    N HTTP processes in front of this one's engine."""
    if http.http_workers != 1:
        from rotor.serve.http_processes import serve_http_processes
        from rotor.serve.processes import ProcessError

        try:
            return serve_http_processes(system, http, log_level)
        except ProcessError as e:
            logs.say(str(e), logging.ERROR)
            return 2

    app = system.app(http)
    names = ", ".join(repr(n) for n in system.frontend.registry.names())
    http_server(app, http, log_level, f"serving {names} on {{url}}").run()
    return 0
