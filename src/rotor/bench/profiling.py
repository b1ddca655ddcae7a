"""`rotor planner profile`: measure one worker and write its profile.json.

The planner's throughput mode needs two curves of one worker
(planner/profile.py): the TTFT of a lone prompt by its length, and the
inter-token latency of c streams decoding together by c and their context.
This measures both against the OpenAI-compatible URL of a server in front of
ONE worker, with rotor bench's own pieces (it is a load, so it lives here; the
planner only reads the profile it writes): its HTTP connections and timed
streaming client, its closed loop, and its prompts of random words sized by the
server's count of their tokens (no tokenizer here; the server's usage is the
truth): a measured tokens per word for a first guess, then per length a few
1-token requests to fit it.

- Prefill: per prompt length, `--requests` lone requests one after another,
  each answering 1 token → p50 TTFT.
- Decode: per concurrency c and context (the shortest, a middle and the
  longest prompt length, plus half the answer), a closed loop of c streams
  answering `--osl` tokens with ignore_eos. Only the gaps while all c streams
  were decoding count (not while one of them still waited for its prefill,
  nor in the ramp-down); each stream's mean gap over them (robust to events
  sent together) and the p50 over the streams → ITL.

Every prompt opens with words of its own, so no request finds another's
prefix in the cache (which would make its TTFT the cache's, not the prefill's).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import orjson

from rotor import event_loop
from rotor.bench.client import Client
from rotor.bench.http import Connections, Endpoint, HTTPError
from rotor.bench.loop import Budget, Run, closed_loop
from rotor.bench.progress import Quiet
from rotor.bench.stats import percentile
from rotor.bench.tokens import keyed_words
from rotor.bench.workload import Conversation, Turn
from rotor.planner.profile import DecodePoint, PrefillPoint, Profile

PROG = "rotor planner profile"
DESCRIPTION = """\
Measure one worker's performance for the planner's throughput mode: the TTFT
of lone prompts of each --isl length, and the inter-token latency of
--concurrency streams decoding together at a few contexts. --url is the
OpenAI-compatible base URL of a server in front of ONE worker (rotor run, or a
rotor frontend with one worker). Writes --out (profile.json).
"""

DEFAULT_ISL = "128,512,1024,2048,4096"
DEFAULT_CONCURRENCY = "1,4,16,64"
WARMUP = 2  # unrecorded requests first: a fresh engine's first requests are slow
MIN_DECODE_REQUESTS = 4  # per decode point, at least (else 2 × concurrency)
CALIBRATION_WORDS = (8, 40)  # the two short calibration prompts, in words
HEAD_WORDS = 3  # each prompt's own opening words
FIT_TRIES = 4  # requests at most to fit a prompt length
EMPTY = "\u2014"


class ProfileError(Exception):
    """A profile that cannot be measured, with the message the user sees."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:8000/v1", help="server base URL (…/v1)")
    p.add_argument("--model", help="model name (default: the server's first in /v1/models)")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="[OPENAI_API_KEY]")
    p.add_argument("--out", default="profile.json", help="where to write it (profile.json)")
    p.add_argument(
        "--isl", default=DEFAULT_ISL, metavar="N,N,…", help=f"prompt tokens ({DEFAULT_ISL})"
    )
    p.add_argument(
        "--concurrency",
        default=DEFAULT_CONCURRENCY,
        metavar="N,N,…",
        help=f"streams decoding together ({DEFAULT_CONCURRENCY})",
    )
    p.add_argument("--osl", default="64", metavar="N", help="answer tokens per decode stream (64)")
    p.add_argument("--requests", default="8", metavar="N", help="requests per prompt length (8)")
    p.add_argument("--timeout", default="600", metavar="S", help="per request, seconds (600)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")


@dataclass(frozen=True)
class Settings:
    """The checked flags."""

    url: str
    model: str | None
    api_key: str | None
    out: str
    isls: list[int]
    concurrencies: list[int]
    osl: int
    requests: int
    timeout: float
    quiet: bool = False


def parse_list(flag: str, text: str) -> list[int]:
    """'128, 512,128' → [128, 512]: positive integers, sorted, each once."""
    values = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"{flag}: {text!r} has an empty item; expected N,N,… e.g. 128,512")
        values.append(_positive_int(flag, item))
    return sorted(set(values))


def _positive_int(flag: str, text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"{flag}: must be positive, got {value}")
    return value


