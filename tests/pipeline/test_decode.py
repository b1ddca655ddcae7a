"""ChoiceDecoder against docs/stops-and-eos.md, rule by rule, with a real tokenizer.

Every test drives the decoder with EngineOutputs, the way an engine does, over
a byte-level BPE built by `build_tokenizer` (special tokens included), and
checks the released text, the End, stop_reason and the token count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from rotor.model.builtin import builtin_test_model
from rotor.pipeline.decode import ChoiceDecoder, End
from rotor.protocol.engine import EngineOutput, Finish, StopParams, TokenLogprob

from support.byte_bpe import SPECIAL, byte_ids, tid, tokenizer


def ids(text: str) -> list[int]:
    return tokenizer().encode(text)


IM_END = "<|im_end|>"
EOS_IDS = (IM_END, "<|endoftext|>")


def make(
    *,
    max_tokens: int = 1000,
    min_tokens: int = 0,
    stop_ids: Iterable[int] = (),
    eos: Iterable[int] | None = None,
    visible: Iterable[int] = (),
    ignore_eos: bool = False,
    stop: Sequence[str] | None = None,
    include: bool = False,
    skip: bool = True,
    retain: bool = False,
) -> ChoiceDecoder:
    """A decoder wired as preprocess wires one: the tokenizer's incremental
    decoder plus verbatim token text."""
    tok = tokenizer()
    params = StopParams(
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        stop_token_ids=list(stop_ids),
        eos_token_ids=[tid(t) for t in EOS_IDS] if eos is None else list(eos),
        visible_stop_token_ids=list(visible),
        ignore_eos=ignore_eos,
    )
    return ChoiceDecoder(
        params,
        list(stop) if stop is not None else None,
        include,
        decoder=tok.decoder(skip),
        token_text=lambda t: tok.decode(t, skip_special_tokens=False),
        retain_eos_text=retain,
    )


def text_out(
    *, max_tokens: int = 1000, min_tokens: int = 0, stop: Sequence[str] | None = None
) -> ChoiceDecoder:
    """A decoder for a text-out engine (no tokenizer)."""
    return ChoiceDecoder(StopParams(max_tokens=max_tokens, min_tokens=min_tokens), stop)


def feed(dec: ChoiceDecoder, outputs: Iterable[EngineOutput]) -> tuple[str, list[str]]:
    """Push every output; the whole released text and each push's release."""
    released = [dec.feed(out) for out in outputs]
    return "".join(released), released


def steps(
    token_ids: Sequence[int],
    per: int = 1,
    finish: Finish | None = None,
    matched: int | str | None = None,
) -> list[EngineOutput]:
    """`token_ids` as outputs of `per` ids each; `finish` on the last one."""
    outs = [
        EngineOutput(token_ids=list(token_ids[i : i + per])) for i in range(0, len(token_ids), per)
    ]
    if finish is not None:
        if not outs:
            outs.append(EngineOutput())
        outs[-1].finish, outs[-1].matched = finish, matched
    return outs


# -- plain text and UTF-8 ---------------------------------------------------------------


def test_plain_text_streams_and_closes_as_transport_eof() -> None:
    dec = make()
    text, released = feed(dec, steps(ids("Hello, world! How are you today?")))
    assert text == "Hello, world! How are you today?"
    assert all(released), "each ordinary token releases its text at once"
    assert dec.end is None
    assert dec.close() == ""
    assert dec.end is not None and dec.end.kind is End.TRANSPORT_EOF
    assert dec.end.kind is not End.LENGTH and dec.end.stop_reason is None
    assert dec.tokens == len(ids("Hello, world! How are you today?"))
    assert dec.close() == "" and dec.end.kind is End.TRANSPORT_EOF


@pytest.mark.parametrize("char", ["é", "東", "🙂"])
def test_a_character_split_over_byte_tokens_is_released_whole(char: str) -> None:
    dec = make()
    parts = byte_ids(char)
    assert len(parts) == len(char.encode()) > 1
    _, released = feed(dec, steps(ids("a") + parts + ids("b")))
    assert released == ["a"] + [""] * (len(parts) - 1) + [char, "b"]


