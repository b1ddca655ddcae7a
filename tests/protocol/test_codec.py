"""The wire codec: random round trips, tolerance of a newer peer's fields,
defaults for missing ones, and one CodecError for anything malformed."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rotor.model.builtin import builtin_test_model
from rotor.model.card import Capabilities, ModelCard, content_hash, echo_card
from rotor.protocol import codec
from rotor.protocol.codec import CodecError
from rotor.protocol.engine import (
    EngineError,
    EngineOutput,
    EngineRequest,
    OutputParams,
    PromptLogprob,
    SamplingParams,
    StopParams,
    TokenLogprob,
)
from rotor.protocol.kv import AllCleared, BlocksRemoved, BlocksStored, KVSnapshot

CARD, TOK = builtin_test_model()

# -- strategies -----------------------------------------------------------------

token = st.integers(0, 2**32 - 1)
tokens = st.lists(token, max_size=20)
small_int = st.integers(-(2**31), 2**31)
number = st.floats(allow_nan=False) | st.just(float("-inf"))
text = st.text(max_size=20)
json_value = st.recursive(
    st.none() | st.booleans() | small_int | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=10,
)
json_map = st.dictionaries(text, json_value, max_size=4)

sampling = st.builds(
    SamplingParams,
    temperature=number,
    top_p=number,
    top_k=small_int,
    min_p=number,
    seed=st.none() | st.integers(0, 2**64 - 1),
    presence_penalty=number,
    frequency_penalty=number,
    repetition_penalty=number,
    guided=st.none() | json_map,
    logit_bias=st.none()
    | st.dictionaries(st.integers(0, 2**32 - 1), st.floats(-100, 100), max_size=4),
)
stop = st.builds(
    StopParams,
    max_tokens=small_int,
    min_tokens=small_int,
    stop_token_ids=tokens,
    eos_token_ids=tokens,
    visible_stop_token_ids=tokens,
    ignore_eos=st.booleans(),
)
output_params = st.builds(
    OutputParams,
    logprobs=st.booleans(),
    top_logprobs=small_int,
    skip_special_tokens=st.booleans(),
    prompt_logprobs=st.none() | small_int,
)
requests = st.builds(
    EngineRequest,
    request_id=text,
    model=text,
    token_ids=tokens,
    sampling=sampling,
    stop=stop,
    output=output_params,
    n=small_int,
    annotations=json_map,
    session_id=st.none() | text,
    lora=st.none() | text,
    cache_salt=st.none() | text,
    priority=st.integers(-(2**63), 2**63 - 1),
)
logprob = st.builds(
    TokenLogprob,
    token_id=token,
    logprob=number,
    top=st.lists(st.tuples(token, number), max_size=5),
)
prompt_logprob = st.builds(
    PromptLogprob,
    token_id=token,
    logprob=number,
    rank=st.integers(0, 2**31),
    top=st.lists(st.tuples(token, number), max_size=5),
)
outputs = st.builds(
    EngineOutput,
    index=st.integers(0, 64),
    token_ids=tokens,
    text=st.none() | text,
    logprobs=st.none() | st.lists(logprob, max_size=8),
    finish=st.none() | st.sampled_from(["eos", "length", "stop", "cancelled", "error"]),
    matched=st.none() | token | text,
    cached_tokens=st.none() | st.integers(0, 2**31),
    error=st.none() | text,
    prompt_logprobs=st.none() | st.lists(prompt_logprob, max_size=8),
)
hash64 = st.integers(0, 2**64 - 1)
kv_events = st.one_of(
    st.builds(
        BlocksStored,
        event_id=st.integers(1, 2**63),
        block_hashes=st.lists(hash64, max_size=8),
        parent_hash=st.none() | hash64,
        block_size=st.integers(1, 1024),
    ),
    st.builds(BlocksRemoved, event_id=st.integers(1, 2**63), block_hashes=st.lists(hash64)),
    st.builds(AllCleared, event_id=st.integers(1, 2**63)),
)
cards = st.builds(
    ModelCard,
    name=text,
    path=st.none() | text,
    context_length=st.integers(1, 2**40),
    eos_token_ids=tokens,
    bos_token=st.none() | text,
    eos_token=st.none() | text,
    unk_token=st.none() | text,
    pad_token=st.none() | text,
    chat_templates=st.dictionaries(text, text, max_size=3),
    tool_call_parser=st.none() | text,
    reasoning_parser=st.none() | text,
    generation_defaults=json_map,
    capabilities=st.builds(
        Capabilities,
        **{
            f.name: st.booleans() if isinstance(f.default, bool) else st.integers(0, 1 << 16)
            for f in dataclasses.fields(Capabilities)
        },
    ),
    created=st.integers(0, 2**40),
    tokenizer_hash=st.none() | st.text("0123456789abcdef", min_size=64, max_size=64),
    aliases=st.lists(text, max_size=3),
)


def repack(data: bytes, change: Any) -> bytes:
    """The payload's map, edited by `change(map)`, packed again."""
    m = msgpack.unpackb(data)
    change(m)
    return msgpack.packb(m)


