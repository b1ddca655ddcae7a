"""`rotor run out=vllm -- --runner pooling`: vLLM serving a tiny random
embedding model (support/vllm_embed_model.py), one engine for the module,
with the official openai SDK.

A random model's vectors mean nothing, so the tests check what must hold
anyway: each is the model's own (the last token's hidden state, normalised,
as transformers computes it from the same weights), the same input always
gives the same vector and another input another, batches keep their order,
base64 is the same float32s, and a Matryoshka `dimensions` is vLLM's."""

from __future__ import annotations

import base64
import math
from array import array
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from rotor.config import ModelConfig
from rotor.engines.registry import engine_spec
from rotor.protocol.engine import EngineError
from rotor.serve.build import StartupError, build_engine, load

from support.server import Server
from support.vllm_embed_model import EMBEDDING_DIM, embedding_model
from support.vllm_setup import POOLING_ARGS, VLLM_ARGS, vllm_server

MODEL = "tiny-embed"
CONTEXT = 512


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return embedding_model(tmp_path_factory.mktemp("vllm-embed"), MODEL, CONTEXT)


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[Server]:
    with vllm_server(model_dir, vllm=POOLING_ARGS) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return server.openai()


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def vectors(client: openai.OpenAI, inputs: object, **kw: object) -> list[list[float]]:
    r = client.embeddings.create(model=MODEL, input=inputs, encoding_format="float", **kw)  # type: ignore[arg-type]
    assert [d.index for d in r.data] == list(range(len(r.data)))
    return [d.embedding for d in r.data]


def test_the_card_says_embed_with_the_models_dimension(server: Server) -> None:
    (entry,) = httpx.get(server.v1 + "/models", timeout=10).json()["data"]
    assert entry["id"] == MODEL
    assert entry["task"] == "embed"
    assert entry["embedding_dim"] == EMBEDDING_DIM  # vLLM's embedding_size: the hidden size
    assert entry["max_model_len"] == CONTEXT


def test_a_vector_has_the_cards_dimension_and_unit_length(
    server: Server, client: openai.OpenAI
) -> None:
    r = client.embeddings.create(model=MODEL, input="the cat sat", encoding_format="float")
    (item,) = r.data
    (entry,) = httpx.get(server.v1 + "/models", timeout=10).json()["data"]
    assert len(item.embedding) == entry["embedding_dim"]
    assert math.isclose(norm(item.embedding), 1, rel_tol=1e-4)
    assert r.model == MODEL
    ids = server.tokenize(text="the cat sat")
    assert r.usage.prompt_tokens == r.usage.total_tokens == len(ids)


def test_the_same_input_gives_the_same_vector_and_another_another(client: openai.OpenAI) -> None:
    (a,) = vectors(client, "the cat sat")
    (again,) = vectors(client, "the cat sat")
    (b,) = vectors(client, "the dog ran")
    assert again == pytest.approx(a, abs=1e-6)
    # two unit vectors of a random model: far from equal
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) > 1e-2


def test_the_vector_is_the_models_last_hidden_state_normalised(
    server: Server, client: openai.OpenAI, model_dir: Path
) -> None:
    import torch
    from transformers import LlamaModel

    ids = server.tokenize(text="Paris in the rain")
    (got,) = vectors(client, "Paris in the rain")
    reference = LlamaModel.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = reference(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
    want = (hidden / hidden.norm()).tolist()
    assert got == pytest.approx(want, abs=1e-4)


def test_base64_is_the_same_vector_as_float32s(client: openai.OpenAI) -> None:
    (floats,) = vectors(client, "hello there")
    packed = client.embeddings.create(model=MODEL, input="hello there", encoding_format="base64")
    raw = packed.data[0].embedding
    assert isinstance(raw, str)
    decoded = array("f", base64.b64decode(raw)).tolist()
    assert len(decoded) == EMBEDDING_DIM
    assert decoded == pytest.approx(floats, abs=1e-6)
    # the SDK's default asks for base64 and decodes it itself
    default = client.embeddings.create(model=MODEL, input="hello there")
    assert default.data[0].embedding == pytest.approx(floats, abs=1e-6)


def test_several_inputs_strings_and_token_ids_keep_their_order(
    server: Server, client: openai.OpenAI
) -> None:
    texts = ["first document", "a second, longer document about the sea", "x"]
    alone = [vectors(client, t)[0] for t in texts]
    together = vectors(client, texts)
    assert len(together) == 3
    for one, batched in zip(alone, together, strict=True):
        assert batched == pytest.approx(one, abs=1e-5)
    ids = [server.tokenize(text=t) for t in texts]
    (by_ids,) = vectors(client, ids[1])  # one input as token ids
    assert by_ids == pytest.approx(alone[1], abs=1e-5)
    lists = client.embeddings.create(
        model=MODEL, input=[ids[2], ids[0]], encoding_format="float"
    )  # several inputs as token ids
    assert [d.embedding for d in lists.data] == [
        pytest.approx(alone[2], abs=1e-5),
        pytest.approx(alone[0], abs=1e-5),
    ]
    assert lists.usage.prompt_tokens == len(ids[2]) + len(ids[0])


def test_concurrent_requests_each_get_their_own_vector(client: openai.OpenAI) -> None:
    texts = [f"sentence number {i} of many" for i in range(8)]
    alone = {t: vectors(client, t)[0] for t in texts}
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda t: vectors(client, [t, "shared"])[0], texts))
    for t, vector in zip(texts, got, strict=True):
        assert vector == pytest.approx(alone[t], abs=1e-5)


