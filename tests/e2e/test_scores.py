"""`/v1/score` and `/v1/rerank` end to end with raw HTTP: `rotor run
out=mocker --runner pooling --convert classify` on a BERT-style tokenizer
(support/cross_encoder.py), whose scores are a hash of each pair's tokens
(engines/mocker/score.py) — so each score is checked against the pair as a
BERT tokenizer joins it, token types included; an embedding model scores by
cosine; a generating model refuses naming the route; and the same through
--http-workers and through a frontend and cross-encoder workers over NATS."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tokenizers

from rotor.engines.mocker.score import pair_score
from rotor.protocol.scores import MAX_TEXTS, ScorePair

from support.cluster import nats_server, start_frontend, start_worker
from support.cross_encoder import reranker_dir
from support.server import Server, rotor_server

MODEL = "tiny-reranker"
CONTEXT = 64
QUERY = "What is the weather like in Paris?"
DOCS = ["It is sunny and warm.", "The quick brown fox", "Paris is in France", "42"]
CROSS = ("--runner", "pooling", "--convert", "classify", "--speedup-ratio", "0")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reranker_dir(tmp_path_factory.mktemp("reranker"), MODEL, CONTEXT)


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[Server]:
    with rotor_server("out=mocker", "--model-path", str(model_dir), *CROSS) as srv:
        yield srv


def pair(model_dir: Path, a: str, b: str) -> ScorePair:
    """The pair as the model's own tokenizer file joins it: [CLS] a [SEP] b [SEP]."""
    enc = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(a, b)
    assert enc.ids[0] == 2 and enc.type_ids[-1] == 1  # [CLS] first, b is type 1
    return ScorePair(enc.ids, enc.type_ids.index(1))


def expected(model_dir: Path, a: str, docs: list[str]) -> list[float]:
    return [pair_score(pair(model_dir, a, d)) for d in docs]


def post(url: str, path: str, **body: object) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=60)


def test_score_gives_each_pairs_score_in_order_with_usage(server: Server, model_dir: Path) -> None:
    r = post(server.v1, "/score", model=MODEL, queries=QUERY, documents=DOCS)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == MODEL
    assert body["id"].startswith("score-") and isinstance(body["created"], int)
    assert [d["index"] for d in body["data"]] == list(range(len(DOCS)))
    assert {d["object"] for d in body["data"]} == {"score"}
    assert [d["score"] for d in body["data"]] == expected(model_dir, QUERY, DOCS)
    tokens = sum(len(pair(model_dir, QUERY, d).token_ids) for d in DOCS)
    assert body["usage"] == {
        "prompt_tokens": tokens,
        "total_tokens": tokens,
        "completion_tokens": 0,
    }


@pytest.mark.parametrize(
    ("first", "second"),
    [("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2")],
)
def test_every_spelling_of_the_sides_and_both_paths_agree(
    server: Server, model_dir: Path, first: str, second: str
) -> None:
    want = expected(model_dir, QUERY, DOCS)
    for url in (server.v1, server.url):  # /v1/score and vLLM's /score
        r = post(url, "/score", **{first: QUERY, second: DOCS})
        assert [d["score"] for d in r.json()["data"]] == want
    # N:N: each first text with the second text of its place
    firsts = ["a question", "another question", QUERY]
    r = post(server.v1, "/score", **{first: firsts, second: DOCS[:3]})
    want_pairs = [pair_score(pair(model_dir, a, b)) for a, b in zip(firsts, DOCS, strict=False)]
    assert [d["score"] for d in r.json()["data"]] == want_pairs
    one = post(server.v1, "/score", **{first: [QUERY], second: DOCS[0]})  # 1:1
    assert [d["score"] for d in one.json()["data"]] == want[:1]