# -- round trips ------------------------------------------------------------------


@given(requests)
def test_request_round_trip(request: EngineRequest) -> None:
    assert codec.decode_request(codec.encode_request(request)) == request


@given(outputs)
def test_output_round_trip(output: EngineOutput) -> None:
    decoded = codec.decode_output(codec.encode_output(output))
    assert decoded == output
    assert type(decoded.token_ids) is list
    if decoded.logprobs:
        assert all(type(lp.top) is list for lp in decoded.logprobs)
        assert all(type(pair) is tuple for lp in decoded.logprobs for pair in lp.top)
    if decoded.prompt_logprobs:
        assert all(type(lp.top) is list for lp in decoded.prompt_logprobs)
        assert all(type(pair) is tuple for lp in decoded.prompt_logprobs for pair in lp.top)


@given(st.lists(outputs, max_size=5))
def test_a_batch_of_outputs_round_trips_in_order(batch: list[EngineOutput]) -> None:
    assert codec.decode_outputs(codec.encode_outputs(batch)) == batch


@given(text, st.sampled_from(["refused", "unavailable", "internal"]), st.none() | text)
def test_error_round_trip(message: str, kind: Any, param: str | None) -> None:
    error = codec.decode_error(codec.encode_error(EngineError(message, kind, param)))
    assert isinstance(error, EngineError)
    assert (error.message, error.kind, error.param) == (message, kind, param)


@given(kv_events)
def test_kv_event_round_trip(event: Any) -> None:
    assert codec.decode_kv_event(codec.encode_kv_event(event)) == event


@given(st.integers(0, 2**63), st.integers(1, 1024), st.lists(st.tuples(hash64, st.none() | hash64)))
def test_kv_snapshot_round_trip(event_id: int, block_size: int, blocks: list) -> None:
    snap = KVSnapshot(event_id, block_size, blocks)
    assert codec.decode_kv_snapshot(codec.encode_kv_snapshot(snap)) == snap


@given(cards)
def test_card_round_trip_without_tokenizer(card: ModelCard) -> None:
    decoded, tokenizer = codec.decode_card(codec.encode_card(card))
    assert decoded == card and tokenizer is None
    assert decoded.template_hash() == card.template_hash()


def test_card_with_its_tokenizer_rebuilds_the_tokenizer() -> None:
    decoded, tokenizer = codec.decode_card(codec.encode_card(CARD, TOK))
    assert tokenizer is not None
    digest = content_hash(TOK.raw.to_str())
    assert decoded == dataclasses.replace(CARD, tokenizer_hash=digest)
    assert content_hash(tokenizer.raw.to_str()) == digest
    sample = "<|im_start|>user\nHello, wörld! 東京<|im_end|>"
    assert tokenizer.encode(sample) == TOK.encode(sample)
    assert tokenizer.special_ids == TOK.special_ids
    assert tokenizer.vocab_size == TOK.vocab_size


def test_card_can_carry_only_the_tokenizer_hash() -> None:
    data = codec.encode_card(CARD, TOK, tokenizer_json=False)
    decoded, tokenizer = codec.decode_card(data)
    assert tokenizer is None
    assert decoded.tokenizer_hash == content_hash(TOK.raw.to_str())
    assert len(data) < 4096  # the card without the JSON stays small


