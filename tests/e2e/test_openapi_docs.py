"""/openapi.json describes what a real server accepts and answers, and /docs
works offline.

One mocker server with --api-key: the request bodies the official SDKs send
validate against each route's documented requestBody schema (and the server
takes them), obviously wrong ones fail both, the answers the server really
gives validate against the documented 200 and error schemas, and the docs
pages, their assets and the document itself are open without a key and load
nothing from another origin.
"""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi

from support.adapters import write_adapter
from support.server import Server, rotor_server
from support.sse import data_events

KEY = "sk-docs-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
HELLO = [{"role": "user", "content": "Hello!"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "description": "a tool",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}},
        },
    }
]
# The mocker's built-in model reads <think> (qwen3) and <tool_call> (hermes).
THINK_AND_CALL = (
    '<think>hmm</think>Sure.<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
)

ROUTES = {
    ("post", "/v1/chat/completions"),
    ("post", "/v1/completions"),
    ("post", "/v1/responses"),
    ("get", "/v1/responses/{response_id}"),
    ("delete", "/v1/responses/{response_id}"),
    ("get", "/v1/responses/{response_id}/input_items"),
    ("post", "/v1/responses/{response_id}/cancel"),
    ("post", "/v1/embeddings"),
    ("post", "/v1/score"),
    ("post", "/score"),
    ("post", "/v1/rerank"),
    ("post", "/rerank"),
    ("post", "/v2/rerank"),
    ("post", "/v1/messages"),
    ("post", "/v1/messages/count_tokens"),
    ("post", "/tokenize"),
    ("post", "/detokenize"),
    ("get", "/v1/models"),
    ("get", "/v1/models/{model_id}"),
    ("get", "/v1/loras"),
    ("post", "/v1/loras"),
    ("delete", "/v1/loras/{name}"),
    ("post", "/v1/load_lora_adapter"),
    ("post", "/v1/unload_lora_adapter"),
    ("get", "/health"),
    ("get", "/live"),
    ("get", "/metrics"),
}