def test_tokens_that_end_and_start_mid_character() -> None:
    # The vocabulary has merges such as 'ĠðŁ' (a space and half of 🙂).
    dec = make()
    tok = tokenizer()
    head, tail = tok.token_to_id("ĠðŁ"), tok.token_to_id("ĻĤ")
    assert head is not None and tail is not None
    _, released = feed(dec, steps(ids("x") + [head, tail] + ids("y")))
    assert released == ["x", "", " 🙂", "y"]


@pytest.mark.parametrize("end", ["length", "close", "eos"])
def test_an_incomplete_character_at_the_end_is_never_released(end: str) -> None:
    """Spec: a token that decodes to an incomplete byte sequence is held until the
    character completes; one that never completes never reaches the client."""
    partial = byte_ids("東")[:2]
    token_ids = ids("ab") + partial
    dec = make(max_tokens=len(token_ids) if end == "length" else 1000)
    outs = steps(token_ids, per=2)
    if end == "eos":
        outs.append(EngineOutput(token_ids=[tid(IM_END)]))
    text, _ = feed(dec, outs)
    if end == "close":
        text += dec.close()
    assert text == "ab"
    assert "\ufffd" not in text
    assert dec.end is not None
    assert (
        dec.end.kind
        is {"length": End.LENGTH, "close": End.TRANSPORT_EOF, "eos": End.MODEL_EOS}[end]
    )


@pytest.mark.parametrize("end", ["length", "close"])
def test_a_skipped_special_token_never_leaks_at_the_end(end: str) -> None:
    """With skip_special_tokens, `<|im_start|>` (not a stop) produces no text,
    and none is flushed when the choice ends right after it."""
    token_ids = ids("Hi") + [tid("<|im_start|>")]
    dec = make(max_tokens=len(token_ids) if end == "length" else 1000, skip=True)
    text, _ = feed(dec, steps(token_ids))
    if end == "close":
        text += dec.close()
    assert text == "Hi"


def test_special_tokens_have_text_only_without_skip() -> None:
    token_ids = ids("a") + [tid("<|im_start|>")] + ids("b")
    assert feed(make(skip=True), steps(token_ids))[0] == "ab"
    assert feed(make(skip=False), steps(token_ids))[0] == "a<|im_start|>b"


# -- token-id stops ---------------------------------------------------------------------


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("eos", EOS_IDS)
def test_model_eos_ends_and_its_text_is_dropped(skip: bool, eos: str) -> None:
    dec = make(skip=skip)
    text, _ = feed(dec, steps(ids("Hello") + [tid(eos)] + ids(" world"), per=3))
    assert text == "Hello"
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS
    assert dec.end.stop_reason is None and dec.end.eos_text is None
    assert dec.end.kind is not End.LENGTH
    assert dec.tokens == len(ids("Hello")) + 1


def test_builtin_chatml_model_eos_ids() -> None:
    card, tok = builtin_test_model()
    for eos in card.eos_token_ids:
        params = StopParams(max_tokens=50, eos_token_ids=list(card.eos_token_ids))
        dec = ChoiceDecoder(params, decoder=tok.decoder(False), token_text=tok.decode)
        text, _ = feed(dec, steps(tok.encode("Sure.") + [eos] + tok.encode("more")))
        assert text == "Sure."
        assert dec.end is not None and dec.end.kind is End.MODEL_EOS


def test_eos_that_the_user_also_listed_is_still_model_eos() -> None:
    eos = tid(IM_END)
    dec = make(stop_ids=[eos], skip=False)
    text, _ = feed(dec, steps(ids("Hi") + [eos]))
    assert text == "Hi"
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS
    assert dec.end.stop_reason == eos


