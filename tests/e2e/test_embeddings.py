"""`/v1/embeddings` end to end: `rotor run out=mocker --runner pooling`, the
official openai SDK (floats and base64), LangChain's OpenAIEmbeddings, raw
HTTP for the 400s; a generating model and the echo engine refuse; and the
same through a frontend and a pooling worker over NATS."""

from __future__ import annotations

import base64
import math
from array import array
from collections.abc import Iterator

import httpx
import openai
import pytest
from langchain_openai import OpenAIEmbeddings

from support.cluster import nats_server, start_frontend, start_worker
from support.server import Server, rotor_server

MODEL = "mock-model"
DIM = 48
WIDE = 1024  # the pooling workers' dimension over NATS
CONTEXT = 64


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server(
        "out=mocker", "--runner", "pooling", "--embedding-dim", str(DIM),
        "--speedup-ratio", "0", "--max-model-len", str(CONTEXT),
    ) as srv:  # fmt: skip
        yield srv


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def post(server: Server, **body: object) -> httpx.Response:
    return httpx.post(server.v1 + "/embeddings", json={"model": MODEL, **body}, timeout=30)


def test_the_sdk_gets_unit_vectors_that_depend_on_the_input_alone(server: Server) -> None:
    client = server.openai()
    one = client.embeddings.create(model=MODEL, input="the cat sat", encoding_format="float")
    (item,) = one.data
    assert len(item.embedding) == DIM and math.isclose(norm(item.embedding), 1, rel_tol=1e-5)
    again = client.embeddings.create(model=MODEL, input="the cat sat", encoding_format="float")
    assert again.data[0].embedding == item.embedding
    other = client.embeddings.create(model=MODEL, input="the dog ran", encoding_format="float")
    assert other.data[0].embedding != item.embedding
    assert one.model == MODEL and one.usage.prompt_tokens == one.usage.total_tokens > 0


def test_base64_is_the_same_vector_as_float32s(server: Server) -> None:
    client = server.openai()
    floats = client.embeddings.create(model=MODEL, input="hello", encoding_format="float")
    packed = client.embeddings.create(model=MODEL, input="hello", encoding_format="base64")
    raw = packed.data[0].embedding
    assert isinstance(raw, str)
    decoded = array("f", base64.b64decode(raw)).tolist()
    assert decoded == pytest.approx(floats.data[0].embedding, rel=1e-6)
    # the SDK's default asks for base64 and decodes it itself
    default = client.embeddings.create(model=MODEL, input="hello")
    assert default.data[0].embedding == pytest.approx(floats.data[0].embedding, rel=1e-6)


def test_every_input_shape_and_usage(server: Server) -> None:
    texts = post(server, input=["a b", "c d e"]).json()
    assert [d["index"] for d in texts["data"]] == [0, 1]
    ids = server.tokenize("a b")
    by_ids = post(server, input=ids).json()
    assert by_ids["data"][0]["embedding"] == texts["data"][0]["embedding"]
    assert by_ids["usage"]["prompt_tokens"] == len(ids)
    lists = post(server, input=[ids, [5, 6, 7]], user="someone").json()
    assert len(lists["data"]) == 2
    assert lists["usage"]["prompt_tokens"] == len(ids) + 3