def test_a_card_whose_hash_is_not_its_tokenizers_is_refused() -> None:
    wrong = dataclasses.replace(CARD, tokenizer_hash="0" * 64)
    with pytest.raises(ValueError, match="tokenizer_hash"):
        codec.encode_card(wrong, TOK)
    data = repack(codec.encode_card(CARD, TOK), lambda m: m.update(tokenizer_hash="0" * 64))
    with pytest.raises(CodecError, match="does not match"):
        codec.decode_card(data)
    data = repack(codec.encode_card(CARD, TOK), lambda m: m.update(tokenizer_json="{}"))
    with pytest.raises(CodecError, match="does not match"):
        codec.decode_card(data)


def test_a_card_s_aliases_must_be_strings() -> None:
    data = repack(codec.encode_card(CARD), lambda m: m.update(aliases=["a", 1]))
    with pytest.raises(CodecError, match="card.aliases: expected a list of strings"):
        codec.decode_card(data)
    older = repack(codec.encode_card(CARD), lambda m: m.pop("aliases"))  # a worker before aliases
    assert codec.decode_card(older)[0].aliases == []


def test_a_broken_tokenizer_json_is_a_codec_error() -> None:
    def broken(m: dict) -> None:
        m["tokenizer_json"] = '{"not": "a tokenizer"}'
        m["tokenizer_hash"] = content_hash(m["tokenizer_json"])

    with pytest.raises(CodecError, match="not a tokenizer"):
        codec.decode_card(repack(codec.encode_card(CARD, TOK), broken))


def test_template_hash_names_the_templates() -> None:
    """sha256 of the templates as compact JSON with sorted names."""
    templates = {"tool_use": "{{ tools }}", "default": "Grüße {{ messages }}"}
    card = dataclasses.replace(CARD, chat_templates=templates)
    expected = '{"default":"Grüße {{ messages }}","tool_use":"{{ tools }}"}'
    assert card.template_hash() == hashlib.sha256(expected.encode()).hexdigest()
    reordered = dataclasses.replace(card, chat_templates=dict(reversed(templates.items())))
    assert reordered.template_hash() == card.template_hash()
    assert dataclasses.replace(card, chat_templates={}).template_hash() == content_hash("{}")
    assert echo_card().template_hash() == content_hash("{}")


def test_a_one_token_output_is_small() -> None:
    data = codec.encode_output(EngineOutput(index=0, token_ids=[15339]))
    assert msgpack.unpackb(data) == {"index": 0, "token_ids": [15339]}


def test_a_streams_plain_outputs_travel_as_their_token_ids() -> None:
    plain = [EngineOutput(token_ids=[15339]), EngineOutput(token_ids=[7, 8])]
    last = EngineOutput(token_ids=[2], finish="eos", matched=2)
    data = codec.encode_outputs([*plain, last])
    assert msgpack.unpackb(data) == [
        [15339],
        [7, 8],
        {"index": 0, "token_ids": [2], "finish": "eos", "matched": 2},
    ]
    assert codec.decode_outputs(data) == [*plain, last]
    assert (
        codec.decode_outputs(codec.encode_outputs([EngineOutput(index=1, token_ids=[3])]))[0].index
        == 1
    )
    # for a reader older than that form (a frontend that predates batches): maps, all of them
    old = codec.encode_outputs(plain, compact=False)
    assert msgpack.unpackb(old) == [
        {"index": 0, "token_ids": [15339]},
        {"index": 0, "token_ids": [7, 8]},
    ]
    assert codec.decode_outputs(old) == plain


def test_prompt_logprobs_travel_once_as_entries_and_ask_only_when_set() -> None:
    """A first output with the prompt's logprobs is a map of [id, logprob,
    rank, top] entries (never the compact form); a request that asks for
    none sends null, which an older peer ignores as any unknown field."""
    scored = [PromptLogprob(5, -0.5, 1, [(5, -0.5), (6, -1.5)]), PromptLogprob(9, -3.0, 4)]
    first = EngineOutput(token_ids=[7], prompt_logprobs=scored)
    data = codec.encode_outputs([first, EngineOutput(token_ids=[8])])
    assert msgpack.unpackb(data) == [
        {
            "index": 0,
            "token_ids": [7],
            "prompt_logprobs": [[5, -0.5, 1, [[5, -0.5], [6, -1.5]]], [9, -3.0, 4, []]],
        },
        [8],
    ]
    assert codec.decode_outputs(data) == [first, EngineOutput(token_ids=[8])]
    asked = EngineRequest("r", "m", [1, 2], output=OutputParams(prompt_logprobs=3))
    assert msgpack.unpackb(codec.encode_request(asked))["output"]["prompt_logprobs"] == 3
    assert codec.decode_request(codec.encode_request(asked)) == asked
    plain = msgpack.unpackb(codec.encode_request(EngineRequest("r", "m", [1])))
    assert plain["output"]["prompt_logprobs"] is None