@pytest.mark.parametrize("stop_token", ["<stop>", "lo"])
def test_user_stop_id_ends_and_its_text_is_hidden(stop_token: str) -> None:
    stop_id = tid(stop_token)
    dec = make(stop_ids=[stop_id], skip=False)
    text, _ = feed(dec, steps(ids("Hel") + [stop_id] + ids("more"), per=2))
    assert text == "Hel"
    assert dec.end is not None and dec.end.kind is End.USER_STOP_TOKEN
    assert dec.end.stop_reason == stop_id and dec.end.kind is not End.LENGTH
    assert dec.tokens == len(ids("Hel")) + 1


@pytest.mark.parametrize("skip", [True, False])
def test_visible_stop_emits_its_text(skip: bool) -> None:
    call = tid("<|call|>")
    dec = make(visible=[call], stop_ids=[call], skip=skip)
    text, _ = feed(dec, steps(ids("args") + [call] + ids("after"), per=10))
    assert text == "args<|call|>"
    assert dec.end is not None and dec.end.kind is End.VISIBLE_STOP
    assert dec.end.stop_reason is None and dec.end.eos_text is None
    assert dec.tokens == len(ids("args")) + 1


def test_visible_stop_releases_held_text_first() -> None:
    call = tid("<|call|>")
    dec = make(visible=[call], stop=["xyz"])
    text, released = feed(dec, steps(ids("a xy") + [call]))
    assert released[-1] == "xy<|call|>"
    assert text == "a xy<|call|>"


# -- min_tokens -------------------------------------------------------------------------


def test_min_tokens_suppresses_eos_below_it() -> None:
    eos = tid(IM_END)
    token_ids = ids("ab") + [eos] + ids("cd") + [eos] + ids("ef")
    second = len(ids("ab")) + 1 + len(ids("cd")) + 1
    dec = make(min_tokens=second)
    text, _ = feed(dec, steps(token_ids))
    assert text == "abcd"
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS
    assert dec.tokens == second


def test_min_tokens_boundary_the_min_th_token_may_stop() -> None:
    eos = tid(IM_END)
    token_ids = ids("ab") + [eos]
    dec = make(min_tokens=len(token_ids))
    feed(dec, steps(token_ids))
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS
    dec = make(min_tokens=len(token_ids) + 1)
    feed(dec, steps(token_ids))
    assert dec.end is None


@pytest.mark.parametrize("kind", ["user", "visible"])
def test_min_tokens_suppresses_id_stops_below_it(kind: str) -> None:
    stop_id = tid("lo")
    dec = make(
        min_tokens=4, **({"stop_ids": [stop_id]} if kind == "user" else {"visible": [stop_id]})
    )
    text, _ = feed(dec, steps([stop_id, stop_id, stop_id, stop_id, stop_id]))
    assert text == "lololo" + ("lo" if kind == "visible" else "")
    assert dec.end is not None and dec.tokens == 4


def test_min_tokens_suppresses_stop_strings_below_it() -> None:
    dec = text_out(min_tokens=5, stop=["x"])
    text, _ = feed(dec, [EngineOutput(text=c) for c in "axbxcx"])
    assert text == "axbxc"
    assert dec.end is not None and dec.end.kind is End.USER_STOP_STRING
    assert dec.tokens == 6
    dec = make(min_tokens=len(ids("axb")) + 1, stop=["x"])
    text, _ = feed(dec, steps(ids("axbxcx")))
    assert dec.end is not None and dec.end.kind is End.USER_STOP_STRING
    assert text == "axb"


def test_stop_string_straddling_min_tokens_matches() -> None:
    dec = text_out(min_tokens=4, stop=["abc"])
    text, _ = feed(dec, [EngineOutput(text=c) for c in "xabcdef"])
    assert text == "x"
    assert dec.end is not None and dec.end.kind is End.USER_STOP_STRING and dec.tokens == 4


def test_a_match_wholly_below_min_tokens_never_fires_later() -> None:
    # "b" is complete at token 2 (unchecked) while "ab" is held as a prefix of
    # "abc"; at token 3 that old "b" must not match.
    dec = text_out(min_tokens=3, stop=["b", "abc"])
    text, _ = feed(dec, [EngineOutput(text=c) for c in "abx"])
    assert dec.end is None
    assert text + dec.close() == "abx"