def settings_from_args(a: argparse.Namespace) -> Settings:
    """The flags checked; ValueError with a message that names the flag."""
    try:
        timeout = float(a.timeout)
    except ValueError:
        raise ValueError(f"--timeout: {a.timeout!r} is not a number") from None
    if not timeout > 0:
        raise ValueError(f"--timeout: must be positive, got {a.timeout}")
    osl = _positive_int("--osl", a.osl)
    if osl < 2:
        raise ValueError("--osl: must be at least 2 (an answer of one token has no gaps)")
    Endpoint.parse(a.url)  # its own message, naming --url
    return Settings(
        url=a.url,
        model=a.model,
        api_key=a.api_key,
        out=a.out,
        isls=parse_list("--isl", a.isl),
        concurrencies=parse_list("--concurrency", a.concurrency),
        osl=osl,
        requests=_positive_int("--requests", a.requests),
        timeout=timeout,
        quiet=a.quiet,
    )


# -- the server -----------------------------------------------------------------


@dataclass(frozen=True)
class ServerInfo:
    """What /v1/models says of the model."""

    model: str
    owned_by: str | None = None  # the serving stack: rotor, vllm, sglang …
    max_model_len: int | None = None
    workers: int | None = None  # a rotor frontend's live workers of the model


async def server_info(connections: Connections, model: str | None) -> ServerInfo:
    """The model (the first listed unless given) and what the list tells of it."""
    try:
        status, body = await connections.get("/models")
    except HTTPError as e:
        raise ProfileError(f"cannot reach the server: {e}") from None
    entries: list[Any] = []
    if status == 200:
        try:
            entries = [e for e in orjson.loads(body)["data"] if isinstance(e, dict)]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            entries = []
    if model is None:
        if status != 200:
            raise ProfileError(f"GET /models answered {status}; give --model")
        if not entries or not isinstance(entries[0].get("id"), str):
            raise ProfileError("GET /models listed no model; give --model")
        model = entries[0]["id"]
    entry: dict[str, Any] = next((e for e in entries if e.get("id") == model), {})
    length = entry.get("max_model_len", entry.get("max_input_tokens"))
    pools = entry.get("pools")
    workers = None
    if isinstance(pools, dict):
        workers = len({w for ids in pools.values() if isinstance(ids, list) for w in ids})
    return ServerInfo(
        model=model,
        owned_by=entry.get("owned_by") if isinstance(entry.get("owned_by"), str) else None,
        max_model_len=length if isinstance(length, int) and length > 0 else None,
        workers=workers,
    )


def openai_headers(api_key: str | None) -> dict[str, str]:
    """OpenAI's bearer alone: bench's headers add `anthropic-version`, and with
    it rotor lists its models the Anthropic way (without owned_by)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _failure(what: str, records: Sequence[dict[str, Any]]) -> None:
    """ProfileError naming the first failed request, if any failed."""
    for rec in records:
        err = rec.get("error")
        if err:
            raise ProfileError(
                f"{what}: the server answered an error ({err['kind']}): {err['message'][:300]}"
            )


async def probe(connections: Connections, model: str, timeout: float) -> Client:
    """One short request: does the server answer, and does it take ignore_eos
    (without it decode streams may end early)? The client to measure with."""
    messages = [{"role": "user", "content": "Say hello."}]
    for ignore_eos in (True, False):
        client = Client("chat", connections, model, ignore_eos, [], timeout)
        record, _ = await client.send(client.body(messages, 2), 0.0)
        err = record["error"]
        if err is None:
            return client
        if ignore_eos and err["kind"] == "http_400" and "ignore_eos" in err["message"]:
            continue  # the server refuses ignore_eos: again without it
        _failure("a probe request", [record])
    raise AssertionError("unreachable")  # pragma: no cover


# -- prompt lengths -----------------------------------------------------------------


@dataclass(frozen=True)
class Sizing:
    """Prompt tokens ≈ overhead + per_word × words, from the server's usage
    (`overhead`: the chat template's own tokens)."""

    per_word: float
    overhead: float

    def words(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead) / self.per_word))


async def prompt_tokens(client: Client, text: str, what: str) -> int:
    """What the server counts of `text` as a user message (one request, 1 token)."""
    rec, _ = await client.send(client.body([{"role": "user", "content": text}], 1), 0.0)
    _failure(what, [rec])
    if rec["prompt_tokens"] is None:
        raise ProfileError("the server reports no usage (prompt tokens); cannot size prompts")
    return int(rec["prompt_tokens"])