# -- a newer peer, an older peer ----------------------------------------------------


def test_unknown_fields_are_ignored_everywhere() -> None:
    request = EngineRequest("r", "m", [1, 2], n=2, annotations={"mock": {"output": "x"}})

    def newer_request(m: dict) -> None:
        m["deadline_ms"] = 3
        m["sampling"]["mirostat"] = {"tau": 5}
        m["stop"]["stop_strings_v2"] = ["x"]
        m["output"]["prompt_logprobs_v2"] = True

    assert codec.decode_request(repack(codec.encode_request(request), newer_request)) == request
    out = EngineOutput(0, [5], logprobs=[TokenLogprob(5, -0.5, [(6, -1.0)])], finish="eos")

    def newer_output(m: dict) -> None:
        m["spec_decode_accepted"] = 2
        m["logprobs"][0].append("rank-1")  # an extra element of a logprob entry

    assert codec.decode_output(repack(codec.encode_output(out), newer_output)) == out
    data = msgpack.packb([msgpack.unpackb(repack(codec.encode_output(out), newer_output))])
    assert codec.decode_outputs(data) == [out]
    error = repack(
        codec.encode_error(EngineError("busy", "unavailable")), lambda m: m.update(retry_ms=5)
    )
    assert codec.decode_error(error).kind == "unavailable"
    stored = BlocksStored(1, [7, 8], None, 16)
    data = repack(codec.encode_kv_event(stored), lambda m: m.update(medium="gpu"))
    assert codec.decode_kv_event(data) == stored
    snap = KVSnapshot(3, 16, [(7, None), (8, 7)])

    def newer_snapshot(m: dict) -> None:
        m["worker"] = "w1"
        m["blocks"][1].append("gpu")

    assert codec.decode_kv_snapshot(repack(codec.encode_kv_snapshot(snap), newer_snapshot)) == snap

    def newer_card(m: dict) -> None:
        m["quantization"] = "fp8"
        m["capabilities"]["speculative"] = True

    decoded, _ = codec.decode_card(repack(codec.encode_card(CARD), newer_card))
    assert decoded == CARD


def test_an_unknown_error_kind_reads_as_internal() -> None:
    data = msgpack.packb({"message": "quota", "kind": "throttled", "param": None})
    error = codec.decode_error(data)
    assert (error.message, error.kind) == ("quota", "internal")


def test_missing_optional_fields_take_their_defaults() -> None:
    assert codec.decode_request(
        msgpack.packb({"request_id": "r", "model": "m", "token_ids": [1]})
    ) == EngineRequest("r", "m", [1])
    assert codec.decode_request(
        msgpack.packb(
            {"request_id": "r", "model": "m", "token_ids": [1], "stop": {"max_tokens": 4}}
        )
    ).stop == StopParams(max_tokens=4)
    assert codec.decode_output(msgpack.packb({})) == EngineOutput()
    # an older sender's request carries no cache_salt: it has none
    assert codec.decode_request(msgpack.packb(REQUEST)).cache_salt is None
    assert codec.decode_error(msgpack.packb({"message": "m"})).kind == "internal"
    assert codec.decode_kv_event(
        msgpack.packb({"type": "stored", "event_id": 1, "block_hashes": []})
    ) == (BlocksStored(1, []))
    card, _ = codec.decode_card(msgpack.packb({"name": "older"}))
    assert card == ModelCard(name="older")