# -- stop strings -----------------------------------------------------------------------


@pytest.mark.parametrize("per", [1, 2, 100])
def test_earliest_stop_string_wins(per: int) -> None:
    dec = make(stop=["world", "lo"])
    text, _ = feed(dec, steps(ids("Hello world, and more"), per=per))
    assert text == "Hel"
    assert dec.end is not None and dec.end.kind is End.USER_STOP_STRING
    assert dec.end.stop_reason == "lo" and dec.end.kind is not End.LENGTH
    assert dec.tokens == len(ids("Hello"))


def test_include_stop_str_in_output() -> None:
    dec = make(stop=["world", "lo"], include=True)
    text, _ = feed(dec, steps(ids("Hello world, and more"), per=100))
    assert text == "Hello"


def test_nothing_after_the_match_ever() -> None:
    dec = make(stop=["wor"])
    text, _ = feed(dec, steps(ids("Hello world") + ids(" again"), per=100))
    assert text == "Hello "
    assert dec.end is not None and dec.end.stop_reason == "wor"
    assert dec.feed(EngineOutput(token_ids=ids(" more"))) == ""


@pytest.mark.parametrize("pieces", [["hello world"], list("hello world"), ["hel", "lo world"]])
def test_overlapping_stops_do_not_depend_on_tokenization(pieces: list[str]) -> None:
    """ "lo w" starts first but "o" completes first: with one character a token
    "o" must fire, so it fires whatever the tokenization."""
    dec = text_out(stop=["lo w", "o"])
    text, _ = feed(dec, [EngineOutput(text=p) for p in pieces])
    assert text == "hell"
    assert dec.end is not None and dec.end.stop_reason == "o"


def test_stops_completing_together_the_longer_one_cuts() -> None:
    for pieces in (["ab"], ["a", "b"]):
        dec = text_out(stop=["b", "ab"])
        text, _ = feed(dec, [EngineOutput(text=p) for p in ["x", *pieces]])
        assert text == "x"
        assert dec.end is not None and dec.end.stop_reason == "ab"


@pytest.mark.parametrize("tokens", ["bytes", "bpe"])
def test_stop_string_across_many_tokens_and_multibyte_characters(tokens: str) -> None:
    text_ids = byte_ids("x東京y!") if tokens == "bytes" else ids("x東京y!")
    for include, want in ((False, "x東"), (True, "x東京y")):
        dec = make(stop=["京y"], include=include)
        sent = ""
        for out in steps(text_ids):
            sent += dec.feed(out)
            if dec.end is None:
                assert "京" not in sent, "the held prefix must not leak"
        assert sent == want
        assert dec.end is not None and dec.end.kind is End.USER_STOP_STRING


def test_stop_string_that_is_one_multibyte_character() -> None:
    dec = make(stop=["é"])
    text, _ = feed(dec, steps(byte_ids("café au lait")))
    assert text == "caf"
    assert dec.tokens == len(b"caf\xc3\xa9")


def test_held_prefix_is_released_once_it_cannot_match() -> None:
    dec = text_out(stop=["abc"])
    _, released = feed(dec, [EngineOutput(text=c) for c in "xabd"])
    assert released == ["x", "", "", "abd"]


@pytest.mark.parametrize(
    ("finish", "kind"),
    [(None, End.TRANSPORT_EOF), ("length", End.LENGTH), ("cancelled", End.CANCELLED)],
)
def test_held_text_is_released_at_an_end_that_is_not_the_stop_string(
    finish: Finish | None, kind: End
) -> None:
    dec = make(stop=["abc"])
    text, released = feed(dec, steps(ids("x ab"), finish=finish))
    assert released[-1] in ("", "ab") and "ab" not in "".join(released[:-1])
    if finish is None:
        text += dec.close()
    assert text == "x ab"
    assert dec.end is not None and dec.end.kind is kind


