"""A whole system in one process: a frontend and the in-process engines it
was built with. Whoever builds it (`rotor run`, a test) starts and stops it;
the frontend itself never starts an engine (a remote worker is not its to
start)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rotor.config import HTTPConfig
from rotor.engines.base import Adapters, AdapterSource, Engine, Lifecycle
from rotor.frontend import Frontend
from rotor.pipeline.images import ImageLoader
from rotor.pipeline.preparer import Preparer
from rotor.pipeline.served import ServedModel

if TYPE_CHECKING:
    from fastapi import FastAPI

    from rotor.api.lora import LoraControl


@dataclass
class System:
    frontend: Frontend
    engines: list[Engine] = field(default_factory=list)
    # `--lora NAME=DIR`: loaded into the (one) engine once it has started
    adapters: list[tuple[str, str]] = field(default_factory=list)
    _started: list[Lifecycle] = field(default_factory=list, init=False, repr=False)

    @classmethod
    def local(
        cls,
        engine: Engine,
        model: ServedModel,
        reasoning_field: str = "reasoning_content",
        preparer: Preparer | None = None,
        adapters: list[tuple[str, str]] | None = None,
    ) -> System:
        """One model served by one in-process engine (`rotor run`), with the
        LoRA adapters it loads once started."""
        frontend = Frontend(reasoning_field=reasoning_field, preparer=preparer or Preparer())
        frontend.registry.add(model, engine)
        return cls(frontend, [engine], list(adapters or []))

    async def start(self) -> None:
        for engine in self.engines:
            if isinstance(engine, Lifecycle):
                await engine.start()
                self._started.append(engine)
        for name, path in self.adapters:
            await load_startup_adapter(self.engines[0], name, path)

    async def stop(self) -> None:
        """Stop what started (startup may have been cut short)."""
        while self._started:
            await self._started.pop().stop()

    def app(self, http: HTTPConfig) -> FastAPI:
        """The HTTP API over this system: its engines start and stop with the
        server, and the garbage collector settles once they have started.
        Tracing (when asked for) starts first and sends its last spans last.
        Stored responses live in `http.response_store` (a SQLite file by
        default, serve/response_store.py), closed after the engines stop."""
        from rotor.api.app import create_app
        from rotor.serve.gc import settle_after_startup
        from rotor.serve.kserve import kserve_options
        from rotor.serve.request_log import open_request_log
        from rotor.serve.response_store import build_response_store
        from rotor.tracing import Exporting

        traces = Exporting(http.otlp_endpoint, "rotor")
        engine = self.engines[0] if self.engines else None
        self.frontend.images = ImageLoader.build(http.media)
        responses = build_response_store(http.response_store, "file")
        return create_app(
            self.frontend,
            api_key=http.api_keys or None,
            response_store=responses,
            on_startup=[traces.start, self.start, settle_after_startup],
            on_shutdown=[self.stop, responses.close, self.frontend.images.aclose, traces.stop],
            max_queued=http.max_queued_requests,
            max_waiting=http.max_waiting_requests,
            request_log=open_request_log(http),
            loras=lora_control(self.frontend, engine),
            kserve=kserve_options(http),
        )


def lora_control(frontend: Frontend, engine: Engine | None) -> LoraControl | None:
    """What `/v1/loras` acts on: the one model's engine, if it loads adapters."""
    from rotor.api.lora import LoraControl

    entries = frontend.registry.entries()
    if len(entries) != 1:
        return None
    # (`engine is not None` first: mypy cannot narrow an Optional to a protocol at once)
    loader = engine if engine is not None and isinstance(engine, Adapters) else None
    why = (
        "this server loads LoRA adapters only at start (--lora NAME=DIR; with"
        " --http-workers the engine runs in a process of its own)"
        if engine is not None and isinstance(engine, AdapterSource)
        else f"the {entries[0].model.name!r} engine cannot load LoRA adapters"
    )
    return LoraControl(entries[0].model.name, loader, why)


async def load_startup_adapter(engine: Engine, name: str, path: str) -> None:
    """One `--lora NAME=DIR`; StartupError saying which and why when it cannot."""
    from rotor.protocol.engine import EngineError
    from rotor.serve.build import StartupError

    assert isinstance(engine, Adapters), "build.check_adapter_engine refuses the others"
    try:
        await engine.load_adapter(name, path)
    except EngineError as e:
        raise StartupError(f"--lora {name}={path}: {e.message}") from None
