"""The span of one HTTP request (tracing on): the root of the request's trace
on the frontend, or the child of the client's span when its headers carry a
W3C `traceparent`. Opened and ended by the access log's middleware
(api/access_log.py), which sees every response and the moment a stream is
over, so no layer of its own sits in front of a stream's writes. Probes are
not traced. What it says at the end: the status, the model, the token
counts (what observe.py and the access line count too); the time to the
first token is set by observe.py when it comes.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Match
from starlette.types import Scope

from rotor import tracing
from rotor.api.access_state import Access
from rotor.tracing import NO_SPAN, Span

_CONTEXT_HEADERS = (b"traceparent", b"tracestate")


def open_request_span(scope: Scope, request_id: str, probe: bool) -> Span:
    """The request's span (NO_SPAN when tracing is off, or for a probe)."""
    if probe or not tracing.enabled():
        return NO_SPAN
    headers = {
        k.decode("latin-1"): v.decode("latin-1")
        for k, v in scope["headers"]
        if k in _CONTEXT_HEADERS
    }
    method, path = scope["method"], scope["path"]
    attributes = {"http.request.method": method, "url.path": path}
    template = route_template(scope)
    name = method
    if template is not None:  # OpenTelemetry's name: the route, never the raw path
        attributes["http.route"] = template
        name = f"{method} {template}"
    return tracing.remote(name, headers, attributes, request_id=request_id)


def route_template(scope: Scope) -> str | None:
    """The template of the route the request will match (`/v1/models/{model_id:path}`),
    from the app's own routes (Starlette puts the app in the scope); None when
    none matches (a 404)."""
    app = scope.get("app")
    if not isinstance(app, Starlette):
        return None
    partial = None
    for route in app.router.routes:
        path = getattr(route, "path", None)  # every route but a Host's has its template
        if not isinstance(path, str):
            continue
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return path
        if match is Match.PARTIAL and partial is None:  # the path, with another method: a 405
            partial = path
    return partial


def end_request_span(span: Span, status: int, access: Access, gone: bool) -> None:
    """What the response came to, and the span's end."""
    if not span.recording:
        return
    attributes: dict[str, str | int | bool | None] = {"http.response.status_code": status}
    resp = access.response
    if resp is not None:
        usage = resp.usage
        attributes["gen_ai.request.model"] = resp.model
        attributes["gen_ai.response.id"] = resp.id
        attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
        attributes["rotor.cached_tokens"] = usage.cached_tokens
        attributes["rotor.choices"] = resp.n
    elif access.model is not None:
        attributes["gen_ai.request.model"] = access.model
    if gone:
        attributes["rotor.client_disconnected"] = True
    span.set(attributes)
    if status >= 500:
        span.fail(f"HTTP {status}")
    span.end()


def first_token(span: Span, seconds: float) -> None:
    """The first generated piece reached the frontend, `seconds` after the
    route began (observe.py's time to first token)."""
    if span.recording:
        span.set({"rotor.ttft_ms": round(seconds * 1000, 3)})
        span.event("first_token")