async def calibrate(client: Client, nonce: str, longest: int) -> Sizing:
    """Two short prompts give a first line; a third of about `longest` tokens
    (the longest to measure) makes it good over the range that matters."""

    async def tokens_of(n: int) -> int:
        text = keyed_words(f"{nonce}-cal-{n}", n)
        return await prompt_tokens(client, text, "measuring the server's tokens per word")

    (n0, n1) = CALIBRATION_WORDS
    t0, t1 = await tokens_of(n0), await tokens_of(n1)
    if t1 <= t0:
        raise ProfileError(f"{n1 - n0} more words cost {t1 - t0} more prompt tokens; odd server")
    rough = Sizing((t1 - t0) / (n1 - n0), t0 - n0 * (t1 - t0) / (n1 - n0))
    n2 = rough.words(longest)
    if n2 < 2 * n1:
        return rough
    t2 = await tokens_of(n2)
    per_word = (t2 - t0) / (n2 - n0)
    if not per_word > 0:
        return rough
    return Sizing(per_word, t0 - n0 * per_word)


@dataclass(frozen=True)
class Length:
    """Prompts of one length. Each opens with words of its own, then a filler
    all of them share: no two share a cached prefix (a cache's blocks are
    chained, so one early block that differs makes every later one differ),
    yet all are as long, the filler's words fitted to the server's count."""

    isl: int
    key: str  # the filler's
    filler_words: int
    tokens: int = 0  # what the server counted of the fitting prompt

    def text(self, head: str) -> str:
        own = keyed_words(head, HEAD_WORDS)
        return f"{own} {keyed_words(self.key, self.filler_words)}" if self.filler_words else own

    def requests(self, tag: str, max_tokens: int) -> Iterator[Conversation]:
        """One-turn requests without end, each opening its own way."""
        i = 0
        while True:
            yield Conversation((Turn(self.text(f"{tag}-{i}"), max_tokens),), index=i)
            i += 1