def test_held_text_is_released_at_eos_and_max_tokens() -> None:
    dec = make(stop=["abc"])
    assert feed(dec, steps(ids("x ab") + [tid(IM_END)]))[0] == "x ab"
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS
    dec = make(stop=["abc"], max_tokens=len(ids("x ab")))
    assert feed(dec, steps(ids("x ab")))[0] == "x ab"
    assert dec.end is not None and dec.end.kind is End.LENGTH


def test_engine_matched_stop_string_past_our_text_does_not_leak_its_start() -> None:
    """The engine stops on "abc" having sent only "x ab": "ab" is the match."""
    for include, want in ((False, "x "), (True, "x abc")):
        dec = make(stop=["abc"], include=include)
        text, _ = feed(dec, steps(ids("x ab"), finish="stop", matched="abc"))
        assert text == want
        assert dec.end is not None and dec.end.kind is End.USER_STOP_STRING
        assert dec.end.stop_reason == "abc"


def test_released_text_is_always_a_prefix_of_the_final_text() -> None:
    text = "aab aabx aa aabaab aabx!"
    dec = text_out(stop=["aabx", "aabaab!"])
    sent = ""
    for c in text:
        sent += dec.feed(EngineOutput(text=c))
        assert "aab aabx"[: len(sent)] == sent[: len("aab aabx")]
        assert "aabx" not in sent
    assert sent == "aab "


# -- max_tokens -------------------------------------------------------------------------


def test_max_tokens_is_enforced_even_when_the_engine_keeps_sending() -> None:
    token_ids = ids("Hello, world! How are you today?")
    dec = make(max_tokens=3)
    text, _ = feed(dec, steps(token_ids, per=2))
    assert text == tokenizer().decode(token_ids[:3])
    assert dec.end is not None and dec.end.kind is End.LENGTH
    assert dec.end.kind is End.LENGTH and dec.end.stop_reason is None
    assert dec.tokens == 3


def test_stop_on_the_last_allowed_token_beats_length() -> None:
    eos = tid(IM_END)
    dec = make(max_tokens=3)
    feed(dec, steps([*ids("ab")[:2], eos, *ids("cd")]))
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS
    dec = text_out(max_tokens=3, stop=["abc"])
    assert feed(dec, [EngineOutput(text=c) for c in "abcd"])[0] == ""
    assert dec.end is not None and dec.end.kind is End.USER_STOP_STRING


# -- the engine's own finish ------------------------------------------------------------

USER_ID = "<stop>"


@pytest.mark.parametrize(
    ("finish", "matched", "extra", "kind", "reason"),
    [
        ("eos", IM_END, {}, End.MODEL_EOS, None),
        ("eos", IM_END, {"stop_ids": [IM_END]}, End.MODEL_EOS, IM_END),
        ("eos", USER_ID, {"stop_ids": [USER_ID]}, End.USER_STOP_TOKEN, USER_ID),
        ("eos", None, {}, End.TRANSPORT_EOF, None),
        ("eos", IM_END, {"ignore_eos": True}, End.TRANSPORT_EOF, None),
        ("length", None, {}, End.LENGTH, None),
        ("stop", USER_ID, {"stop_ids": [USER_ID]}, End.USER_STOP_TOKEN, USER_ID),
        ("stop", IM_END, {}, End.MODEL_EOS, None),
        ("stop", "<|im_start|>", {}, End.TRANSPORT_EOF, None),
        ("stop", None, {}, End.TRANSPORT_EOF, None),
        ("stop", "xyz", {"stop": ["xyz"]}, End.USER_STOP_STRING, "xyz"),
        ("stop", "zzz", {"stop": ["xyz"]}, End.TRANSPORT_EOF, None),
        ("cancelled", None, {}, End.CANCELLED, None),
        ("error", None, {}, End.ERROR, None),
    ],
)
@pytest.mark.parametrize("separate", [False, True])
def test_engine_finish(
    finish: Finish,
    matched: str | None,
    extra: dict,
    kind: End,
    reason: str | None,
    separate: bool,
) -> None:
    """Step 5. `matched` names a special token (resolved to its id) or is a string."""

    def resolve(x: str | None) -> int | str | None:
        return tid(x) if x in SPECIAL else x

    if "stop_ids" in extra:
        extra = {**extra, "stop_ids": [tid(t) for t in extra["stop_ids"]]}
    dec = make(**extra)
    outs = steps(ids("Hello"), per=2)
    if separate:
        outs.append(EngineOutput(finish=finish, matched=resolve(matched)))
    else:
        outs[-1].finish, outs[-1].matched = finish, resolve(matched)
    text, _ = feed(dec, outs)
    assert dec.end is not None and dec.end.kind is kind
    assert dec.end.stop_reason == resolve(reason)
    assert dec.tokens == len(ids("Hello"))
    assert text == "Hello"
    assert dec.end.eos_text is None
    if kind is End.ERROR:
        assert dec.end.error == "engine error"