# POSTs that take no body
BODILESS = {"/v1/responses/{response_id}/cancel"}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # a step at a time: every chunk shape of a stream is seen, not their sum
    with rotor_server(
        "out=mocker", "--speedup-ratio", "0", "--step-slice-ms", "0", "--api-key", KEY
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def embedder() -> Iterator[Server]:
    """An embedding model (the generating one above cannot embed): /v1/embeddings's server."""
    with rotor_server(
        "out=mocker", "--runner", "pooling", "--speedup-ratio", "0", "--api-key", KEY
    ) as srv:
        yield srv


POOLING = ("/v1/embeddings", "/v1/score", "/score", "/v1/rerank", "/rerank", "/v2/rerank")


def serving(path: str, server: Server, embedder: Server) -> Server:
    """The embedding model serves the pooling routes (scores by cosine)."""
    return embedder if path in POOLING else server


@pytest.fixture(scope="module")
def doc(server: Server) -> dict[str, Any]:
    r = httpx.get(server.url + "/openapi.json", timeout=10)  # no key: the document is open
    assert r.status_code == 200, r.text
    return r.json()


def validator(doc: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """`schema` checked with the document's components resolvable by its $refs."""
    return Draft202012Validator({"components": doc["components"], "allOf": [schema]})


def request_schema(doc: dict[str, Any], path: str) -> Draft202012Validator:
    body = doc["paths"][path]["post"]["requestBody"]
    assert body["required"] is True
    return validator(doc, body["content"]["application/json"]["schema"])


def answer_schema(
    doc: dict[str, Any], method: str, path: str, status: int = 200
) -> Draft202012Validator:
    content = doc["paths"][path][method]["responses"][str(status)]["content"]
    return validator(doc, content["application/json"]["schema"])


def errors_of(v: Draft202012Validator, instance: Any) -> list[str]:
    return [e.message for e in v.iter_errors(instance)]


def component(doc: dict[str, Any], name: str) -> Draft202012Validator:
    return validator(doc, {"$ref": f"#/components/schemas/{name}"})


class Capture:
    """The JSON bodies an SDK sends, as its own HTTP client saw them."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def hook(self, request: Any) -> None:  # an httpx (openai) or httpx2 (anthropic) request
        if request.method == "POST":
            self.bodies.append(orjson.loads(request.content))

    def client(self, sdk: Any) -> Any:
        """`sdk`'s own default HTTP client, with the hook."""
        return sdk.DefaultHttpxClient(event_hooks={"request": [self.hook]}, timeout=30)


# -- the document -----------------------------------------------------------------------------


def test_document_is_valid_openapi_3_with_every_route(doc: dict[str, Any]) -> None:
    validate_openapi(doc)
    assert doc["openapi"].startswith("3.")
    found = {(m, p) for p, item in doc["paths"].items() for m in item}
    assert found == ROUTES
    for schema in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)


def test_every_route_documents_its_answer_and_errors(doc: dict[str, Any]) -> None:
    for method, path in ROUTES:
        op = doc["paths"][path][method]
        ok = op["responses"]["200"]["content"]
        assert ok and all(media["schema"] for media in ok.values()), (method, path)
        if method == "post" and path not in BODILESS:
            assert "requestBody" in op, path
        envelope = "AnthropicError" if path.startswith("/v1/messages") else "OpenAIError"
        for status, response in op["responses"].items():
            if status == "200" or path == "/health":
                continue
            ref = response["content"]["application/json"]["schema"]["$ref"]
            assert ref == f"#/components/schemas/{envelope}", (path, status)
        assert "422" not in op["responses"], path  # rotor answers 400, never 422
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"):
        ok = doc["paths"][path]["post"]["responses"]["200"]["content"]
        assert set(ok) == {"application/json", "text/event-stream"}, path
    assert set(doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}


def test_guarded_routes_say_which_credentials_they_take(doc: dict[str, Any]) -> None:
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearer"] == {"type": "http", "scheme": "bearer"}
    assert schemes["x-api-key"]["name"] == "x-api-key"
    for method, path in ROUTES:
        security = doc["paths"][path][method].get("security")
        open_route = path in ("/health", "/live", "/metrics")
        assert (security is None) == open_route, path


def test_ignored_fields_are_documented_as_ignored(doc: dict[str, Any]) -> None:
    prop = doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]["service_tier"]
    assert prop["description"].startswith("accepted and ignored: ")


# -- requests ------------------------------------------------------------------------------------


def sdk_bodies(server: Server, embedder: Server) -> dict[str, dict[str, Any]]:
    """What the openai and anthropic SDKs send, one body per route, each answered 200."""
    bodies: dict[str, dict[str, Any]] = {}
    cap = Capture()
    emb = openai.OpenAI(
        base_url=embedder.v1, api_key=KEY, max_retries=0, http_client=cap.client(openai)
    )
    emb.embeddings.create(model="mock-model", input=["Hello", "there"])
    bodies["/v1/embeddings"] = cap.bodies.pop()
    oai = openai.OpenAI(
        base_url=server.v1, api_key=KEY, max_retries=0, http_client=cap.client(openai)
    )
    oai.chat.completions.create(
        model="mock-model", messages=HELLO, max_tokens=8, temperature=0.5, stop=["\n"]
    )
    bodies["/v1/chat/completions"] = cap.bodies.pop()
    oai.completions.create(model="mock-model", prompt="Hello", max_tokens=8)
    bodies["/v1/completions"] = cap.bodies.pop()
    oai.responses.create(model="mock-model", input="Hello!", max_output_tokens=8)
    bodies["/v1/responses"] = cap.bodies.pop()
    cap = Capture()
    ant = anthropic.Anthropic(
        base_url=server.url, api_key=KEY, max_retries=0, http_client=cap.client(anthropic)
    )
    ant.messages.create(model="mock-model", max_tokens=8, messages=HELLO, system="Be brief.")
    bodies["/v1/messages"] = cap.bodies.pop()
    ant.messages.count_tokens(model="mock-model", messages=HELLO)
    bodies["/v1/messages/count_tokens"] = cap.bodies.pop()
    bodies["/tokenize"] = {"model": "mock-model", "messages": HELLO, "tools": TOOLS}
    bodies["/detokenize"] = {"model": "mock-model", "tokens": [1, 2, 3]}
    # no SDK here scores: the bodies of vLLM's docs, Jina's API and Cohere's v2
    docs = ["Paris is in France.", "Berlin is in Germany."]
    bodies["/v1/score"] = {"model": "mock-model", "text_1": "Where is Paris?", "text_2": docs}
    bodies["/score"] = {"model": "mock-model", "queries": ["a", "b"], "documents": docs}
    jina = {"model": "mock-model", "query": "Where is Paris?", "documents": docs}
    bodies["/v1/rerank"] = {**jina, "top_n": 1, "return_documents": False}
    bodies["/rerank"] = jina
    bodies["/v2/rerank"] = {**jina, "top_n": 2}
    return bodies