def test_an_input_of_the_whole_context_embeds_and_one_more_token_is_a_400(
    client: openai.OpenAI,
) -> None:
    (full,) = vectors(client, [[(7 * i) % 200 + 10 for i in range(CONTEXT)]])
    assert len(full) == EMBEDDING_DIM
    with pytest.raises(openai.BadRequestError) as caught:
        vectors(client, [[11] * (CONTEXT + 1)])
    assert caught.value.body["param"] == "input"


def test_matryoshka_dimensions_are_vllms_truncation(client: openai.OpenAI) -> None:
    (full,) = vectors(client, "short and sweet")
    (short,) = vectors(client, "short and sweet", dimensions=64)
    assert len(short) == 64 and math.isclose(norm(short), 1, rel_tol=1e-4)
    head = full[:64]
    assert short == pytest.approx([x / norm(head) for x in head], abs=1e-4)
    (same,) = vectors(client, "short and sweet", dimensions=EMBEDDING_DIM)
    assert same == pytest.approx(full, abs=1e-6)


@pytest.mark.parametrize(
    ("dimensions", "words"),
    [(48, "Matryoshka dimensions"), (EMBEDDING_DIM + 1, f"more than the model's {EMBEDDING_DIM}")],
    ids=["not-a-matryoshka-dimension", "too-many"],
)
def test_a_dimension_the_model_cannot_give_is_a_400_naming_dimensions(
    client: openai.OpenAI, dimensions: int, words: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        vectors(client, "x", dimensions=dimensions)
    assert caught.value.body["param"] == "dimensions"
    assert words in caught.value.body["message"]


def test_chat_and_completions_are_400s_naming_model(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    assert chat.value.body["param"] == "model"
    assert "embedding model" in chat.value.body["message"]
    with pytest.raises(openai.BadRequestError) as completion:
        client.completions.create(model=MODEL, prompt="hi", max_tokens=4)
    assert completion.value.body["param"] == "model"
    # and the engine still embeds afterwards
    assert len(vectors(client, "still here")[0]) == EMBEDDING_DIM


def _built(model_dir: Path, *words: str):  # type: ignore[no-untyped-def]
    """A vLLM engine built for the model, never started (the card is known by then)."""
    spec = engine_spec("vllm")
    card, tok = load(ModelConfig(model_path=str(model_dir)), spec)
    return build_engine(spec, card, tok, {"engine_args": [*VLLM_ARGS, *words]})


@pytest.mark.asyncio
async def test_the_same_model_run_for_generation_does_not_claim_embedding(
    model_dir: Path,
) -> None:
    pooling = _built(model_dir, *POOLING_ARGS).card.capabilities
    assert (pooling.embedding_dim, pooling.generates, pooling.shortens_embeddings) == (
        EMBEDDING_DIM,
        False,
        True,
    )
    engine = _built(model_dir)
    caps = engine.card.capabilities
    assert (caps.embedding_dim, caps.generates, caps.shortens_embeddings) == (0, True, False)
    assert caps.structural_tags and caps.logprobs
    with pytest.raises(EngineError) as caught:
        await engine.embed([[1, 2, 3]], None)
    assert caught.value.kind == "refused" and caught.value.param == "model"
    with pytest.raises(StartupError, match="classify"):
        _built(model_dir, *POOLING_ARGS, "--convert", "classify")
