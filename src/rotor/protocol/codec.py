"""msgpack encoding of what crosses a wire: the token contract, KV events, model cards.

Every message is a msgpack map keyed by field name: a field a newer peer added
is ignored, a missing optional field takes its dataclass default, and a peer
never depends on field order. Two shapes are arrays for speed, and ignore extra
trailing elements the same way: a logprob entry `[token_id, logprob, top]` (its
`top` exact `[token_id, logprob]` pairs), a prompt logprob entry `[token_id,
logprob, rank, top]` and a snapshot block `[hash, parent]`.
An output omits its fields that are None (their default), so a one-token
output is `{"index": 0, "token_ids": [id]}`.

Anything malformed (not msgpack, the wrong shape or type, a missing required
field, a tokenizer whose JSON does not match its hash) raises `CodecError`;
decoders check types, never values: `n = 0` decodes, and the engine refuses it.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import msgpack
import tokenizers

from rotor.model.card import Capabilities, ModelCard, content_hash
from rotor.model.tokenizer import Tokenizer
from rotor.protocol.engine import (
    Cause,
    EngineError,
    EngineImage,
    EngineOutput,
    EngineRequest,
    ErrorKind,
    Finish,
    OutputParams,
    PromptLogprob,
    SamplingParams,
    StopParams,
    TokenLogprob,
)
from rotor.protocol.kv import (
    MEDIA,
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KVEvent,
    KVSnapshot,
    Medium,
)
from rotor.protocol.scores import ScorePair

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    D = TypeVar("D", bound=DataclassInstance)


class CodecError(ValueError):
    """A payload that is not a valid encoding of what the decoder expects."""


_packb = msgpack.packb
# each literal by its name: a decoded string looked up is that literal, or unknown
_FINISHES: dict[str, Finish] = {name: name for name in get_args(Finish)}
_ERROR_KINDS: dict[str, ErrorKind] = {name: name for name in get_args(ErrorKind)}
_CAUSES: dict[str, Cause] = {name: name for name in get_args(Cause)}

# -- field checks: (value, field name) -> the value, or CodecError --------------

Check = Callable[[Any, str], Any]


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False)
    except Exception as exc:  # msgpack raises several types for bad input
        raise CodecError(f"not a msgpack message: {exc}") from None


def _unpack_tuples(data: bytes) -> Any:
    """Arrays as tuples: cheaper to unpack, and a logprob's pairs come out as the
    tuples TokenLogprob keeps (outputs carry no free-form values that a list would suit)."""
    try:
        return msgpack.unpackb(data, raw=False, use_list=False)
    except Exception as exc:
        raise CodecError(f"not a msgpack message: {exc}") from None


def _wrong(name: str, expected: str, value: Any) -> CodecError:
    return CodecError(f"{name}: expected {expected}, got {type(value).__name__}")


def _map(value: Any, name: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _wrong(name, "a map", value)
    return value


def _str(value: Any, name: str) -> str:
    if type(value) is not str:
        raise _wrong(name, "a string", value)
    return value


def _int(value: Any, name: str) -> int:
    if type(value) is not int:
        raise _wrong(name, "an integer", value)
    return value


def _float(value: Any, name: str) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise _wrong(name, "a number", value)


def _bool(value: Any, name: str) -> bool:
    if type(value) is not bool:
        raise _wrong(name, "a boolean", value)
    return value


def _ints_in(typecode: str, what: str) -> Check:
    """A list of integers in the array typecode's range, checked in C."""

    def check(value: Any, name: str) -> list[int]:
        if type(value) is not list:
            raise _wrong(name, f"a list of {what}", value)
        try:
            array(typecode, value)
        except (TypeError, OverflowError):
            raise CodecError(f"{name}: expected a list of {what}") from None
        return value

    return check


_token_ids = _ints_in("I", "token ids (u32)")
_hashes = _ints_in("Q", "block hashes (u64)")