async def fit(client: Client, sizing: Sizing, nonce: str, isl: int) -> Length:
    """The filler that makes prompts of `isl` tokens: a first guess from the
    sizing, corrected by what the server counts (a few requests of 1 token;
    they warm the server up too). As near as the words allow; a prompt never
    gets shorter than the chat template and the opening words."""
    n = max(0, sizing.words(isl) - HEAD_WORDS)
    best: Length | None = None
    for _ in range(FIT_TRIES):
        guess = Length(isl, f"{nonce}-fill-{isl}", n)
        got = await prompt_tokens(client, guess.text(f"{nonce}-fit-{isl}"), f"sizing --isl {isl}")
        guess = replace(guess, tokens=got)
        if best is None or abs(got - isl) < abs(best.tokens - isl):
            best = guess
        if abs(got - isl) <= max(1, isl // 100):
            break
        step = round((isl - got) / sizing.per_word) or (1 if isl > got else -1)
        if max(0, n + step) == n:
            break
        n = max(0, n + step)
    assert best is not None
    return best


# -- the figures ------------------------------------------------------------------


def steady_itls(records: Sequence[dict[str, Any]], concurrency: int) -> list[float]:
    """Each stream's mean inter-token gap over the gaps when all `concurrency`
    streams were decoding: a gap counts when `concurrency` requests had their
    first token before it began and their last after it ended. In a closed
    loop at most that many are in flight, so none was then waiting for its
    prefill and none had ended (the ramp-down)."""
    spans = []
    for r in records:
        if r.get("error") or r.get("ttft_s") is None:
            continue
        first = r["start_s"] + r["ttft_s"]
        spans.append((r, first, first + sum(r["itl_s"])))
    out = []
    for r, first, _ in spans:
        kept: list[float] = []
        t = first
        for gap in r["itl_s"]:
            a, b = t, t + gap
            t = b
            if sum(1 for _, f, last in spans if f <= a and last >= b) >= concurrency:
                kept.append(gap)
        if kept:
            out.append(sum(kept) / len(kept))
    return out


def whole_itls(records: Sequence[dict[str, Any]]) -> list[float]:
    """Each stream's mean gap over its whole answer (when no gap was steady)."""
    return [sum(r["itl_s"]) / len(r["itl_s"]) for r in records if not r.get("error") and r["itl_s"]]


def decode_contexts(isls: Sequence[int]) -> list[int]:
    """The prompt lengths decode is measured at: the shortest, a middle one, the longest."""
    ordered = sorted(set(isls))
    return sorted({ordered[0], ordered[len(ordered) // 2], ordered[-1]})


def quantile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of values that are not empty."""
    return percentile(sorted(values), q)


def p50(values: Sequence[float]) -> float:
    return quantile(values, 50)


# -- the measurement -----------------------------------------------------------------


async def measure(s: Settings, say: Callable[[str], None] | None = None) -> Profile:
    """The profile; `meta["points"]` holds what else each point saw (the prompt
    tokens the server counted, how many streams …). `say` gets one line per
    point as it is measured, and the warnings."""
    say = say or (lambda _line: None)
    connections = Connections(Endpoint.parse(s.url), openai_headers(s.api_key))
    try:
        return await _measure(s, connections, say)
    finally:
        connections.close()


async def _measure(s: Settings, connections: Connections, say: Callable[[str], None]) -> Profile:
    info = await server_info(connections, s.model)
    if info.max_model_len is not None and s.isls[-1] + s.osl > info.max_model_len:
        raise ProfileError(
            f"--isl {s.isls[-1]} + --osl {s.osl} tokens exceed the server's context of "
            f"{info.max_model_len} for {info.model}"
        )
    if info.workers is not None and info.workers > 1:
        say(
            f"warning: {info.workers} workers serve {info.model} behind {s.url}; "
            "a profile is of one worker, so its figures will be too good"
        )
    client = await probe(connections, info.model, s.timeout)
    if not client.ignore_eos:
        say("warning: the server refuses ignore_eos; decode streams may end early")
    nonce = secrets.token_hex(4)  # a second run's prompts are new to the server's cache too
    room = s.isls[-1] if info.max_model_len is None else min(s.isls[-1], info.max_model_len - 8)
    sizing = await calibrate(client, nonce, room)
    say(
        f"{info.model} · {s.url} · {sizing.per_word:.2f} tokens a word "
        f"+ {sizing.overhead:.0f} of the template"
    )
    lengths = {}
    for isl in s.isls:
        lengths[isl] = await fit(client, sizing, nonce, isl)
        if lengths[isl].tokens > isl * 1.1 + 2:
            say(
                f"warning: --isl {isl}: the shortest prompt here is {lengths[isl].tokens} "
                "tokens (the chat template's own); measured at that"
            )
    warm = await _loop(client, lengths[s.isls[0]].requests(f"{nonce}-w", s.osl), 1, WARMUP)
    _failure("warming up", warm.records)
    details: list[dict[str, Any]] = []
    prefill = [await _prefill(client, s, lengths[isl], nonce, details, say) for isl in s.isls]
    decode = []
    for isl in decode_contexts(s.isls):
        for c in s.concurrencies:
            decode.append(await _decode(client, s, lengths[isl], c, nonce, details, say))
    meta = {
        "url": s.url,
        "model": info.model,
        "engine": info.owned_by,  # who /v1/models says owns it: rotor, vllm, sglang …
        "max_model_len": info.max_model_len,
        "workers": info.workers,
        "rotor_version": _rotor_version(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "isl": s.isls,
        "concurrency": s.concurrencies,
        "osl": s.osl,
        "requests": s.requests,
        "ignore_eos": client.ignore_eos,
        "tokens_per_word": round(sizing.per_word, 4),
        "template_tokens": round(sizing.overhead, 1),
        "points": details,
    }
    return Profile(model=info.model, prefill=prefill, decode=decode, meta=meta)


async def _prefill(
    client: Client,
    s: Settings,
    length: Length,
    nonce: str,
    details: list[dict[str, Any]],
    say: Callable[[str], None],
) -> PrefillPoint:
    """`--requests` lone requests of `length`, one after another, 1 token each."""
    isl = length.isl
    run = await _loop(client, length.requests(f"{nonce}-p{isl}", 1), 1, s.requests)
    _failure(f"prefill at --isl {isl}", run.records)
    ttfts = [r["ttft_s"] for r in run.records]
    got = [r["prompt_tokens"] for r in run.records if r["prompt_tokens"] is not None]
    point = PrefillPoint(isl, p50(ttfts))
    details.append(
        {
            "kind": "prefill",
            "isl": isl,
            "prompt_tokens": round(p50(got)) if got else None,
            "requests": len(ttfts),
            "cached_tokens": sum(r["cached_tokens"] or 0 for r in run.records),
            "ttft_p90_s": quantile(ttfts, 90),
        }
    )
    say(f"prefill isl {isl}: TTFT p50 {point.ttft_s * 1e3:.2f} ms")
    return point


async def _decode(
    client: Client,
    s: Settings,
    length: Length,
    c: int,
    nonce: str,
    details: list[dict[str, Any]],
    say: Callable[[str], None],
) -> DecodePoint:
    """A closed loop of `c` streams of `length`, each answering `--osl` tokens."""
    context = length.isl + s.osl // 2
    n = max(2 * c, MIN_DECODE_REQUESTS)
    run = await _loop(client, length.requests(f"{nonce}-d{length.isl}-{c}", s.osl), c, n)
    _failure(f"decode at --concurrency {c}, context {context}", run.records)
    itls = steady_itls(run.records, c)
    steady = bool(itls)
    if not steady:
        itls = whole_itls(run.records)
    if not itls:
        raise ProfileError(
            f"decode at --concurrency {c}: no answer had two tokens; is ignore_eos taken?"
        )
    point = DecodePoint(c, context, p50(itls))
    details.append(
        {
            "kind": "decode",
            "concurrency": c,
            "context": context,
            "requests": len(run.records),
            "streams": len(itls),
            "steady": steady,
            "max_in_flight": run.max_in_flight,
            "output_tokens": sum(r["output_tokens"] or 0 for r in run.records),
        }
    )
    say(
        f"decode c={c} context {context}: ITL p50 {point.itl_s * 1e3:.2f} ms"
        + ("" if steady else " (never all streams decoding at once: whole answers)")
    )
    return point


async def _loop(client: Client, convs: Iterator[Conversation], concurrency: int, n: int) -> Run:
    return await closed_loop(client, convs, concurrency, Budget(n, None), Quiet())


def _rotor_version() -> str:
    try:
        return version("rotor")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        from rotor import __version__

        return __version__


# -- the command ---------------------------------------------------------------------


def print_table(profile: Profile, out: str) -> None:
    """Prefill (TTFT by prompt length) and decode (ITL by context × concurrency), in ms."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 120)
    points = profile.meta.get("points", [])
    got = {d["isl"]: d["prompt_tokens"] for d in points if d["kind"] == "prefill"}
    pre = Table(title=f"prefill · {profile.model}", caption="TTFT p50, ms", header_style="bold")
    for col in ("isl", "prompt tokens", "TTFT"):
        pre.add_column(col, justify="right")
    for p in profile.prefill:
        seen = got.get(p.isl)
        pre.add_row(str(p.isl), EMPTY if seen is None else str(seen), f"{p.ttft_s * 1e3:.2f}")
    cs = sorted({d.concurrency for d in profile.decode})
    dec = Table(
        title=f"decode · {profile.model}", caption="ITL p50 by concurrency, ms", header_style="bold"
    )
    dec.add_column("context", justify="right")
    for c in cs:
        dec.add_column(f"c={c}", justify="right")
    cells = {(d.context, d.concurrency): d.itl_s for d in profile.decode}
    for ctx in sorted({d.context for d in profile.decode}):
        row = [f"{cells[ctx, c] * 1e3:.2f}" if (ctx, c) in cells else EMPTY for c in cs]
        dec.add_row(str(ctx), *row)
    console.print(pre)
    console.print(dec)
    console.print(f"profile: {out}")


def main(args: argparse.Namespace) -> int:
    """Measure, write --out, print the table; 2 with a one-line message when
    the flags are wrong or the server is unreachable or answers errors."""

    def fail(message: str) -> int:
        print(f"{PROG}: {message}", file=sys.stderr)
        return 2

    try:
        s = settings_from_args(args)
    except ValueError as e:
        return fail(str(e))
    say = None if s.quiet else (lambda line: print(f"{PROG}: {line}", flush=True))
    try:
        profile = event_loop.run(measure(s, say))  # the client costs less next to the server
    except (ProfileError, ValueError) as e:
        return fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted")
        return 130
    try:
        profile.save(s.out)
    except OSError as e:
        return fail(f"--out {s.out}: {e.strerror or e}")
    if not s.quiet:
        print_table(profile, s.out)
    return 0