# A wrong body per route: its required input left out, or a field no API knows.
WRONG = [
    ("/v1/chat/completions", {"model": "mock-model"}),
    ("/v1/chat/completions", {"messages": HELLO, "max_tokens": "eight"}),
    ("/v1/chat/completions", {"messages": HELLO, "no_such_field": 1}),
    ("/v1/completions", {"max_tokens": 8}),
    ("/v1/responses", {"model": "mock-model"}),
    ("/v1/messages", {"max_tokens": 8}),
    ("/v1/messages", {"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}),
    ("/v1/messages/count_tokens", {"model": "mock-model"}),
    ("/tokenize", {"model": "mock-model"}),
    ("/detokenize", {"model": "mock-model"}),
    ("/v1/embeddings", {"model": "mock-model"}),
    ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}),
    ("/v1/score", {"queries": "x", "documents": ["y"], "no_such_field": 1}),
    ("/v1/rerank", {"query": "x"}),
    ("/rerank", {"query": "x", "documents": ["y"], "top_n": -1}),
    ("/v1/loras", {"lora_name": "x"}),
    ("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/a", "base_model_name": "m"}),
    ("/v1/unload_lora_adapter", {}),
]


def test_what_the_sdks_send_validates_and_is_served(
    server: Server, embedder: Server, doc: dict[str, Any]
) -> None:
    bodies = sdk_bodies(server, embedder)
    # no SDK loads LoRA adapters: their bodies are the examples' (above)
    lora = {*LORA_LOADS, "/v1/unload_lora_adapter"}
    assert set(bodies) == {p for m, p in ROUTES if m == "post"} - lora - BODILESS
    for path, body in bodies.items():
        assert errors_of(request_schema(doc, path), body) == [], (path, body)
        url = serving(path, server, embedder).url
        r = httpx.post(url + path, json=body, headers=AUTH, timeout=30)
        assert r.status_code == 200, (path, r.text)


@pytest.mark.parametrize(("path", "body"), WRONG)
def test_wrong_bodies_fail_the_schema_and_the_server(
    server: Server, doc: dict[str, Any], path: str, body: dict[str, Any]
) -> None:
    assert errors_of(request_schema(doc, path), body) != []
    r = httpx.post(server.url + path, json=body, headers=AUTH, timeout=30)
    assert r.status_code == 400, r.text
    envelope = "AnthropicError" if path.startswith("/v1/messages") else "OpenAIError"
    assert errors_of(component(doc, envelope), r.json()) == []


LORA_LOADS = ("/v1/loras", "/v1/load_lora_adapter")


