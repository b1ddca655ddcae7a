"""The data path does each job once: a request's model is looked up once,
an Anthropic or Responses body is validated once (as its own API's
request, never again as the internal chat request), and the completion
tokens that usage reports are the ones the metrics count."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from rotor.engines.echo import EchoEngine
from rotor.frontend import ModelEntry, ModelRegistry
from rotor.model.builtin import builtin_test_model
from rotor.protocol.openai import ChatCompletionRequest
from rotor.serve.system import System

from support.app import app_of, system_over

MESSAGES = [{"role": "user", "content": "count these words"}]

ROUTES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": MESSAGES}),
    "completions": ("/v1/completions", {"prompt": "count these words"}),
    "messages": ("/v1/messages", {"messages": MESSAGES, "max_tokens": 50}),
    "responses": ("/v1/responses", {"input": "count these words"}),
}


class CountingRegistry(ModelRegistry):
    """The real registry, counting lookups."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def get(self, name: str | None) -> ModelEntry:
        self.lookups += 1
        return super().get(name)


@pytest.fixture
async def app() -> AsyncIterator[tuple[httpx.AsyncClient, System, CountingRegistry]]:
    card, tok = builtin_test_model()
    system = system_over(EchoEngine(card, tok, 0))
    registry = CountingRegistry()
    for entry in system.frontend.registry.entries():
        registry.add(entry.model, entry.engine)
    system.frontend.registry = registry  # before the app is made: it keeps the registry
    async with app_of(system) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rotor") as http:
            yield http, system, registry


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_looks_its_model_up_once(
    app: tuple[httpx.AsyncClient, System, CountingRegistry], route: str, stream: bool
) -> None:
    client, _, registry = app
    path, body = ROUTES[route]
    before = registry.lookups
    r = await client.post(path, json={"model": "mock-model", "stream": stream, **body})
    assert r.status_code == 200, r.text
    assert registry.lookups - before == 1


@pytest.mark.parametrize("route", ["messages", "responses"])
async def test_another_apis_body_is_validated_once(
    app: tuple[httpx.AsyncClient, System, CountingRegistry],
    route: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, _, _ = app
    validations: list[Any] = []
    real = ChatCompletionRequest.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type, *args: Any, **kwargs: Any) -> Any:
        validations.append(args)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(ChatCompletionRequest, "model_validate", classmethod(counting))
    path, body = ROUTES[route]
    r = await client.post(path, json={"model": "mock-model", **body})
    assert r.status_code == 200, r.text
    assert validations == []  # the chat model never sees it again
    chat = await client.post(ROUTES["chat"][0], json={"model": "mock-model", **ROUTES["chat"][1]})
    assert chat.status_code == 200 and len(validations) == 1  # (the counter counts)


def completion_counter(text: str) -> float:
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("rotor_completion_tokens_total{")
    )


async def test_usage_and_metrics_count_the_same_completion_tokens(
    app: tuple[httpx.AsyncClient, System, CountingRegistry],
) -> None:
    client, _, _ = app
    before = completion_counter((await client.get("/metrics")).text)
    r = await client.post(
        "/v1/chat/completions",
        json={"model": "mock-model", "messages": MESSAGES, "n": 3, "max_tokens": 4},
    )
    assert r.status_code == 200, r.text
    used = r.json()["usage"]["completion_tokens"]
    assert used == 3 * 4
    assert completion_counter((await client.get("/metrics")).text) - before == used