def test_a_cache_salt_travels_only_when_set() -> None:
    """An unsalted request encodes as before salts (an older worker reads it
    alike); a salted one carries it."""
    plain = msgpack.unpackb(codec.encode_request(EngineRequest("r", "m", [1])))
    assert "cache_salt" not in plain
    salted = codec.encode_request(EngineRequest("r", "m", [1], cache_salt="tenant-a"))
    assert msgpack.unpackb(salted)["cache_salt"] == "tenant-a"
    assert codec.decode_request(salted).cache_salt == "tenant-a"
    with pytest.raises(codec.CodecError, match="cache_salt"):
        codec.decode_request(msgpack.packb({**REQUEST, "cache_salt": 7}))


# -- malformed payloads ---------------------------------------------------------------

REQUEST = {"request_id": "r", "model": "m", "token_ids": [1]}


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"\xc1", "not a msgpack message"),
        (b"", "not a msgpack message"),
        (msgpack.packb([1, 2]), "expected a map"),
        (msgpack.packb({"model": "m", "token_ids": [1]}), "required field"),
        (msgpack.packb({**REQUEST, "token_ids": "abc"}), "token_ids"),
        (msgpack.packb({**REQUEST, "token_ids": [-1]}), "token_ids"),
        (msgpack.packb({**REQUEST, "token_ids": [2**32]}), "token_ids"),
        (msgpack.packb({**REQUEST, "n": "2"}), "request.n: expected an integer"),
        (msgpack.packb({**REQUEST, "n": True}), "request.n"),
        (msgpack.packb({**REQUEST, "sampling": []}), "request.sampling"),
        (msgpack.packb({**REQUEST, "sampling": {"temperature": "hot"}}), "temperature"),
        (msgpack.packb({**REQUEST, "sampling": {"guided": "json"}}), "guided"),
        (msgpack.packb({**REQUEST, "sampling": {"logit_bias": {"1": 2}}}), "logit_bias"),
        (msgpack.packb({**REQUEST, "sampling": {"logit_bias": [[1, "x"]]}}), "logit_bias"),
        (msgpack.packb({**REQUEST, "sampling": {"logit_bias": [[-1, 2]]}}), "logit_bias"),
        (msgpack.packb({**REQUEST, "stop": {"ignore_eos": 1}}), "ignore_eos"),
        (msgpack.packb({**REQUEST, "annotations": [1]}), "annotations"),
    ],
)
def test_malformed_requests_are_codec_errors(payload: bytes, match: str) -> None:
    with pytest.raises(CodecError, match=match):
        codec.decode_request(payload)


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({"index": "0"}, "index"),
        ({"token_ids": [1.5]}, "token_ids"),
        ({"token_ids": 7}, "token_ids"),
        ({"text": b"x"}, "text"),
        ({"finish": "done"}, "finish"),
        ({"finish": ["eos"]}, "finish"),
        ({"matched": 1.0}, "matched"),
        ({"cached_tokens": None, "error": 3}, "error"),
        ({"logprobs": {"a": 1}}, "logprobs"),
        ({"logprobs": [[1, -0.5]]}, "logprobs"),
        ({"logprobs": [[1, "x", []]]}, "logprobs"),
        ({"logprobs": [[1, -0.5, [[2]]]]}, "top"),
        ({"logprobs": [[1, -0.5, [[2, -1.0, 0]]]]}, "top"),
        ({"logprobs": [[1, -0.5, [["a", -1.0]]]]}, "top"),
        ({"logprobs": [[1, -0.5, [[2, None]]]]}, "top"),
        ({"logprobs": [[1, -0.5, 3]]}, "logprobs"),
        ({"prompt_logprobs": {"a": 1}}, "prompt_logprobs"),
        ({"prompt_logprobs": [[1, -0.5, []]]}, "prompt_logprobs"),
        ({"prompt_logprobs": [[1, -0.5, "1", []]]}, "prompt_logprobs"),
        ({"prompt_logprobs": [[1, -0.5, 1, [[2]]]]}, "top"),
        ({"prompt_logprobs": [[1, -0.5, 1, 3]]}, "top"),
    ],
)
def test_malformed_outputs_are_codec_errors(payload: dict, match: str) -> None:
    with pytest.raises(CodecError, match=match):
        codec.decode_output(msgpack.packb(payload))
    with pytest.raises(CodecError, match=match):
        codec.decode_outputs(msgpack.packb([{}, payload]))


