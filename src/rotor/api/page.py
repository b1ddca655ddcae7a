"""GET /: the chat page, one self-contained HTML file shipped in the package
(static/chat.html: inline CSS and JS, no build step, nothing fetched from
elsewhere). It is read once at registration and served from memory; its
Content-Security-Policy allows only its own inline script and style and
requests to this server, so the page cannot load or send anything elsewhere."""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

from fastapi import FastAPI
from starlette.responses import Response

_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


def _csp(html: bytes) -> str:
    """The policy: the page's inline script by its hash, so no other script runs."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode() + "'"
        for body in _SCRIPT.findall(html)
    )
    return (
        "default-src 'none'; "
        f"script-src {hashes}; "
        "style-src 'unsafe-inline'; "
        "connect-src 'self'; "
        "img-src data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def register_page(app: FastAPI) -> None:
    html = files("rotor.api").joinpath("static/chat.html").read_bytes()
    headers = {"Content-Security-Policy": _csp(html), "Cache-Control": "no-cache"}

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def chat_page() -> Response:
        return Response(html, media_type="text/html; charset=utf-8", headers=headers)
