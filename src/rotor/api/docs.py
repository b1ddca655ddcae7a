"""`/docs` (Swagger UI) and `/redoc`, served with no CDN: their JavaScript and
CSS come from the `fastapi-offline` package (Swagger UI: Apache-2.0, ReDoc:
MIT, the package: MIT) and are served by rotor itself under `ASSETS`, so the
pages work on a machine with no way out. Like /openapi.json, they stay open
under --api-key (api/auth.py guards only /v1/*, /tokenize, /detokenize)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS = "/docs/assets"
_STATIC = Path(str(files("fastapi_offline") / "static"))


def register_docs(app: FastAPI) -> None:
    """Adds /docs, /redoc and their assets; `app` must be made with docs_url=None, redoc_url=None."""
    openapi_url = app.openapi_url or "/openapi.json"
    app.mount(ASSETS, StaticFiles(directory=_STATIC), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            # Swagger UI would otherwise fetch a badge from validator.swagger.io.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} API",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
