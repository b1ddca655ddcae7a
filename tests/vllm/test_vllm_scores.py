"""`rotor run out=vllm` serving a tiny random cross-encoder
(support/cross_encoder.py: a one-label BertForSequenceClassification with a
BERT pair template), one engine for the module, through `/v1/score` and
`/v1/rerank` with raw HTTP.

A random model's scores mean nothing, so the tests check that they are the
model's own: equal to what vLLM's own `LLM.score` gives for the same texts
(run first, in a process of its own) and to transformers' sigmoid of the
classifier's logit with the pair's token types — which differ from the
scores without token types, so the types reach vLLM — and that rerank
orders by them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from rotor.config import ModelConfig
from rotor.engines.registry import engine_spec
from rotor.protocol.engine import EngineError
from rotor.serve.build import build_engine, load

from support.cross_encoder import cross_encoder
from support.server import Server
from support.vllm_setup import VLLM_ARGS, VLLM_ENV, vllm_server

MODEL = "tiny-reranker"
CONTEXT = 512
QUERY = "What is the weather like in Paris?"
DOCS = [
    "It is sunny and warm.",
    "The quick brown fox jumps over the lazy dog.",
    "Paris is in France.",
    "def add(a, b): return a + b",
    "42",
]
FIRSTS = ["Hello, world!", "How are you today?", "Numbers: 0 1 2 3"]

# vLLM's own scores, from its offline API (the same engine options as rotor's)
_REFERENCE = """
import json, sys
from vllm import LLM

def main():
    model, query, docs, firsts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
    llm = LLM(model, runner="pooling", enforce_eager=True, dtype="float32", block_size=32,
              max_num_seqs=16, max_model_len=MAX_MODEL_LEN)
    one_to_n = [o.outputs.score for o in llm.score(query, docs)]
    pairs = [o.outputs.score for o in llm.score(firsts, docs[: len(firsts)])]
    print("SCORES " + json.dumps({"one_to_n": one_to_n, "pairs": pairs}), flush=True)

if __name__ == "__main__":
    main()