def test_rerank_ranks_the_documents_best_first_on_every_path(
    server: Server, model_dir: Path
) -> None:
    scores = expected(model_dir, QUERY, DOCS)
    order = sorted(range(len(DOCS)), key=lambda i: -scores[i])
    for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
        r = post(server.url, path, model=MODEL, query=QUERY, documents=DOCS)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == MODEL and body["id"].startswith("rerank-")
        assert [x["index"] for x in body["results"]] == order
        for x in body["results"]:
            assert x["document"] == {"text": DOCS[x["index"]]}
            assert x["relevance_score"] == scores[x["index"]]
        tokens = sum(len(pair(model_dir, QUERY, d).token_ids) for d in DOCS)
        assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_top_n_and_return_documents(server: Server, model_dir: Path) -> None:
    scores = expected(model_dir, QUERY, DOCS)
    order = sorted(range(len(DOCS)), key=lambda i: -scores[i])
    top = post(server.v1, "/rerank", query=QUERY, documents=DOCS, top_n=2).json()
    assert [x["index"] for x in top["results"]] == order[:2]
    for n in (0, len(DOCS), len(DOCS) + 5):  # 0 and more than there are: all of them (vLLM's)
        every = post(server.v1, "/rerank", query=QUERY, documents=DOCS, top_n=n).json()
        assert [x["index"] for x in every["results"]] == order
    bare = post(server.v1, "/rerank", query=QUERY, documents=DOCS, return_documents=False)
    assert [set(x) for x in bare.json()["results"]] == [{"index", "relevance_score"}] * len(DOCS)
    single = post(server.v1, "/rerank", query=QUERY, documents=DOCS[2]).json()  # one, unlisted
    assert [x["index"] for x in single["results"]] == [0]
    assert single["results"][0]["relevance_score"] == scores[2]