def test_each_example_validates_and_is_served(
    server: Server, embedder: Server, doc: dict[str, Any], tmp_path: Path
) -> None:
    """The body "Try it out" starts from is one the server takes. A LoRA
    load's example names a directory on the server: here, one the test wrote
    (and the adapter is unloaded again, so the next example can load it)."""
    adapter = write_adapter(tmp_path / "adapter")
    for path, item in doc["paths"].items():
        if "post" not in item or path in BODILESS:
            continue
        media = item["post"]["requestBody"]["content"]["application/json"]
        example = media["example"]
        assert errors_of(request_schema(doc, path), example) == [], path
        url = serving(path, server, embedder).url
        if path in LORA_LOADS:
            example = {**example, "lora_path": str(adapter)}
        if path == "/v1/unload_lora_adapter":  # its example's adapter must be loaded
            loaded = {"lora_name": example["lora_name"], "lora_path": str(adapter)}
            assert httpx.post(url + "/v1/loras", json=loaded, headers=AUTH).status_code == 200
        r = httpx.post(url + path, json=example, headers=AUTH, timeout=30)
        assert r.status_code == 200, (path, r.text)
        if path in LORA_LOADS:
            gone = httpx.delete(url + "/v1/loras/" + example["lora_name"], headers=AUTH)
            assert gone.status_code == 200, gone.text


# -- answers -------------------------------------------------------------------------------------


def post(server: Server, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(server.url + path, json=body, headers=AUTH, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


ANSWERS = [
    (
        "/v1/chat/completions",
        {"messages": HELLO, "logprobs": True, "top_logprobs": 2, "mock": {"output": "Hi there"}},
    ),
    (
        "/v1/chat/completions",
        {"messages": HELLO, "tools": TOOLS, "n": 2, "mock": {"output": THINK_AND_CALL}},
    ),
    (
        "/v1/chat/completions",
        {"messages": HELLO, "stop": ["there"], "mock": {"output": "Hi there"}},
    ),
    ("/v1/completions", {"prompt": "Hello", "logprobs": 1, "mock": {"output": "Hi there"}}),
    ("/v1/completions", {"prompt": ["a", "b"], "max_tokens": 2, "mock": {"output": "long text"}}),
    (
        "/v1/messages",
        {
            "max_tokens": 64,
            "messages": HELLO,
            "tools": [{"name": "f", "input_schema": TOOLS[0]["function"]["parameters"]}],
            "mock": {"output": THINK_AND_CALL},
        },
    ),
    ("/v1/messages", {"max_tokens": 2, "messages": HELLO, "mock": {"output": "long text here"}}),
    ("/v1/messages/count_tokens", {"messages": HELLO}),
    (
        "/v1/responses",
        {
            "input": "Hello!",
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "mock": {"output": THINK_AND_CALL},
        },
    ),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 2, "mock": {"output": "long text"}}),
    ("/tokenize", {"prompt": "Hello!"}),
    ("/tokenize", {"messages": HELLO}),
    ("/detokenize", {"tokens": [1, 2, 3]}),
    ("/v1/embeddings", {"input": ["Hello", "there"]}),
    ("/v1/embeddings", {"input": [[1, 2, 3]], "encoding_format": "base64", "dimensions": 8}),
    ("/v1/score", {"queries": "Where is Paris?", "documents": ["Paris.", "Rome."]}),
    ("/v1/rerank", {"query": "Where is Paris?", "documents": ["Paris.", "Rome."]}),
    ("/v1/rerank", {"query": "Paris?", "documents": ["a", "b"], "return_documents": False}),
    # evaluation and RL clients: the echoed prompt's logprobs, vLLM's prompt_logprobs, token ids
    (
        "/v1/completions",
        {"prompt": "Hello there", "echo": True, "logprobs": 2, "max_tokens": 0},
    ),
    (
        "/v1/completions",
        {"prompt": "Hello", "prompt_logprobs": 2, "return_token_ids": True, "max_tokens": 3},
    ),
    (
        "/v1/chat/completions",
        {"messages": HELLO, "prompt_logprobs": 1, "return_token_ids": True, "max_tokens": 3},
    ),
]