""".replace("MAX_MODEL_LEN", str(CONTEXT))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cross_encoder(tmp_path_factory.mktemp("vllm-score"), MODEL, CONTEXT)


@pytest.fixture(scope="module")
def vllm_scores(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    script = tmp_path_factory.mktemp("reference") / "reference.py"
    script.write_text(_REFERENCE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(model_dir), QUERY, json.dumps(DOCS), json.dumps(FIRSTS)],
        env={**os.environ, **VLLM_ENV},
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("SCORES ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("SCORES "))


@pytest.fixture(scope="module")
def server(model_dir: Path, vllm_scores: dict) -> Iterator[Server]:
    # (after vLLM's own run: one engine at a time on this machine)
    with vllm_server(model_dir) as s:
        yield s


def post(server: Server, path: str, **body: object) -> dict:
    r = httpx.post(server.url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def scores(server: Server, **body: object) -> list[float]:
    data = post(server, "/v1/score", model=MODEL, **body)["data"]
    assert [d["index"] for d in data] == list(range(len(data)))
    return [d["score"] for d in data]


def transformers_scores(
    model_dir: Path, firsts: list[str], docs: list[str], types: bool
) -> list[float]:
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = BertForSequenceClassification.from_pretrained(str(model_dir)).eval()
    enc = tok(firsts, text_pair=docs, return_tensors="pt", padding=True)
    assert "token_type_ids" in enc  # the tokenizer config says it gives them
    if not types:
        del enc["token_type_ids"]
    with torch.no_grad():
        return torch.sigmoid(model(**enc).logits[:, 0]).tolist()


def test_the_card_says_score(server: Server) -> None:
    (entry,) = httpx.get(server.v1 + "/models", timeout=10).json()["data"]
    assert entry["id"] == MODEL and entry["task"] == "score"
    assert "embedding_dim" not in entry and entry["max_model_len"] == CONTEXT


def test_scores_are_vllms_own(server: Server, vllm_scores: dict) -> None:
    got = scores(server, queries=QUERY, documents=DOCS)
    diff = max(abs(a - b) for a, b in zip(got, vllm_scores["one_to_n"], strict=True))
    print(f"1:N max |rotor - vLLM LLM.score| = {diff:.3g}")
    assert got == pytest.approx(vllm_scores["one_to_n"], abs=1e-5)
    pairs = scores(server, text_1=FIRSTS, text_2=DOCS[: len(FIRSTS)])
    diff = max(abs(a - b) for a, b in zip(pairs, vllm_scores["pairs"], strict=True))
    print(f"N:N max |rotor - vLLM LLM.score| = {diff:.3g}")
    assert pairs == pytest.approx(vllm_scores["pairs"], abs=1e-5)


def test_scores_are_the_models_with_the_pairs_token_types(server: Server, model_dir: Path) -> None:
    got = scores(server, queries=QUERY, documents=DOCS)
    want = transformers_scores(model_dir, [QUERY] * len(DOCS), DOCS, types=True)
    diff = max(abs(a - b) for a, b in zip(got, want, strict=True))
    print(f"max |rotor - transformers| = {diff:.3g}")
    assert got == pytest.approx(want, abs=1e-4)
    untyped = transformers_scores(model_dir, [QUERY] * len(DOCS), DOCS, types=False)
    assert max(abs(a - b) for a, b in zip(got, untyped, strict=True)) > 1e-3


def test_rerank_orders_by_vllms_scores(server: Server, vllm_scores: dict) -> None:
    want = vllm_scores["one_to_n"]
    order = sorted(range(len(DOCS)), key=lambda i: -want[i])
    for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
        body = post(server, path, model=MODEL, query=QUERY, documents=DOCS)
        assert [x["index"] for x in body["results"]] == order
        for x in body["results"]:
            assert x["document"]["text"] == DOCS[x["index"]]
            assert x["relevance_score"] == pytest.approx(want[x["index"]], abs=1e-5)
        assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    top = post(server, "/v1/rerank", query=QUERY, documents=DOCS, top_n=2)
    assert [x["index"] for x in top["results"]] == order[:2]


def test_usage_counts_each_pairs_tokens(server: Server, model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    tokens = sum(len(tok(QUERY, text_pair=d)["input_ids"]) for d in DOCS)
    usage = post(server, "/v1/score", queries=QUERY, documents=DOCS)["usage"]
    assert usage["prompt_tokens"] == usage["total_tokens"] == tokens


def test_concurrent_requests_each_get_their_own_scores(server: Server) -> None:
    alone = {d: scores(server, queries=QUERY, documents=d)[0] for d in DOCS}
    with ThreadPoolExecutor(len(DOCS)) as pool:
        got = list(pool.map(lambda d: scores(server, queries=QUERY, documents=[d, "x"])[0], DOCS))
    for d, score in zip(DOCS, got, strict=True):
        assert score == pytest.approx(alone[d], abs=1e-5)


def test_a_pair_past_the_context_and_other_routes_are_400s(server: Server) -> None:
    long = " ".join(["Paris"] * CONTEXT)
    r = httpx.post(server.v1 + "/rerank", json={"query": QUERY, "documents": ["a", long]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "documents", r.text
    assert "documents[1]" in r.json()["error"]["message"]
    for path, body in (
        ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/completions", {"prompt": "hi"}),
        ("/embeddings", {"input": "hi"}),
    ):
        r = httpx.post(server.v1 + path, json=body, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "model", r.text
    assert len(scores(server, queries=QUERY, documents=DOCS)) == len(DOCS)  # still scoring


@pytest.mark.asyncio
async def test_the_card_of_a_cross_encoder_before_the_engine_starts(model_dir: Path) -> None:
    spec = engine_spec("vllm")
    card, tok = load(ModelConfig(model_path=str(model_dir)), spec)
    assert card.token_type_ids
    engine = build_engine(spec, card, tok, {"engine_args": list(VLLM_ARGS)})
    caps = engine.card.capabilities
    assert (caps.scores_pairs, caps.embedding_dim, caps.generates) == (True, 0, False)
    with pytest.raises(EngineError) as caught:
        await engine.embed([[1, 2, 3]], None)
    assert caught.value.kind == "refused" and caught.value.param == "model"
