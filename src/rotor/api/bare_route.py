"""Routes called without FastAPI's per-request machinery.

rotor's endpoints read and validate their own bodies (api/body.py), so of
FastAPI they use only the route table and the OpenAPI document. Its request
handler still runs for every request — dependency solving, two exit stacks,
endpoint bookkeeping — about 70 µs, a tenth of the time to first token at one
stream. `BareRoute` keeps everything FastAPI knows about a route (the document
lists it as before) but calls an endpoint that takes only the request (or
nothing) straight from Starlette's request/response wrapper, which still
routes exceptions to the app's handlers. Any other endpoint keeps FastAPI's
handler.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response


class BareRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if inspect.iscoroutinefunction(endpoint) and _takes_only_the_request(self.dependant):
            self.app = request_response(_call_with_request(endpoint, self.dependant))


def _takes_only_the_request(d: Dependant) -> bool:
    return not (
        d.path_params
        or d.query_params
        or d.header_params
        or d.cookie_params
        or d.body_params
        or d.dependencies
        or d.websocket_param_name
        or d.http_connection_param_name
        or d.response_param_name
        or d.background_tasks_param_name
        or d.security_scopes_param_name
    )


def _call_with_request(
    endpoint: Callable[..., Awaitable[Response]], d: Dependant
) -> Callable[[Request], Awaitable[Response]]:
    name = d.request_param_name
    if name is None:

        async def without(request: Request) -> Response:
            return await endpoint()

        return without

    async def with_request(request: Request) -> Response:
        return await endpoint(**{name: request})

    return with_request
