"""ChoiceDecoder's result must not depend on how a stream is split, and must equal
a plain, non-incremental reading of docs/stops-and-eos.md.

Token streams are real: text (ASCII, "é", "東", "🙂" and the characters of the
special-token markers) tokenized at random over the real BPE vocabulary — so
multi-byte characters cross token boundaries in every way the vocabulary
allows — with special, EOS, visible-stop and user-stop tokens between
characters. The reference decodes the whole id list prefix by prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rotor.pipeline.decode import ChoiceDecoder, End
from rotor.pipeline.parse.base import partial_marker_len
from rotor.protocol.engine import EngineOutput, StopParams

from support.byte_bpe import SPECIAL, bpe_vocab, tid, tokenizer

ALPHABET = "ab xé東🙂<|>_"

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def tokenization(draw: st.DrawFn, text: str) -> list[int]:
    """A random tokenization of `text` over the vocabulary (shrinks to single bytes)."""
    vocab, longest = bpe_vocab()
    data = text.encode()
    out: list[int] = []
    pos = 0
    while pos < len(data):
        cands = [
            (data[pos : pos + n], vocab[data[pos : pos + n]])
            for n in range(1, min(longest, len(data) - pos) + 1)
            if data[pos : pos + n] in vocab
        ]
        n = draw(st.integers(0, len(cands) - 1))
        token_bytes, token_id = cands[n]
        out.append(token_id)
        pos += len(token_bytes)
    return out


Segment = tuple[str, str]  # ("text", s) or ("special", name)

segments_st = st.lists(
    st.one_of(
        st.tuples(st.just("text"), st.text(ALPHABET, min_size=1, max_size=8)),
        st.tuples(st.just("special"), st.sampled_from(SPECIAL)),
    ),
    max_size=7,
)


@st.composite
def token_stream(draw: st.DrawFn, segments: Sequence[Segment]) -> list[int]:
    out: list[int] = []
    for kind, value in segments:
        out += draw(tokenization(value)) if kind == "text" else [tid(value)]
    return out


@dataclass(frozen=True)
class Params:
    max_tokens: int
    min_tokens: int
    user: frozenset[int]
    visible: frozenset[int]
    ignore_eos: bool
    stops: tuple[str, ...]
    include: bool
    skip: bool
    retain: bool
    end: tuple[str, int | None] | None  # the engine's finish after the last id; None: none


EOS = (tid("<|im_end|>"), tid("<|endoftext|>"))


def decoder(p: Params) -> ChoiceDecoder:
    tok = tokenizer()
    stop = StopParams(
        max_tokens=p.max_tokens,
        min_tokens=p.min_tokens,
        stop_token_ids=sorted(p.user),
        eos_token_ids=list(EOS),
        visible_stop_token_ids=sorted(p.visible),
        ignore_eos=p.ignore_eos,
    )
    return ChoiceDecoder(
        stop,
        list(p.stops) or None,
        p.include,
        decoder=tok.decoder(p.skip),
        token_text=lambda ids: tok.decode(ids, skip_special_tokens=False),
        retain_eos_text=p.retain,
    )


@dataclass(frozen=True)
class Result:
    text: str
    kind: End
    finish_reason: str
    stop_reason: int | str | None
    tokens: int
    eos_text: str | None


def run(
    p: Params, ids: list[int], sizes: list[int], separate_finish: bool
) -> tuple[Result, list[str]]:
    """Feed `ids` in outputs of `sizes` ids (cycled), the engine end last; the
    result and the text released so far after every push."""
    dec = decoder(p)
    outs: list[EngineOutput] = []
    i = 0
    for n in _cycle(sizes):
        if i >= len(ids):
            break
        outs.append(EngineOutput(token_ids=ids[i : i + n]))
        i += n
    if p.end is not None:
        finish, matched = p.end
        if separate_finish or not outs:
            outs.append(EngineOutput())
        outs[-1].finish, outs[-1].matched = finish, matched  # type: ignore[assignment]
    sent = ""
    seen = []
    for out in outs:
        sent += dec.feed(out)
        seen.append(sent)
    if dec.end is None:
        sent += dec.close()
        seen.append(sent)
    assert dec.end is not None
    end = dec.end
    return Result(
        sent, end.kind, _finish_reason(end.kind), end.stop_reason, dec.tokens, end.eos_text
    ), seen


def _cycle(sizes: list[int]):  # noqa: ANN202
    while True:
        yield from sizes


# -- the reference: the spec, read literally, over whole-prefix decodes ------------------


def reference(p: Params, ids: list[int]) -> Result:
    tok = tokenizer()
    eos = set() if p.ignore_eos else set(EOS)

    def released(k: int) -> str:
        """Text of the first k ids as a client may see it: no trailing partial
        character (the token that holds one is held whole)."""
        for j in range(k, -1, -1):
            text = tok.decode(ids[:j], skip_special_tokens=p.skip)
            if not text.endswith("\ufffd"):
                return text
        return ""

    def verbatim(t: int) -> str:
        return tok.decode([t], skip_special_tokens=False)

    def by_id(t: int, text: str, k: int) -> Result | None:
        if t in p.visible:
            return Result(text + verbatim(t), End.VISIBLE_STOP, "stop", None, k, None)
        if t in eos:
            reason = t if t in p.user else None
            eos_text = verbatim(t) if p.retain else None
            return Result(text, End.MODEL_EOS, "stop", reason, k, eos_text)
        if t in p.user:
            return Result(text, End.USER_STOP_TOKEN, "stop", t, k, None)
        return None

    prev = ""
    for k, t in enumerate(ids, 1):
        checked = k >= p.min_tokens
        if checked and (hit := by_id(t, prev, k)) is not None:
            return hit
        cur = released(k)
        if checked:
            matches = [
                (i + len(s), i, s)
                for s in p.stops
                for i in range(len(cur))
                if cur.startswith(s, i) and i + len(s) > len(prev)
            ]
            if matches:
                e, i, s = min(matches)
                return Result(
                    cur[: e if p.include else i], End.USER_STOP_STRING, "stop", s, k, None
                )
        if k >= p.max_tokens:
            return Result(cur, End.LENGTH, "length", None, k, None)
        prev = cur

    n = len(ids)
    plain = Result(prev, End.TRANSPORT_EOF, "stop", None, n, None)
    if p.end is None:
        return plain
    finish, matched = p.end
    if finish == "eos" and not p.ignore_eos:
        if matched is not None:
            hit = by_id(matched, prev, n)
            if hit is None:
                eos_text = verbatim(matched) if p.retain else None
                hit = Result(prev, End.MODEL_EOS, "stop", None, n, eos_text)
            return hit
        if ids and ids[-1] in eos:
            return by_id(ids[-1], prev, n) or plain
        return plain
    if finish == "stop" and matched is not None:
        return by_id(matched, prev, n) or plain
    if finish == "length":
        return Result(prev, End.LENGTH, "length", None, n, None)
    if finish == "cancelled":
        return Result(prev, End.CANCELLED, "stop", None, n, None)
    if finish == "error":
        held = partial_marker_len(prev, p.stops) if p.stops else 0
        return Result(prev[: len(prev) - held], End.ERROR, "stop", None, n, None)
    return plain


# -- strategies -------------------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn) -> tuple[Params, list[int], list[int], list[int], bool, bool]:
    segments = draw(segments_st)
    ids = draw(token_stream(segments))
    skip = draw(st.booleans())
    full = tokenizer().decode(ids, skip_special_tokens=skip)
    substrings = [
        full[i:j] for i in range(len(full)) for j in range(i + 1, min(len(full), i + 6) + 1)
    ]
    stop_st = st.text(ALPHABET, min_size=1, max_size=4)
    if substrings:
        stop_st = st.one_of(st.sampled_from(substrings), stop_st)
    stops = tuple(draw(st.lists(stop_st, max_size=4)))
    user = frozenset(
        draw(st.sets(st.sampled_from([tid("<stop>"), tid("<|endoftext|>"), tid("<|return|>")])))
    )
    visible = frozenset(draw(st.sets(st.just(tid("<|call|>")))))
    min_tokens = draw(st.one_of(st.just(0), st.integers(0, len(ids) + 1)))
    max_tokens = draw(
        st.one_of(st.just(len(ids) + 2), st.integers(max(1, min_tokens), len(ids) + 2))
    )
    ends: list[tuple[str, int | None] | None] = [
        None,
        ("eos", EOS[0]),
        ("eos", None),
        ("length", None),
        ("stop", None),
        ("stop", tid("<stop>")),
        ("stop", EOS[1]),
        ("cancelled", None),
        ("error", None),
    ]
    p = Params(
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        user=user,
        visible=visible,
        ignore_eos=draw(st.booleans()),
        stops=stops,
        include=draw(st.booleans()),
        skip=skip,
        retain=draw(st.booleans()),
        end=draw(st.sampled_from(ends)),
    )
    sizes_st = st.lists(st.integers(1, max(1, len(ids))), min_size=1, max_size=6)
    return p, ids, draw(sizes_st), draw(sizes_st), draw(st.booleans()), draw(st.booleans())


# -- properties -------------------------------------------------------------------------


@SETTINGS
@given(cases())
def test_any_split_gives_the_reference_result(
    case: tuple[Params, list[int], list[int], list[int], bool, bool],
) -> None:
    p, ids, sizes_a, sizes_b, sep_a, sep_b = case
    want = reference(p, ids)
    one_by_one, seen_1 = run(p, ids, [1], sep_a)
    split_a, seen_a = run(p, ids, sizes_a, sep_a)
    split_b, seen_b = run(p, ids, sizes_b, sep_b)
    whole, _ = run(p, ids, [max(1, len(ids))], sep_b)
    assert one_by_one == want
    assert split_a == want
    assert split_b == want
    assert whole == want
    # Nothing released is ever cut later: every intermediate text is a prefix.
    for seen in (seen_1, seen_a, seen_b):
        for sent in seen:
            assert want.text.startswith(sent)
    assert "\ufffd" not in want.text


@SETTINGS
@given(cases())
def test_no_stop_string_ever_reaches_the_client(
    case: tuple[Params, list[int], list[int], list[int], bool, bool],
) -> None:
    p, ids, sizes, _, sep, _ = case
    assume(not p.include and p.min_tokens <= 1)
    got, seen = run(p, ids, sizes, sep)
    text = got.text
    if got.kind is End.VISIBLE_STOP:  # the stop token's own text goes to the parser
        text = text[: len(text) - len("<|call|>")]
        assert got.text.endswith("<|call|>")
    for s in p.stops:
        assert s not in text


@SETTINGS
@given(
    segments_st.flatmap(lambda segs: st.tuples(token_stream(segs), token_stream(segs))), st.data()
)
def test_stop_strings_do_not_depend_on_tokenization(
    streams: tuple[list[int], list[int]], data: st.DataObject
) -> None:
    """The same text cut into tokens two ways ends at the same place."""
    a, b = streams
    skip = data.draw(st.booleans())
    full = tokenizer().decode(a, skip_special_tokens=skip)
    assert full == tokenizer().decode(b, skip_special_tokens=skip)
    subs = [full[i:j] for i in range(len(full)) for j in range(i + 1, min(len(full), i + 5) + 1)]
    stop_st = st.text(ALPHABET, min_size=1, max_size=3)
    if subs:
        stop_st = st.one_of(st.sampled_from(subs), stop_st)
    p = Params(
        max_tokens=10_000,
        min_tokens=0,
        user=frozenset(),
        visible=frozenset(),
        ignore_eos=True,
        stops=tuple(data.draw(st.lists(stop_st, max_size=4))),
        include=data.draw(st.booleans()),
        skip=skip,
        retain=False,
        end=None,
    )
    got_a, _ = run(p, a, [1], False)
    got_b, _ = run(p, b, [3], False)
    assert (got_a.text, got_a.kind, got_a.stop_reason) == (
        got_b.text,
        got_b.kind,
        got_b.stop_reason,
    )


# -- text-out engines --------------------------------------------------------------------


def text_reference(
    chunks: list[str], stops: tuple[str, ...], include: bool, lo: int, hi: int
) -> Result:
    prev = ""
    for k, chunk in enumerate(chunks, 1):
        cur = prev + chunk
        if k >= lo:
            matches = [
                (i + len(s), i, s)
                for s in stops
                for i in range(len(cur))
                if cur.startswith(s, i) and i + len(s) > len(prev)
            ]
            if matches:
                e, i, s = min(matches)
                return Result(cur[: e if include else i], End.USER_STOP_STRING, "stop", s, k, None)
        if k >= hi:
            return Result(cur, End.LENGTH, "length", None, k, None)
        prev = cur
    return Result(prev, End.TRANSPORT_EOF, "stop", None, len(chunks), None)


def text_run(chunks: list[str], stops: tuple[str, ...], include: bool, lo: int, hi: int) -> Result:
    dec = ChoiceDecoder(StopParams(max_tokens=hi, min_tokens=lo), list(stops), include)
    text = ""
    for c in chunks:
        text += dec.feed(EngineOutput(text=c))
        if dec.end is None:
            assert not any(s in text for s in stops) or lo > 1 or include
    text += dec.close()
    assert dec.end is not None
    return Result(
        text, dec.end.kind, _finish_reason(dec.end.kind), dec.end.stop_reason, dec.tokens, None
    )


@SETTINGS
@given(
    st.lists(st.text(ALPHABET, max_size=4), max_size=12),
    st.lists(st.text(ALPHABET, min_size=1, max_size=3), max_size=4),
    st.booleans(),
    st.integers(0, 6),
    st.integers(1, 14),
)
def test_text_out_engine_matches_the_reference(
    chunks: list[str], stops: list[str], include: bool, lo: int, hi: int
) -> None:
    hi = max(hi, lo)
    want = text_reference(chunks, tuple(stops), include, lo, hi)
    assert text_run(chunks, tuple(stops), include, lo, hi) == want


@SETTINGS
@given(st.text(ALPHABET, max_size=24), st.lists(st.integers(0, 24), max_size=8), st.data())
def test_text_out_chunking_does_not_change_where_a_stop_cuts(
    text: str, cuts: list[int], data: st.DataObject
) -> None:
    subs = [text[i:j] for i in range(len(text)) for j in range(i + 1, min(len(text), i + 5) + 1)]
    stop_st = st.text(ALPHABET, min_size=1, max_size=3)
    if subs:
        stop_st = st.one_of(st.sampled_from(subs), stop_st)
    stops = tuple(data.draw(st.lists(stop_st, min_size=1, max_size=4)))
    include = data.draw(st.booleans())
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    chunks = [text[a:b] for a, b in pairwise(bounds)]
    by_char = text_run(list(text), stops, include, 0, 10_000)
    chunked = text_run(chunks, stops, include, 0, 10_000)
    assert (chunked.text, chunked.kind, chunked.stop_reason) == (
        by_char.text,
        by_char.kind,
        by_char.stop_reason,
    )


def _finish_reason(kind: End) -> str:
    """The finish_reason an End means when no tool call completed."""
    return "length" if kind is End.LENGTH else "stop"
