"""`/v1/loras`: load, list and unload LoRA adapters while the engine runs.

`POST /v1/loras {"lora_name", "lora_path"}` loads one, `GET /v1/loras` lists
them, `DELETE /v1/loras/NAME` unloads one (its running requests finish
first). vLLM's own routes (`POST /v1/load_lora_adapter`,
`/v1/unload_lora_adapter`) do the same, for clients written against vLLM.
`rotor run`'s API serves them (behind `--api-key`, like every /v1 route), and
so does a worker's `--system-port`, whose lease then tells frontends.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from rotor.api.body import read_request
from rotor.api.errors import APIError, error_response
from rotor.api.openapi import route
from rotor.protocol.engine import EngineError
from rotor.protocol.lora import LoadLoraRequest, UnloadLoraRequest

MAX_BODY = 64 * 1024  # a name and a path


class Adapters(Protocol):
    """engines/base.Adapters as these routes use it."""

    def adapters(self) -> dict[str, str]: ...

    async def load_adapter(self, name: str, path: str) -> None: ...

    async def unload_adapter(self, name: str) -> None: ...


class LoraControl:
    """What the routes act on: the model's name (each adapter's `parent`), the
    engine that loads adapters (None: this server cannot, and says why), and
    who to tell when the set changed (a worker renews its lease)."""

    def __init__(
        self,
        parent: str,
        engine: Adapters | None,
        why_not: str = "this engine cannot load LoRA adapters",
        changed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.parent = parent
        self.engine = engine
        self.why_not = why_not
        self.changed = changed

    def listing(self) -> dict[str, Any]:
        held = self.engine.adapters() if self.engine is not None else {}
        return {"object": "list", "data": [self._entry(n, p) for n, p in held.items()]}

    async def load(self, req: LoadLoraRequest) -> dict[str, Any]:
        engine = self._engine()
        if req.lora_name == self.parent:
            raise APIError(400, f"lora_name {req.lora_name!r} is the model's own name", "lora_name")
        await self._act(engine.load_adapter(req.lora_name, req.lora_path))
        return self._entry(req.lora_name, req.lora_path)

    async def unload(self, name: str) -> dict[str, Any]:
        engine = self._engine()
        if name not in engine.adapters():
            raise APIError(404, f"no LoRA adapter {name!r} is loaded", "lora_name")
        await self._act(engine.unload_adapter(name))
        return {"id": name, "object": "lora", "deleted": True}

    def _engine(self) -> Adapters:
        if self.engine is None:
            raise APIError(400, self.why_not, "lora_name")
        return self.engine

    async def _act(self, work: Awaitable[None]) -> None:
        try:
            await work
        except EngineError as e:
            status = 503 if e.kind == "unavailable" else 400 if e.kind == "refused" else 500
            message = e.message if status != 500 else "internal error"
            raise APIError(status, message, e.param) from None
        if self.changed is not None:
            await self.changed()

    def _entry(self, name: str, path: str) -> dict[str, Any]:
        return {"id": name, "object": "lora", "path": path, "parent": self.parent}


def register_lora(app: FastAPI, control: LoraControl) -> None:
    """The routes on `app` (rotor run's API, or a worker's status app, which
    has no error handlers of its own: each route answers its errors)."""

    @app.get("/v1/loras", **route("loras"))
    async def list_loras() -> Response:
        return JSONResponse(control.listing())

    @app.post("/v1/loras", **route("load_lora"))
    @_answered
    async def load_lora(request: Request) -> Response:
        req = await read_request(request, LoadLoraRequest, MAX_BODY)
        return JSONResponse(await control.load(req))

    @app.delete("/v1/loras/{name:path}", **route("unload_lora"))
    @_answered
    async def unload_lora(name: str) -> Response:
        return JSONResponse(await control.unload(name))

    @app.post("/v1/load_lora_adapter", **route("vllm_load_lora"))
    @_answered
    async def vllm_load(request: Request) -> Response:
        req = await read_request(request, LoadLoraRequest, MAX_BODY)
        entry = await control.load(req)
        return Response(f"Success: LoRA adapter '{entry['id']}' added successfully.")

    @app.post("/v1/unload_lora_adapter", **route("vllm_unload_lora"))
    @_answered
    async def vllm_unload(request: Request) -> Response:
        req = await read_request(request, UnloadLoraRequest, MAX_BODY)
        await control.unload(req.lora_name)
        return Response(f"Success: LoRA adapter '{req.lora_name}' removed successfully.")


def _answered(route: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    """The route's APIError as its error response (a worker's status app has
    no error handlers of its own); FastAPI still sees the route's parameters."""

    @functools.wraps(route)
    async def answered(*args: Any, **kwargs: Any) -> Response:
        try:
            return await route(*args, **kwargs)
        except APIError as e:
            return error_response(e.status, e.message, e.param, e.headers)

    return answered
