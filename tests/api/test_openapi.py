"""The document's security follows --api-key: declared only when a key is set,
and then only on the routes the key guards."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.responses import JSONResponse, Response

from rotor.api.openapi import DOCS, document, model, route
from rotor.protocol import ignored


def app() -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None)

    @app.get("/v1/models", **route("models"))
    async def models() -> Response:
        return JSONResponse({})

    @app.get("/live", **route("live"))
    async def live() -> Response:
        return JSONResponse({})

    return app


def test_no_key_no_security() -> None:
    doc = document(app(), None)
    assert "securitySchemes" not in doc["components"]
    assert all("security" not in op for item in doc["paths"].values() for op in item.values())


def test_a_key_guards_only_guarded_routes() -> None:
    doc = document(app(), "k")
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "x-api-key"}
    assert doc["paths"]["/v1/models"]["get"]["security"] == [{"bearer": []}, {"x-api-key": []}]
    assert "security" not in doc["paths"]["/live"]["get"]


def test_every_request_example_is_its_own_schemas_instance() -> None:
    """The example "Try it out" starts from passes the model that validates the route."""
    for name, doc in DOCS.items():
        if doc.request is not None:
            assert doc.example is not None, name
            model(doc.request).model_validate(doc.example)


def test_fields_that_do_something_come_before_ignored_ones() -> None:
    schemas = document(app(), None)["components"]["schemas"]
    why = {**ignored.COMMON, **ignored.CHAT}
    for name in ("ChatCompletionRequest", "CompletionRequest"):
        is_ignored = [field in why for field in schemas[name]["properties"]]
        assert any(is_ignored) and not all(is_ignored), name
        assert is_ignored == sorted(is_ignored), name