@pytest.mark.parametrize("item", [[1.5], ["a"], [-1], [2**32], [[1]]])
def test_a_plain_output_that_is_not_token_ids_is_a_codec_error(item: list) -> None:
    with pytest.raises(CodecError, match="token ids"):
        codec.decode_outputs(msgpack.packb([[1], item]))


@pytest.mark.parametrize(
    ("decode", "payload", "match"),
    [
        (codec.decode_outputs, {"index": 0}, "outputs: expected a list"),
        (codec.decode_error, {"kind": "refused"}, "message is missing"),
        (codec.decode_error, {"message": 1}, "error.message"),
        (codec.decode_error, {"message": "m", "param": 1}, "error.param"),
        (codec.decode_kv_event, {"type": "moved", "event_id": 1}, "kv_event.type"),
        (codec.decode_kv_event, {"type": ["stored"], "event_id": 1}, "kv_event.type"),
        (codec.decode_kv_event, {"type": "cleared"}, "required field"),
        (codec.decode_kv_event, {"type": "removed", "event_id": 1, "block_hashes": [-1]}, "hashes"),
        (
            codec.decode_kv_event,
            {"type": "stored", "event_id": 1, "block_hashes": [1], "parent_hash": -1},
            "parent_hash",
        ),
        (codec.decode_kv_snapshot, {"event_id": 1, "block_size": 4, "blocks": [[1]]}, "blocks"),
        (
            codec.decode_kv_snapshot,
            {"event_id": 1, "block_size": 4, "blocks": [["a", None]]},
            "blocks",
        ),
        (codec.decode_card, {"name": 3}, "card.name"),
        (codec.decode_card, {"name": "m", "chat_templates": {"default": 1}}, "chat_templates"),
        (codec.decode_card, {"name": "m", "capabilities": {"logprobs": "yes"}}, "logprobs"),
        (codec.decode_card, {"name": "m", "tokenizer_json": 5}, "tokenizer_json"),
    ],
)
def test_other_malformed_payloads_are_codec_errors(decode: Any, payload: Any, match: str) -> None:
    with pytest.raises(CodecError, match=match):
        decode(msgpack.packb(payload))


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_codec_error(data: bytes) -> None:
    for decode in (
        codec.decode_request,
        codec.decode_output,
        codec.decode_outputs,
        codec.decode_error,
        codec.decode_kv_event,
        codec.decode_kv_snapshot,
        codec.decode_card,
    ):
        try:
            decode(data)
        except CodecError:
            pass


def test_codec_error_is_a_value_error() -> None:
    assert issubclass(CodecError, ValueError)


def test_every_dataclass_field_has_a_check() -> None:
    """A field added to the contract without the codec fails here, not on the wire."""
    for cls, schema in [
        (EngineRequest, codec._REQUEST),
        (SamplingParams, codec._SAMPLING),
        (StopParams, codec._STOP),
        (OutputParams, codec._OUTPUT_PARAMS),
        (ModelCard, codec._CARD),
        (Capabilities, codec._CAPABILITIES),
    ]:
        assert set(schema) == {f.name for f in dataclasses.fields(cls)}, cls.__name__


def test_score_requests_and_answers_round_trip() -> None:
    from rotor.protocol.scores import ScorePair

    pairs = [ScorePair([1, 2, 3], 2), ScorePair([4], None)]
    assert codec.decode_score_request(codec.encode_score_request(pairs)) == pairs
    scores = [0.125, 0.7705397258802893]  # float64: exactly as the engine gave them
    assert codec.decode_scores(codec.encode_scores(scores)) == scores
    error = EngineError("no", "refused", "documents")
    with pytest.raises(EngineError) as caught:
        codec.decode_scores(codec.encode_score_error(error))
    assert caught.value.param == "documents"
    with pytest.raises(CodecError):
        codec.decode_score_request(msgpack.packb({"pairs": [[[1, 2]]]}))


def test_a_cards_token_types_cross_the_wire() -> None:
    card, tok = builtin_test_model("m")
    card.token_type_ids = True
    card.capabilities.scores_pairs = True
    back, _ = codec.decode_card(codec.encode_card(card, tok))
    assert back.token_type_ids and back.capabilities.scores_pairs