@pytest.mark.parametrize(
    ("path", "body", "param", "words"),
    [
        ("/rerank", {"query": QUERY, "documents": []}, "documents", "must not be empty"),
        ("/score", {"queries": QUERY, "documents": []}, "documents", "must not be empty"),
        (
            "/rerank",
            {"query": QUERY, "documents": ["d"] * (MAX_TEXTS + 1)},
            "documents",
            f"at most {MAX_TEXTS}",
        ),
        ("/rerank", {"query": QUERY, "documents": DOCS, "top_n": -1}, "top_n", ""),
        ("/rerank", {"query": QUERY, "documents": ["a", QUERY * 6]}, "documents", "[1] is"),
        ("/rerank", {"query": QUERY, "documents": [QUERY * 40]}, "documents", "context"),
        ("/rerank", {"query": 7, "documents": DOCS}, "query", ""),
        ("/rerank", {"documents": DOCS}, "query", ""),
        ("/rerank", {"query": QUERY, "documents": DOCS, "rank_fields": ["x"]}, "rank_fields", ""),
        ("/score", {"queries": ["a", "b"], "documents": DOCS}, "queries", "as many as documents"),
        ("/score", {"queries": QUERY, "documents": DOCS, "text_2": DOCS}, "text_2", "once"),
        ("/score", {"data_1": QUERY}, "data_1", "one of queries and documents"),
        ("/score", {"model": MODEL}, "queries", "two sides"),
    ],
    ids=[
        "no-documents",
        "score-no-documents",
        "too-many",
        "top_n",
        "context",
        "characters",
        "query-type",
        "no-query",
        "unknown",
        "lengths",
        "two-spellings",
        "one-side",
        "no-sides",
    ],
)
def test_a_bad_request_is_a_400_naming_the_field(
    server: Server, path: str, body: dict, param: str, words: str
) -> None:
    r = post(server.v1, path, **body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_a_cross_encoder_says_what_it_is_and_refuses_the_rest(server: Server) -> None:
    (entry,) = httpx.get(server.v1 + "/models", timeout=10).json()["data"]
    assert entry["task"] == "score" and "embedding_dim" not in entry
    chat = post(server.v1, "/chat/completions", messages=[{"role": "user", "content": "hi"}])
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "model"
    assert "cross-encoder" in chat.json()["error"]["message"]
    embed = post(server.v1, "/embeddings", input="hi")
    assert embed.status_code == 400 and embed.json()["error"]["param"] == "model"
    assert "cannot embed" in embed.json()["error"]["message"]
    assert post(server.v1, "/rerank", query=QUERY, documents=DOCS).status_code == 200
    assert post(server.v1, "/score", queries=QUERY, documents=DOCS).status_code == 200
    assert server.metric("rotor_requests_total", 'endpoint="rerank"') > 0
    assert server.metric("rotor_requests_total", 'endpoint="score"') > 0


@pytest.mark.parametrize("engine", ["mocker", "echo"])
def test_a_generating_model_is_a_400_naming_the_route(engine: str) -> None:
    args = ("out=mocker", "--speedup-ratio", "0") if engine == "mocker" else ("out=echo",)
    with rotor_server(*args) as srv:
        for route, body in (
            ("/rerank", {"query": QUERY, "documents": DOCS}),
            ("/score", {"queries": QUERY, "documents": DOCS}),
        ):
            r = post(srv.v1, route, **body)
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["param"] == "model"
            assert "cannot score" in error["message"] and f"/v1{route}" in error["message"]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_an_embedding_model_scores_by_the_cosine_of_its_vectors() -> None:
    with rotor_server("out=mocker", "--runner", "pooling", "--speedup-ratio", "0") as srv:
        vectors = post(srv.v1, "/embeddings", input=[QUERY, *DOCS]).json()["data"]
        query, *docs = [v["embedding"] for v in vectors]
        want = [cosine(query, d) for d in docs]
        got = post(srv.v1, "/score", queries=QUERY, documents=DOCS).json()
        assert [d["score"] for d in got["data"]] == pytest.approx(want, abs=1e-12)
        # the query embedded once, then each document
        tokens = sum(len(srv.tokenize(text=t)) for t in (QUERY, *DOCS))
        assert got["usage"]["prompt_tokens"] == tokens
        ranked = post(srv.v1, "/rerank", query=QUERY, documents=DOCS).json()["results"]
        assert [x["index"] for x in ranked] == sorted(range(len(DOCS)), key=lambda i: -want[i])
        pairs = post(srv.v1, "/score", text_1=DOCS[:2], text_2=DOCS[2:]).json()["data"]
        vs = [v["embedding"] for v in post(srv.v1, "/embeddings", input=DOCS).json()["data"]]
        want_pairs = [cosine(vs[0], vs[2]), cosine(vs[1], vs[3])]
        assert [d["score"] for d in pairs] == pytest.approx(want_pairs, abs=1e-12)


def test_the_api_key_guards_every_scoring_path(model_dir: Path) -> None:
    with rotor_server(
        "out=mocker", "--model-path", str(model_dir), *CROSS, "--api-key", "k"
    ) as srv:
        for path, body in (
            ("/v1/score", {"queries": QUERY, "documents": DOCS}),
            ("/score", {"queries": QUERY, "documents": DOCS}),
            ("/v1/rerank", {"query": QUERY, "documents": DOCS}),
            ("/rerank", {"query": QUERY, "documents": DOCS}),
            ("/v2/rerank", {"query": QUERY, "documents": DOCS}),
        ):
            assert httpx.post(srv.url + path, json=body, timeout=30).status_code == 401, path
            keyed = httpx.post(
                srv.url + path, json=body, headers={"Authorization": "Bearer k"}, timeout=30
            )
            assert keyed.status_code == 200, (path, keyed.text)


def test_http_workers_score_through_the_engine_process(model_dir: Path) -> None:
    with rotor_server(
        "out=mocker", "--model-path", str(model_dir), *CROSS, "--http-workers", "2"
    ) as srv:
        for _ in range(4):  # (whichever process takes it)
            r = post(srv.v1, "/score", queries=QUERY, documents=DOCS)
            assert [d["score"] for d in r.json()["data"]] == expected(model_dir, QUERY, DOCS)


def test_cross_encoder_workers_score_through_a_frontend(model_dir: Path) -> None:
    with nats_server() as nats:
        cross = ("out=mocker", "--model-path", str(model_dir), *CROSS)
        workers = [start_worker(nats, *cross) for _ in range(2)]
        frontend = start_frontend(nats)
        try:
            frontend.wait_workers(MODEL, {w.id for w in workers})
            want = expected(model_dir, QUERY, DOCS)
            for _ in range(4):  # both workers, the same scores
                r = post(frontend.v1, "/score", queries=QUERY, documents=DOCS)
                assert [d["score"] for d in r.json()["data"]] == want
            ranked = post(frontend.v1, "/rerank", query=QUERY, documents=DOCS, top_n=1).json()
            assert ranked["results"][0]["index"] == max(range(len(DOCS)), key=lambda i: want[i])
            many = [f"document number {i} about Paris" for i in range(MAX_TEXTS)]
            batch = post(frontend.v1, "/score", queries=QUERY, documents=many).json()["data"]
            assert [d["index"] for d in batch] == list(range(MAX_TEXTS))
            for i in (0, 500, MAX_TEXTS - 1):  # in order: each is that pair's own score
                assert batch[i]["score"] == pair_score(pair(model_dir, QUERY, many[i]))
            chat = post(
                frontend.v1, "/chat/completions", messages=[{"role": "user", "content": "x"}]
            )
            assert chat.status_code == 400
            for w in workers:
                w.proc.terminate()  # they leave at once
            frontend.wait_workers(MODEL, set())
            gone = post(frontend.v1, "/rerank", query=QUERY, documents=DOCS)
            assert gone.status_code == 503, gone.text
        finally:
            frontend.proc.stop()
            for w in workers:
                w.proc.stop()