@pytest.mark.parametrize(("path", "body"), ANSWERS)
def test_real_answers_validate_against_the_documented_200(
    server: Server, embedder: Server, doc: dict[str, Any], path: str, body: dict[str, Any]
) -> None:
    answer = post(serving(path, server, embedder), path, body)
    assert errors_of(answer_schema(doc, "post", path), answer) == [], answer


def test_the_answers_carry_what_the_cases_meant_to_cover(server: Server) -> None:
    """The cases above really hold reasoning, tool calls and logprobs (else they prove little)."""
    body = {"messages": HELLO, "tools": TOOLS, "mock": {"output": THINK_AND_CALL}}
    message = post(server, "/v1/chat/completions", body)["choices"][0]["message"]
    assert message["reasoning_content"] == "hmm" and message["tool_calls"]
    body = {"max_tokens": 64, "messages": HELLO, "tools": ANSWERS[5][1]["tools"]}
    content = post(server, "/v1/messages", {**body, "mock": {"output": THINK_AND_CALL}})["content"]
    assert [b["type"] for b in content] == ["thinking", "text", "tool_use"]
    body = {"input": "x", "tools": ANSWERS[8][1]["tools"], "mock": {"output": THINK_AND_CALL}}
    output = post(server, "/v1/responses", body)["output"]
    assert [o["type"] for o in output] == ["reasoning", "message", "function_call"]
    body = {"messages": HELLO, "logprobs": True, "top_logprobs": 2, "mock": {"output": "Hi"}}
    assert post(server, "/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
    echoed = post(server, *ANSWERS[-3])["choices"][0]["logprobs"]
    assert echoed["token_logprobs"][0] is None and echoed["text_offset"][0] == 0
    scored = post(server, *ANSWERS[-2])["choices"][0]
    assert scored["prompt_logprobs"][0] is None and scored["prompt_logprobs"][1]
    assert scored["token_ids"] and scored["prompt_token_ids"]
    chat = post(server, *ANSWERS[-1])
    assert (
        chat["prompt_logprobs"][1] and chat["prompt_token_ids"] and chat["choices"][0]["token_ids"]
    )


def test_stream_chunks_validate_against_the_documented_chunks(
    server: Server, doc: dict[str, Any]
) -> None:
    for path, name, body in (
        ("/v1/chat/completions", "ChatCompletionChunk", {"messages": HELLO}),
        ("/v1/completions", "CompletionChunk", {"prompt": "Hello"}),
    ):
        full = {
            **body,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "mock": {"output": THINK_AND_CALL},
            "tools": TOOLS,
        }
        if path == "/v1/completions":
            del full["tools"]
        r = httpx.post(server.url + path, json=full, headers=AUTH, timeout=30)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        chunks = data_events(r.text)
        assert len(chunks) > 3
        v = component(doc, name)
        for chunk in chunks:
            assert errors_of(v, chunk) == [], chunk


def test_an_embedding_model_s_entry_validates(embedder: Server, doc: dict[str, Any]) -> None:
    listed = httpx.get(embedder.v1 + "/models", headers=AUTH, timeout=10).json()
    assert errors_of(answer_schema(doc, "get", "/v1/models"), listed) == [], listed
    assert listed["data"][0]["task"] == "embed"


def test_gets_validate_against_the_documented_200(server: Server, doc: dict[str, Any]) -> None:
    for path, url, headers in (
        ("/v1/models", "/v1/models", AUTH),
        ("/v1/models", "/v1/models", {**AUTH, "anthropic-version": "2023-06-01"}),
        ("/v1/models/{model_id}", "/v1/models/mock-model", AUTH),
        ("/v1/models/{model_id}", "/v1/models/mock-model", {**AUTH, "anthropic-version": "1"}),
        ("/health", "/health", {}),
        ("/live", "/live", {}),
    ):
        r = httpx.get(server.url + url, headers=headers, timeout=10)
        assert r.status_code == 200, r.text
        assert errors_of(answer_schema(doc, "get", path), r.json()) == [], (url, r.json())
    r = httpx.get(server.url + "/metrics", timeout=10)
    assert r.headers["content-type"].startswith("text/plain")


def test_stored_responses_validate_against_the_documented_answers(
    server: Server, doc: dict[str, Any]
) -> None:
    body = {"input": "Hi", "mock": {"output": "Hello."}}
    made = post(server, "/v1/responses", body)
    one = server.url + "/v1/responses/" + made["id"]
    for method, path, url, status in (
        ("get", "/v1/responses/{response_id}", one, 200),
        ("get", "/v1/responses/{response_id}/input_items", one + "/input_items", 200),
        ("post", "/v1/responses/{response_id}/cancel", one + "/cancel", 400),  # not background
        ("delete", "/v1/responses/{response_id}", one, 200),
        ("get", "/v1/responses/{response_id}", one, 404),
        ("get", "/v1/responses/{response_id}/input_items", one + "/input_items?limit=0", 400),
    ):
        r = httpx.request(method.upper(), url, headers=AUTH, timeout=10)
        assert r.status_code == status, (method, url, r.text)
        schema = answer_schema(doc, method, path, status)
        assert errors_of(schema, r.json()) == [], (method, url, r.json())


def test_real_errors_validate_against_the_documented_envelopes(
    server: Server, doc: dict[str, Any]
) -> None:
    cases = [
        ("/v1/chat/completions", {"messages": HELLO}, {}, 401),
        ("/v1/messages", {"max_tokens": 8, "messages": HELLO}, {}, 401),
        ("/v1/chat/completions", {"model": "nope", "messages": HELLO}, AUTH, 404),
        ("/v1/messages", {"model": "nope", "max_tokens": 8, "messages": HELLO}, AUTH, 404),
        ("/tokenize", {"model": "nope", "prompt": "x"}, AUTH, 404),
        ("/v1/responses", {"input": "x", "background": True, "store": False}, AUTH, 400),
        ("/v1/responses", {"input": "x", "previous_response_id": "resp_none"}, AUTH, 404),
    ]
    for path, body, headers, status in cases:
        r = httpx.post(server.url + path, json=body, headers=headers, timeout=10)
        assert r.status_code == status, (path, r.text)
        assert errors_of(answer_schema(doc, "post", path, status), r.json()) == [], r.json()


# -- the docs pages --------------------------------------------------------------------------------


class Links(HTMLParser):
    """Every URL a page loads or links to (src, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]


ASSET_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}


@pytest.mark.parametrize(("page", "needs"), [("/docs", {".js", ".css"}), ("/redoc", {".js"})])
def test_docs_pages_load_only_their_own_assets_without_a_key(
    server: Server, page: str, needs: set[str]
) -> None:
    r = httpx.get(server.url + page, timeout=10)  # no key
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    parser = Links()
    parser.feed(html)
    assert parser.urls
    kinds = set()
    for url in parser.urls:
        assert url.startswith("/") and not url.startswith("//"), url  # same origin
        asset = httpx.get(server.url + url, timeout=10)
        assert asset.status_code == 200, url
        suffix = url[url.rfind(".") :]
        assert asset.headers["content-type"].startswith(ASSET_TYPES[suffix]), url
        assert len(asset.content) > 1000, url
        kinds.add(suffix)
    assert needs <= kinds
    assert "/openapi.json" in html


def test_swagger_ui_asks_no_outside_validator(server: Server) -> None:
    html = httpx.get(server.url + "/docs", timeout=10).text
    assert '"validatorUrl": null' in html


def test_the_api_still_needs_the_key(server: Server) -> None:
    """Opening the docs opened nothing else."""
    assert httpx.post(server.v1 + "/chat/completions", json={}, timeout=10).status_code == 401
    assert httpx.post(server.url + "/tokenize", json={}, timeout=10).status_code == 401