def test_engine_eos_without_id_but_last_id_eos() -> None:
    # Below min_tokens the EOS id was an ordinary token; the engine then ends
    # with a bare `eos`: the last id is evidence enough.
    eos = tid(IM_END)
    dec = make(min_tokens=10)
    feed(dec, steps([*ids("ab"), eos], finish="eos"))
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS


def test_engine_eos_naming_a_visible_stop_emits_its_text() -> None:
    call = tid("<|call|>")
    dec = make(visible=[call])
    text, _ = feed(dec, steps(ids("x"), finish="eos", matched=call))
    assert text == "x<|call|>"
    assert dec.end is not None and dec.end.kind is End.VISIBLE_STOP


def test_engine_error_keeps_its_message() -> None:
    dec = make()
    feed(dec, [EngineOutput(token_ids=ids("a"), finish="error", error="worker died")])
    assert dec.end is not None and dec.end.kind is End.ERROR and dec.end.error == "worker died"


def test_our_stop_beats_the_engine_finish_in_the_same_output() -> None:
    eos = tid(IM_END)
    dec = make()
    out = EngineOutput(token_ids=[*ids("ab"), eos, *ids("cd")], finish="length")
    assert dec.feed(out) == "ab"
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS
    assert dec.tokens == len(ids("ab")) + 1


@pytest.mark.parametrize("kind", [End.TRANSPORT_EOF, End.ERROR, End.CANCELLED])
def test_close_without_finish(kind: End) -> None:
    dec = make()
    feed(dec, steps(ids("Hi")))
    dec.close(kind, "broken" if kind is End.ERROR else None)
    assert dec.end is not None and dec.end.kind is kind
    assert dec.end.kind is not End.LENGTH
    assert dec.tokens == len(ids("Hi"))


# -- after the End, usage, logprobs -----------------------------------------------------


def test_after_the_end_everything_is_dropped_and_not_counted() -> None:
    eos = tid(IM_END)
    token_ids = [*ids("Hi"), eos, *ids("there")]
    lps = [TokenLogprob(t, -0.5) for t in token_ids]
    dec = make()
    assert dec.feed(EngineOutput(token_ids=token_ids, logprobs=lps)) == "Hi"
    end = dec.end
    assert dec.tokens == len(ids("Hi")) + 1
    assert [lp.token_id for lp in dec.logprobs] == token_ids[: dec.tokens]
    assert dec.feed(EngineOutput(token_ids=ids("later"), finish="length")) == ""
    assert dec.feed(EngineOutput(text="later")) == ""
    assert dec.close() == ""
    assert dec.end is end and dec.end.kind is End.MODEL_EOS
    assert dec.tokens == len(ids("Hi")) + 1
    assert len(dec.logprobs) == dec.tokens


# -- ignore_eos -------------------------------------------------------------------------