def _str_map(value: Any, name: str) -> dict[str, str]:
    m = _map(value, name)
    for key, item in m.items():
        if type(key) is not str or type(item) is not str:
            raise CodecError(f"{name}: expected a map of strings to strings")
    return m


def _strs(value: Any, name: str) -> list[str]:
    if type(value) is not list or any(type(item) is not str for item in value):
        raise _wrong(name, "a list of strings", value)
    return value


def _optional(check: Check) -> Check:
    def optional(value: Any, name: str) -> Any:
        return None if value is None else check(value, name)

    return optional


def _build(cls: type[D], schema: Mapping[str, Check], value: Any, name: str) -> D:
    """`cls` from a map: known fields checked, unknown ones ignored, missing ones defaulted."""
    data = _map(value, name)
    kwargs = {
        key: schema[key](item, f"{name}.{key}") for key, item in data.items() if key in schema
    }
    try:
        return cls(**kwargs)
    except TypeError:
        missing = [f.name for f in fields(cls) if f.name not in kwargs]
        raise CodecError(f"{name}: a required field is missing (one of {missing})") from None


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _as_map(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


# -- EngineRequest -----------------------------------------------------------


def _bias_map(value: Any, name: str) -> dict[int, float]:
    """logit_bias travels as [[token id, bias], ...] (msgpack map keys are strings)."""
    if type(value) is not list:
        raise _wrong(name, "a list of [token id, bias] pairs", value)
    out: dict[int, float] = {}
    for pair in value:
        if type(pair) not in (list, tuple) or len(pair) != 2:
            raise CodecError(f"{name}: expected a list of [token id, bias] pairs")
        out[_token_ids([pair[0]], name)[0]] = _float(pair[1], name)
    return out


def _bias_pairs(bias: dict[int, float] | None) -> list[list[Any]] | None:
    return None if bias is None else [[t, b] for t, b in bias.items()]


_SAMPLING: dict[str, Check] = {
    "temperature": _float,
    "top_p": _float,
    "top_k": _int,
    "min_p": _float,
    "seed": _optional(_int),
    "presence_penalty": _float,
    "frequency_penalty": _float,
    "repetition_penalty": _float,
    "guided": _optional(_map),
    "logit_bias": _optional(_bias_map),
}
_STOP: dict[str, Check] = {
    "max_tokens": _int,
    "min_tokens": _int,
    "stop_token_ids": _token_ids,
    "eos_token_ids": _token_ids,
    "visible_stop_token_ids": _token_ids,
    "ignore_eos": _bool,
}
_OUTPUT_PARAMS: dict[str, Check] = {
    "logprobs": _bool,
    "top_logprobs": _int,
    "skip_special_tokens": _bool,
    "prompt_logprobs": _optional(_int),
}


def _bytes(value: Any, name: str) -> bytes:
    if type(value) is not bytes:
        raise _wrong(name, "bytes", value)
    return value


_IMAGE: dict[str, Check] = {
    "content_hash": _str,
    "offset": _int,
    "length": _int,
    "placeholder": _int,
    "data": _optional(_bytes),
}
_IMAGE_NAMES = _names(EngineImage)


def _images(value: Any, name: str) -> list[EngineImage]:
    if type(value) is not list:
        raise _wrong(name, "a list of images", value)
    return [_build(EngineImage, _IMAGE, item, f"{name}[{i}]") for i, item in enumerate(value)]


_REQUEST: dict[str, Check] = {
    "request_id": _str,
    "model": _str,
    "token_ids": _token_ids,
    "sampling": lambda v, n: _build(SamplingParams, _SAMPLING, v, n),
    "stop": lambda v, n: _build(StopParams, _STOP, v, n),
    "output": lambda v, n: _build(OutputParams, _OUTPUT_PARAMS, v, n),
    "n": _int,
    "annotations": _map,
    "session_id": _optional(_str),
    "lora": _optional(_str),
    "cache_salt": _optional(_str),
    "priority": _int,
    "images": _images,
}
_SAMPLING_NAMES, _STOP_NAMES = _names(SamplingParams), _names(StopParams)
_OUTPUT_PARAMS_NAMES = _names(OutputParams)


def encode_request(request: EngineRequest) -> bytes:
    return _packb(
        {
            "request_id": request.request_id,
            "model": request.model,
            "token_ids": request.token_ids,
            "sampling": {
                **_as_map(request.sampling, _SAMPLING_NAMES),
                "logit_bias": _bias_pairs(request.sampling.logit_bias),
            },
            "stop": _as_map(request.stop, _STOP_NAMES),
            "output": _as_map(request.output, _OUTPUT_PARAMS_NAMES),
            "n": request.n,
            "annotations": request.annotations,
            "session_id": request.session_id,
            "lora": request.lora,
            **({"cache_salt": request.cache_salt} if request.cache_salt is not None else {}),
            **({"priority": request.priority} if request.priority else {}),
            **(
                {"images": [_as_map(image, _IMAGE_NAMES) for image in request.images]}
                if request.images
                else {}
            ),
        }
    )


def decode_request(data: bytes) -> EngineRequest:
    return _build(EngineRequest, _REQUEST, _unpack(data), "request")


# -- EngineOutput: the per-token path, written out by hand ----------------------


def _output_map(out: EngineOutput) -> dict[str, Any]:
    m: dict[str, Any] = {"index": out.index, "token_ids": out.token_ids}
    if out.text is not None:
        m["text"] = out.text
    if out.logprobs is not None:
        m["logprobs"] = [(lp.token_id, lp.logprob, lp.top) for lp in out.logprobs]
    if out.finish is not None:
        m["finish"] = out.finish
    if out.matched is not None:
        m["matched"] = out.matched
    if out.cached_tokens is not None:
        m["cached_tokens"] = out.cached_tokens
    if out.error is not None:
        m["error"] = out.error
    if out.kv_transfer is not None:
        m["kv_transfer"] = out.kv_transfer
    if out.prompt_logprobs is not None:
        m["prompt_logprobs"] = [
            (lp.token_id, lp.logprob, lp.rank, lp.top) for lp in out.prompt_logprobs
        ]
    return m


def _number(value: Any) -> bool:
    return type(value) is float or type(value) is int


def _logprobs(value: Any, name: str) -> list[TokenLogprob]:
    """Entries [token_id, logprob, top], top as exact [token_id, logprob] pairs."""
    if type(value) is not tuple:
        raise _wrong(name, "a list", value)
    entries = []
    for entry in value:
        if type(entry) is not tuple or len(entry) < 3:
            raise _wrong(name, "[token_id, logprob, top] entries", entry)
        token_id, logprob, top = entry[0], entry[1], entry[2]
        if type(token_id) is not int or not _number(logprob) or type(top) is not tuple:
            raise CodecError(f"{name}: expected [token_id, logprob, top], got {entry!r}")
        entries.append(TokenLogprob(token_id, logprob, _top_pairs(top, f"{name}.top")))
    return entries


def _top_pairs(top: Any, name: str) -> list[tuple[int, float]]:
    """A token's alternatives: exact [token_id, logprob] pairs."""
    if type(top) is not tuple:
        raise CodecError(f"{name}: expected a list of [token_id, logprob] pairs, got {top!r}")
    for pair in top:
        if type(pair) is not tuple or len(pair) != 2 or type(pair[0]) is not int:
            raise CodecError(f"{name}: expected [token_id, logprob] pairs, got {pair!r}")
        if not _number(pair[1]):
            raise CodecError(f"{name}: expected [token_id, logprob] pairs, got {pair!r}")
    return list(top)


def _prompt_logprobs(value: Any, name: str) -> list[PromptLogprob]:
    """Entries [token_id, logprob, rank, top], top as exact [token_id, logprob] pairs."""
    if type(value) is not tuple:
        raise _wrong(name, "a list", value)
    entries = []
    for entry in value:
        if type(entry) is not tuple or len(entry) < 4:
            raise _wrong(name, "[token_id, logprob, rank, top] entries", entry)
        token_id, logprob, rank = entry[0], entry[1], entry[2]
        if type(token_id) is not int or not _number(logprob) or type(rank) is not int:
            raise CodecError(f"{name}: expected [token_id, logprob, rank, top], got {entry!r}")
        entries.append(PromptLogprob(token_id, logprob, rank, _top_pairs(entry[3], f"{name}.top")))
    return entries


def _output(value: Any, name: str) -> EngineOutput:
    """An output from a map whose arrays are tuples (`_unpack_tuples`); the
    per-token path, so its checks are written out."""
    if type(value) is not dict:
        raise _wrong(name, "a map", value)
    get = value.get
    index, ids, text = get("index", 0), get("token_ids", ()), get("text")
    logprobs, finish, matched = get("logprobs"), get("finish"), get("matched")
    cached, error, transfer = get("cached_tokens"), get("error"), get("kv_transfer")
    if type(index) is not int:
        raise _wrong(f"{name}.index", "an integer", index)
    if type(ids) is not tuple:
        raise _wrong(f"{name}.token_ids", "a list of token ids", ids)
    ids = _token_ids(list(ids), f"{name}.token_ids")
    if text is not None and type(text) is not str:
        raise _wrong(f"{name}.text", "a string", text)
    if logprobs is not None:
        logprobs = _logprobs(logprobs, f"{name}.logprobs")
    if finish is not None:
        known = _FINISHES.get(finish) if type(finish) is str else None
        if known is None:
            raise CodecError(f"{name}.finish: expected one of {sorted(_FINISHES)}, got {finish!r}")
        finish = known
    if matched is not None and type(matched) is not int and type(matched) is not str:
        raise _wrong(f"{name}.matched", "a token id or a string", matched)
    if cached is not None and type(cached) is not int:
        raise _wrong(f"{name}.cached_tokens", "an integer", cached)
    if error is not None and type(error) is not str:
        raise _wrong(f"{name}.error", "a string", error)
    if transfer is not None:
        if type(transfer) is not dict:
            raise _wrong(f"{name}.kv_transfer", "a map", transfer)
        transfer = _lists(transfer)
    prompt = get("prompt_logprobs")
    if prompt is not None:
        prompt = _prompt_logprobs(prompt, f"{name}.prompt_logprobs")
    return EngineOutput(
        index=index,
        token_ids=ids,
        text=text,
        logprobs=logprobs,
        finish=finish,
        matched=matched,
        cached_tokens=cached,
        error=error,
        kv_transfer=transfer,
        prompt_logprobs=prompt,
    )


def _lists(value: Any) -> Any:
    """A value read with arrays as tuples, with lists again (kv_transfer's
    values go back onto the wire and into engines as they were)."""
    if type(value) is tuple or type(value) is list:
        return [_lists(v) for v in value]
    if type(value) is dict:
        return {k: _lists(v) for k, v in value.items()}
    return value


def encode_output(output: EngineOutput) -> bytes:
    return _packb(_output_map(output))


def decode_output(data: bytes) -> EngineOutput:
    return _output(_unpack_tuples(data), "output")


def encode_outputs(outputs: list[EngineOutput], compact: bool = True) -> bytes:
    """Several outputs (of one request, in order) as one message. A plain
    output (index 0, token ids and nothing else: nearly every one a stream
    carries) travels as its token ids alone, a third of the cost of a map
    to write and to read; `compact=False`: as maps, all of them, for a
    reader older than that form."""
    if not compact:
        return _packb([_output_map(out) for out in outputs])
    return _packb([_output_item(out) for out in outputs])


def _output_item(out: EngineOutput) -> Any:
    if (
        out.index == 0
        and out.finish is None
        and out.text is None
        and out.logprobs is None
        and out.matched is None
        and out.cached_tokens is None
        and out.error is None
        and out.kv_transfer is None
        and out.prompt_logprobs is None
    ):
        return out.token_ids
    return _output_map(out)


def decode_outputs(data: bytes) -> list[EngineOutput]:
    items = _unpack_tuples(data)
    if type(items) is not tuple:
        raise _wrong("outputs", "a list", items)
    return [
        EngineOutput(token_ids=_token_ids(list(item), "outputs[]"))
        if type(item) is tuple
        else _output(item, "outputs[]")
        for item in items
    ]


# -- EngineError ---------------------------------------------------------------


# -- embeddings (request/reply on a worker's embed subject) ---------------------------


def encode_embed_request(inputs: list[list[int]], dimensions: int | None) -> bytes:
    return _packb({"inputs": inputs, "dimensions": dimensions})


def decode_embed_request(data: bytes) -> tuple[list[list[int]], int | None]:
    m = _map(_unpack(data), "embed")
    inputs = m.get("inputs")
    if type(inputs) is not list:
        raise _wrong("embed.inputs", "a list", inputs)
    checked = [_token_ids(one, f"embed.inputs[{i}]") for i, one in enumerate(inputs)]
    return checked, _optional(_int)(m.get("dimensions"), "embed.dimensions")


def encode_embeddings(vectors: list[list[float]]) -> bytes:
    """Float32 on the wire (what embeddings are): half of float64's bytes."""
    return msgpack.packb({"vectors": vectors}, use_single_float=True)


def encode_embed_error(error: EngineError) -> bytes:
    return _packb({"error": encode_error(error)})


def decode_embeddings(data: bytes) -> list[list[float]]:
    """The vectors, or the worker's EngineError raised."""
    m = _map(_unpack(data), "embeddings")
    if "error" in m:
        raw = m["error"]
        if type(raw) is not bytes:
            raise _wrong("embeddings.error", "bytes", raw)
        raise decode_error(raw)
    vectors = m.get("vectors")
    try:
        if type(vectors) is not list or any(type(v) is not list for v in vectors):
            raise TypeError
        for v in vectors:
            array("d", v)  # numbers only, checked in C
    except TypeError:
        raise CodecError("embeddings.vectors: expected a list of lists of numbers") from None
    return vectors


# -- scores (request/reply on a worker's score subject) ----------------------------------


def encode_score_request(pairs: list[ScorePair]) -> bytes:
    return _packb({"pairs": [[p.token_ids, p.type_start] for p in pairs]})


def decode_score_request(data: bytes) -> list[ScorePair]:
    m = _map(_unpack(data), "score")
    pairs = m.get("pairs")
    if type(pairs) is not list:
        raise _wrong("score.pairs", "a list", pairs)
    out: list[ScorePair] = []
    for i, pair in enumerate(pairs):
        name = f"score.pairs[{i}]"
        if type(pair) is not list or len(pair) != 2:
            raise _wrong(name, "[token ids, type start]", pair)
        out.append(ScorePair(_token_ids(pair[0], name), _optional(_int)(pair[1], name)))
    return out


def encode_scores(scores: list[float]) -> bytes:
    """Float64 on the wire: a score is one number, kept as the engine gave it."""
    return _packb({"scores": scores})


def encode_score_error(error: EngineError) -> bytes:
    return _packb({"error": encode_error(error)})


def decode_scores(data: bytes) -> list[float]:
    """The scores, or the worker's EngineError raised."""
    m = _map(_unpack(data), "scores")
    if "error" in m:
        raw = m["error"]
        if type(raw) is not bytes:
            raise _wrong("scores.error", "bytes", raw)
        raise decode_error(raw)
    scores = m.get("scores")
    if type(scores) is not list:
        raise _wrong("scores.scores", "a list", scores)
    return [_float(v, f"scores.scores[{i}]") for i, v in enumerate(scores)]


def encode_error(error: EngineError) -> bytes:
    m = {"message": error.message, "kind": error.kind, "param": error.param}
    if error.cause is not None:
        m["cause"] = error.cause
    return _packb(m)


def decode_error(data: bytes) -> EngineError:
    """An unknown kind from a newer peer reads as "internal": a 500, never
    retried; an unknown cause as "unavailable"."""
    m = _map(_unpack(data), "error")
    if "message" not in m:
        raise CodecError("error: the message is missing")
    kind = _ERROR_KINDS.get(_str(m.get("kind", "internal"), "error.kind"), "internal")
    cause_name = _optional(_str)(m.get("cause"), "error.cause")
    cause = None if cause_name is None else _CAUSES.get(cause_name, "unavailable")
    return EngineError(
        _str(m["message"], "error.message"),
        kind,
        _optional(_str)(m.get("param"), "error.param"),
        cause if kind == "unavailable" else None,
    )


# -- KV events -----------------------------------------------------------------


def _medium(value: Any, name: str) -> Medium:
    """A known medium; any other value is read as the device (as a peer from
    before tiers reads every event: forward compatibility, as unknown fields)."""
    for medium in MEDIA:
        if value == medium:
            return medium
    return "device"


_KV_EVENTS: dict[str, tuple[type[KVEvent], dict[str, Check]]] = {
    "stored": (
        BlocksStored,
        {
            "event_id": _int,
            "block_hashes": _hashes,
            "parent_hash": _optional(lambda v, n: _hashes([v], n)[0]),
            "block_size": _int,
            "medium": _medium,
        },
    ),
    "removed": (
        BlocksRemoved,
        {"event_id": _int, "block_hashes": _hashes, "medium": _medium},
    ),
    "cleared": (AllCleared, {"event_id": _int}),
}
_KV_TYPES = {cls: (tag, _names(cls)) for tag, (cls, _) in _KV_EVENTS.items()}


def encode_kv_event(event: KVEvent) -> bytes:
    return _packb(_kv_event_map(event))


def encode_kv_events(events: list[KVEvent]) -> bytes:
    """Several events in order, as one message: one alone is its own map (what
    `encode_kv_event` gives), more are an array of those maps."""
    if len(events) == 1:
        return encode_kv_event(events[0])
    return _packb([_kv_event_map(event) for event in events])


def decode_kv_event(data: bytes) -> KVEvent:
    return _kv_event(_unpack(data))


def decode_kv_events(data: bytes) -> list[KVEvent]:
    """A message of `encode_kv_events`: one event's map, or an array of them."""
    value = _unpack(data)
    if type(value) is list:
        return [_kv_event(m) for m in value]
    return [_kv_event(value)]


def _kv_event_map(event: KVEvent) -> dict[str, Any]:
    """An event's map; a device event's has no `medium` (what a peer from
    before tiers sends, and reads)."""
    tag, names = _KV_TYPES[type(event)]
    m = {"type": tag, **_as_map(event, names)}
    if m.get("medium") == "device":
        del m["medium"]
    return m


def _kv_event(value: Any) -> KVEvent:
    m = _map(value, "kv_event")
    tag = m.get("type")
    kind = _KV_EVENTS.get(tag) if type(tag) is str else None
    if kind is None:
        raise CodecError(f"kv_event.type: expected one of {sorted(_KV_EVENTS)}, got {tag!r}")
    cls, schema = kind
    return _build(cls, schema, m, f"kv_event({tag})")


def encode_kv_snapshot(snapshot: KVSnapshot) -> bytes:
    m: dict[str, Any] = {
        "event_id": snapshot.event_id,
        "block_size": snapshot.block_size,
        "blocks": snapshot.blocks,
    }
    if snapshot.lower:
        m["lower"] = snapshot.lower
    return _packb(m)


def _snapshot_blocks(value: Any, name: str) -> list[tuple[int, int | None]]:
    if type(value) is not list:
        raise _wrong(name, "a list", value)
    blocks = []
    for pair in value:
        if type(pair) is not list or len(pair) < 2:
            raise _wrong(name, "[hash, parent] pairs", pair)
        h, parent = pair[0], pair[1]
        _hashes([h] if parent is None else [h, parent], name)
        blocks.append((h, parent))
    return blocks


def _snapshot_lower(value: Any, name: str) -> dict[str, list[tuple[int, int | None]]]:
    """A snapshot's lower media: each one's blocks, as `blocks` are."""
    m = _map(value, name)
    return {
        medium: _snapshot_blocks(blocks, f"{name}.{medium}")
        for medium, blocks in m.items()
        if medium in MEDIA and medium != "device"  # (a medium it does not know: ignored)
    }


def decode_kv_snapshot(data: bytes) -> KVSnapshot:
    schema = {
        "event_id": _int,
        "block_size": _int,
        "blocks": _snapshot_blocks,
        "lower": _snapshot_lower,
    }
    return _build(KVSnapshot, schema, _unpack(data), "kv_snapshot")


# -- ModelCard (with its tokenizer) --------------------------------------------


def _capability_checks() -> dict[str, Check]:
    """Each capability is checked against its default's type, so a new field
    needs no codec change."""
    by_type: dict[type, Check] = {bool: _bool, int: _int, float: _float, str: _str}
    checks: dict[str, Check] = {}
    for f in fields(Capabilities):
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:  # a required field (Capabilities has none): unchecked, like one of no known type
            default = None
        checks[f.name] = by_type.get(type(default), lambda v, n: v)
    return checks


_CAPABILITIES = _capability_checks()


_CARD: dict[str, Check] = {
    "name": _str,
    "path": _optional(_str),
    "context_length": _int,
    "eos_token_ids": _token_ids,
    "bos_token": _optional(_str),
    "eos_token": _optional(_str),
    "unk_token": _optional(_str),
    "pad_token": _optional(_str),
    "chat_templates": _str_map,
    "tool_call_parser": _optional(_str),
    "reasoning_parser": _optional(_str),
    "generation_defaults": _map,
    "capabilities": lambda v, n: _build(Capabilities, _CAPABILITIES, v, n),
    "created": _int,
    "tokenizer_hash": _optional(_str),
    "aliases": _strs,
    "token_type_ids": _bool,
    "vision": _optional(_map),
}
_CARD_NAMES, _CAPABILITY_NAMES = _names(ModelCard), _names(Capabilities)


def encode_card(
    card: ModelCard, tokenizer: Tokenizer | None = None, *, tokenizer_json: bool = True
) -> bytes:
    """The card and, with `tokenizer`, its hash and (unless `tokenizer_json` is
    False, for a peer that fetches it by hash) the tokenizer's JSON itself."""
    m = _as_map(card, _CARD_NAMES)
    m["capabilities"] = _as_map(card.capabilities, _CAPABILITY_NAMES)
    if tokenizer is not None:
        raw = tokenizer.raw.to_str()
        digest = content_hash(raw)
        if card.tokenizer_hash is not None and card.tokenizer_hash != digest:
            raise ValueError("the card's tokenizer_hash is not the tokenizer's")
        m["tokenizer_hash"] = digest
        if tokenizer_json:
            m["tokenizer_json"] = raw
    return _packb(m)


def decode_card(data: bytes) -> tuple[ModelCard, Tokenizer | None]:
    """The card (its `tokenizer_hash` set when one was sent) and the tokenizer
    rebuilt from its JSON, or None when no JSON came."""
    m = _map(_unpack(data), "card")
    card: ModelCard = _build(ModelCard, _CARD, m, "card")
    raw = m.get("tokenizer_json")
    if raw is None:
        return card, None
    digest = content_hash(_str(raw, "card.tokenizer_json"))
    if card.tokenizer_hash is None:
        card.tokenizer_hash = digest
    elif card.tokenizer_hash != digest:
        raise CodecError("card.tokenizer_json does not match card.tokenizer_hash")
    try:
        return card, Tokenizer(tokenizers.Tokenizer.from_str(raw))
    except Exception as exc:  # the Rust binding raises its own exception type
        raise CodecError(f"card.tokenizer_json: not a tokenizer: {exc}") from None