def test_dimensions_shorten_the_vector(server: Server) -> None:
    client = server.openai()
    short = client.embeddings.create(model=MODEL, input="x", dimensions=8, encoding_format="float")
    vector = short.data[0].embedding
    assert len(vector) == 8 and math.isclose(norm(vector), 1, rel_tol=1e-5)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": "x", "dimensions": DIM + 1}, "dimensions", f"more than the model's {DIM}"),
        ({"input": ["fine", "word " * 200]}, "input", "input 1"),
        ({"input": ["x"] * 2049}, "input", "at most 2048"),
        ({"input": []}, "input", "must not be empty"),
        ({"input": ["ok", ""]}, "input", "input 1 is empty"),
        ({"input": [[1, 2], [99999999]]}, "input", "input 1 has token ids outside"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format", ""),
        ({"input": "x", "bogus": 1}, "bogus", ""),
    ],
    ids=["dimensions", "context", "batch", "empty", "empty-one", "vocab", "format", "unknown"],
)
def test_a_bad_request_is_a_400_naming_the_field(
    server: Server, body: dict, param: str, words: str
) -> None:
    r = post(server, **body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"]


def test_an_embedding_model_refuses_chat_and_says_what_it_is(server: Server) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        server.openai().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
    assert "embedding model" in str(caught.value) and caught.value.body["param"] == "model"
    (entry,) = server.openai().models.list().data
    assert entry.model_extra["task"] == "embed" and entry.model_extra["embedding_dim"] == DIM
    assert server.metric("rotor_requests_total", 'endpoint="embeddings"') > 0


def test_langchain_embeds_documents_and_a_query(server: Server) -> None:
    embeddings = OpenAIEmbeddings(
        model=MODEL,
        base_url=server.v1,
        api_key="unused",
        check_embedding_ctx_length=False,  # no tiktoken download: rotor tokenizes
    )
    docs = embeddings.embed_documents(["first document", "second document"])
    query = embeddings.embed_query("first document")
    assert len(docs) == 2 and len(docs[0]) == DIM
    assert query == pytest.approx(docs[0], rel=1e-6)


@pytest.mark.parametrize("engine", ["mocker", "echo"])
def test_a_model_that_cannot_embed_is_a_400_naming_it(engine: str) -> None:
    args = ("out=mocker", "--speedup-ratio", "0") if engine == "mocker" else ("out=echo",)
    with rotor_server(*args) as srv:
        r = httpx.post(srv.v1 + "/embeddings", json={"input": "hi"}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "model"
        assert "cannot embed" in r.json()["error"]["message"]
        (entry,) = httpx.get(srv.v1 + "/models", timeout=5).json()["data"]
        assert entry["task"] == "generate" and "embedding_dim" not in entry


def test_http_workers_embed_through_the_engine_process() -> None:
    with rotor_server(
        "out=mocker", "--runner", "pooling", "--speedup-ratio", "0", "--http-workers", "2"
    ) as srv:
        client = srv.openai()
        first = client.embeddings.create(model=MODEL, input=["a", "b"], encoding_format="float")
        again = client.embeddings.create(model=MODEL, input=["a", "b"], encoding_format="float")
        assert [d.embedding for d in first.data] == [d.embedding for d in again.data]
        assert len(first.data[0].embedding) == 64  # the built-in model's default dimension


def test_a_pooling_worker_embeds_through_a_frontend() -> None:
    with nats_server() as nats:
        # wide vectors: 600 of them (3 MB as float32s) need several NATS messages
        pooling = ("out=mocker", "--runner", "pooling", "--embedding-dim", str(WIDE))
        workers = [start_worker(nats, *pooling, "--speedup-ratio", "0") for _ in range(2)]
        frontend = start_frontend(nats)
        try:
            frontend.wait_workers(MODEL, {w.id for w in workers})
            client = openai.OpenAI(base_url=frontend.v1, api_key="x", max_retries=0)
            got = client.embeddings.create(model=MODEL, input=["p", "q"], encoding_format="float")
            assert len(got.data) == 2 and len(got.data[0].embedding) == WIDE
            # float32 on the wire: the same numbers as rotor run's (float32-rounded)
            assert math.isclose(norm(got.data[0].embedding), 1, rel_tol=1e-5)
            again = client.embeddings.create(model=MODEL, input=["p", "q"], encoding_format="float")
            assert again.data[0].embedding == got.data[0].embedding  # another worker, same vector
            many = [f"input number {i}" for i in range(600)]
            batch = client.embeddings.create(model=MODEL, input=many, encoding_format="float")
            assert [d.index for d in batch.data] == list(range(600))
            for i in (0, 299, 599):  # in order: each is that input's own vector
                one = client.embeddings.create(model=MODEL, input=many[i], encoding_format="float")
                assert batch.data[i].embedding == one.data[0].embedding
            with pytest.raises(openai.BadRequestError):
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}]
                )
            for w in workers:
                w.proc.terminate()  # they leave at once (SIGKILL: when their leases run out)
            frontend.wait_workers(MODEL, set())
            with pytest.raises(openai.APIStatusError) as caught:
                client.embeddings.create(model=MODEL, input="p")
            assert caught.value.status_code == 503
        finally:
            frontend.proc.stop()
            for w in workers:
                w.proc.stop()