def test_ignore_eos_makes_eos_an_ordinary_token() -> None:
    eos = tid(IM_END)
    token_ids = [*ids("a"), eos, *ids("b"), eos, *ids("c")]
    dec = make(ignore_eos=True, skip=False, max_tokens=len(token_ids) - 1)
    text, _ = feed(dec, steps(token_ids))
    assert text == "a<|im_end|>b<|im_end|>"
    assert dec.end is not None and dec.end.kind is End.LENGTH
    dec = make(ignore_eos=True, skip=True, max_tokens=100)
    text, _ = feed(dec, steps(token_ids, finish="eos", matched=eos))
    assert text == "abc"
    assert dec.end is not None and dec.end.kind is End.TRANSPORT_EOF


def test_ignore_eos_still_honours_a_user_stop() -> None:
    eos = tid(IM_END)
    dec = make(ignore_eos=True, stop_ids=[eos])
    feed(dec, steps([*ids("a"), eos, *ids("b")]))
    assert dec.end is not None and dec.end.kind is End.USER_STOP_TOKEN


def test_ignore_eos_eos_text_can_match_a_stop_string() -> None:
    ret = tid("<|return|>")
    dec = make(eos=[ret], ignore_eos=True, skip=False, stop=["<|return|>"])
    text, _ = feed(dec, steps([*ids("Hi"), ret, *ids("x")]))
    assert text == "Hi"
    assert dec.end is not None and dec.end.kind is End.USER_STOP_STRING


# -- retained EOS text ------------------------------------------------------------------


@pytest.mark.parametrize("hidden", [False, True])
def test_retained_eos_text_is_never_a_stop_string_match(hidden: bool) -> None:
    ret = tid("<|return|>")
    dec = make(eos=[ret], skip=False, retain=True, stop=["<|return|>"])
    # hidden: the engine strips EOS and names it in the finish
    outs = steps(ids("Hi"), finish="eos", matched=ret) if hidden else steps([*ids("Hi"), ret])
    text, _ = feed(dec, outs)
    assert text == "Hi"
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS
    assert dec.end.eos_text == "<|return|>"


def test_eos_text_only_when_asked() -> None:
    ret = tid("<|return|>")
    dec = make(eos=[ret], skip=False, retain=False)
    feed(dec, steps([*ids("Hi"), ret]))
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS and dec.end.eos_text is None


@pytest.mark.parametrize("how", ["user_stop", "visible", "length", "string", "close"])
def test_eos_text_only_on_model_eos(how: str) -> None:
    ret, call, user = tid("<|return|>"), tid("<|call|>"), tid("<stop>")
    dec = make(
        eos=[ret],
        visible=[call],
        stop_ids=[user],
        stop=["!"],
        skip=False,
        retain=True,
        max_tokens=3,
    )
    tail = {"user_stop": [user], "visible": [call], "length": ids("abc"), "string": ids("!")}
    outs = steps([*ids("H")[:1], *tail.get(how, [])])
    feed(dec, outs)
    if how == "close":
        dec.close()
    assert dec.end is not None and dec.end.kind is not End.MODEL_EOS
    assert dec.end.eos_text is None


# -- text-out engines -------------------------------------------------------------------


def test_text_out_one_output_is_one_token() -> None:
    dec = text_out(max_tokens=4)
    text, _ = feed(dec, [EngineOutput(text=w) for w in ["Hel", "lo", " wo", "rld", "!"]])
    assert text == "Hello world"
    assert dec.end is not None and dec.end.kind is End.LENGTH and dec.tokens == 4


def test_text_out_stop_strings_across_outputs() -> None:
    dec = text_out(stop=["東京"])
    text, released = feed(dec, [EngineOutput(text=c) for c in "ab東京cd"])
    assert text == "ab" and released == ["a", "b", "", "", "", ""]
    assert dec.end is not None and dec.end.kind is End.USER_STOP_STRING and dec.tokens == 4


def test_text_out_engine_eos() -> None:
    dec = text_out(stop=["zz"])
    outs = [EngineOutput(text="a"), EngineOutput(text="z", finish="eos", matched=7)]
    text, _ = feed(dec, outs)
    assert text == "az"
    assert dec.end is not None and dec.end.kind is End.MODEL_EOS and dec.tokens == 2
