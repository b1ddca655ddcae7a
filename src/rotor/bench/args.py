"""`rotor bench` flags and their meaning as one typed, checked BenchConfig.

cli.py adds these flags to its `bench` subparser; everything here is parsing
and validation (a bad value is a clear message, never a traceback later).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from rotor.bench.apis import APIS, IMAGE_APIS, TOOL_APIS
from rotor.bench.images import ImageSpec, parse_size
from rotor.bench.mix import parse_mix
from rotor.bench.trace import FORMATS
from rotor.bench.workload import WorkloadSpec

DESCRIPTION = """\
Benchmark any OpenAI-compatible server (rotor, vLLM, Dynamo, ...): a closed loop
(--concurrency 1 8 32, a sweep), an open loop (--request-rate R, Poisson with
--burstiness) or a trace replayed at its timestamps (--trace FILE, --trace-speedup
X), each level for --num-requests N or --duration S, after a warm-up.
Writes results.json (every request's timings and the summary) and report.html
(plots) to --output-dir, and prints a table. `rotor bench --compare A.json
B.json` writes a side-by-side report of earlier runs instead.
"""

SLO_KEYS = ("ttft", "tpot", "itl", "e2e")
UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:8000/v1", help="server base URL (…/v1)")
    p.add_argument("--model", help="model name (default: the server's first in /v1/models)")
    p.add_argument("--endpoint", choices=APIS, default="chat", help="API to drive (chat)")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="[OPENAI_API_KEY]")
    load = p.add_argument_group("load")
    load.add_argument("--concurrency", type=int, nargs="+", metavar="N", help="closed loop (8)")
    load.add_argument("--request-rate", type=float, nargs="+", metavar="R", help="open loop, req/s")
    load.add_argument("--burstiness", type=float, default=1.0, help="gamma shape; 1 = Poisson")
    load.add_argument("--max-concurrency", type=int, help="open loop: most requests at once")
    load.add_argument("--num-requests", type=int, help="per level (default max(100, 10×N); 200)")
    load.add_argument("--duration", type=float, metavar="S", help="per level, seconds")
    load.add_argument("--warmup", type=int, default=8, help="unrecorded requests first (8)")
    load.add_argument("--timeout", type=float, default=600.0, help="per request, seconds (600)")
    trace = p.add_argument_group("trace replay")
    trace.add_argument("--trace", type=Path, metavar="FILE", help="replay a trace at its times")
    trace.add_argument(
        "--trace-format",
        choices=tuple(FORMATS),
        default="mooncake",
        help="its format: mooncake, or rotor (a --request-log file)",
    )
    trace.add_argument(
        "--trace-speedup", type=float, nargs="+", metavar="X", help="divide its gaps (1); a sweep"
    )
    trace.add_argument("--trace-block-size", type=int, default=512, help="tokens per hash id (512)")
    work = p.add_argument_group("workload")
    work.add_argument("--input-len", type=int, default=512, help="prompt words (512)")
    work.add_argument("--input-len-std", type=float, default=0.0, help="its std deviation (0)")
    work.add_argument("--output-len", type=int, default=128, help="max_tokens (128)")
    work.add_argument("--output-len-std", type=float, default=0.0, help="its std deviation (0)")
    work.add_argument("--shared-prefix", metavar="NxL", help="N prefixes of L words each")
    work.add_argument("--turns", type=int, default=1, help="turns per conversation (1)")
    work.add_argument("--tools", type=int, default=0, help="function tools per request (0)")
    work.add_argument("--dataset", type=Path, metavar="FILE.jsonl", help="requests from a file")
    work.add_argument(
        "--mix", metavar="SPEC", help="prompt classes in tokens: long=8000:16000@0.3,…"
    )
    work.add_argument(
        "--tokens-per-word",
        type=float,
        metavar="X",
        help="the server's, for --trace/--mix (measured)",
    )
    img = p.add_argument_group("images")
    img.add_argument("--images-per-request", type=int, default=0, help="images per message (0)")
    img.add_argument("--image-size", default="512x512", metavar="WxH", help="pixels (512x512)")
    img.add_argument("--image-reuse", type=float, default=0.0, help="share of requests reusing (0)")
    img.add_argument("--image-pool", type=int, default=8, help="images they reuse (8)")
    work.add_argument(
        "--ignore-eos", choices=("auto", "on", "off"), default="auto", help="auto: if accepted"
    )
    work.add_argument("--seed", type=int, default=0, help="workload and arrival seed (0)")
    out = p.add_argument_group("report")
    out.add_argument("--slo", help="goodput objectives, e.g. ttft=2s,itl=50ms,tpot=50ms,e2e=5s")
    out.add_argument("--server-pid", type=int, nargs="+", metavar="PID", help="for CPU/token")
    out.add_argument("--output-dir", type=Path, help="default ./bench-results/<timestamp>")
    out.add_argument("--label", help="this run's name in reports (default: the output dir)")
    out.add_argument("--no-progress", action="store_true", help="no live display")
    out.add_argument("--compare", type=Path, nargs="+", metavar="RESULTS", help="A.json B.json …")


@dataclass
class BenchConfig:
    url: str
    model: str | None
    endpoint: str
    api_key: str | None
    mode: str  # "closed" | "open" | "trace"
    levels: list[float]  # concurrencies, request rates or trace speedups
    burstiness: float
    max_concurrency: int | None
    num_requests: int | None
    duration: float | None
    warmup: int
    timeout: float
    workload: WorkloadSpec
    tools: int
    ignore_eos: str
    seed: int
    slo: dict[str, float] = field(default_factory=dict)
    server_pids: list[int] = field(default_factory=list)
    output_dir: Path | None = None
    label: str | None = None
    progress: bool = True
    trace: Path | None = None
    trace_format: str = "mooncake"
    trace_block_size: int = 512
    tokens_per_word: float | None = None  # given; else measured when lengths are tokens

    def requests_for(self, level: float) -> int | None:
        """The level's request count: the flag, or a default when no duration
        (a trace: the flag, else all of it)."""
        if self.mode == "trace" or self.num_requests is not None or self.duration is not None:
            return self.num_requests
        return max(100, 10 * int(level)) if self.mode == "closed" else 200


def parse_slo(text: str) -> dict[str, float]:
    """'ttft=200ms,tpot=50ms' → {'ttft': 0.2, 'tpot': 0.05} (seconds; bare = ms)."""
    out: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*(us|µs|ms|s)?", value.strip())
        if not sep or key not in SLO_KEYS or not m:
            raise ValueError(
                f"--slo: {item!r} is not KEY=VALUE with KEY one of {', '.join(SLO_KEYS)} "
                "and VALUE like 200ms, 0.5s or 800us"
            )
        out[key] = float(m[1]) * UNITS[m[2] or "ms"]
    if not out:
        raise ValueError("--slo: no objectives given")
    return out


def parse_shared_prefix(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[x×*]\s*(\d+)\s*", text)
    if not m or int(m[1]) < 1 or int(m[2]) < 1:
        raise ValueError(f"--shared-prefix {text!r}: expected NxL, e.g. 4x256")
    return int(m[1]), int(m[2])


def _positive(name: str, value: float | None, allow_zero: bool = False) -> None:
    if value is not None and not (value >= 0 if allow_zero else value > 0):
        raise ValueError(f"{name} must be {'≥ 0' if allow_zero else 'positive'}, got {value}")


def _check_trace(a: argparse.Namespace) -> None:
    """A trace gives the schedule and the requests: nothing else may."""
    if a.trace is None:
        if a.trace_speedup:
            raise ValueError("--trace-speedup needs --trace")
        return
    for flag, given in (
        ("--concurrency", a.concurrency),
        ("--request-rate", a.request_rate),
        ("--dataset", a.dataset),
        ("--mix", a.mix),
        ("--shared-prefix", a.shared_prefix),
        ("--turns", a.turns != 1),
        ("--images-per-request", a.images_per_request),
    ):
        if given:
            raise ValueError(f"--trace gives the schedule and the requests; it takes no {flag}")
    if not a.trace.is_file():
        raise ValueError(f"--trace {a.trace}: no such file")
    _positive("--trace-block-size", a.trace_block_size)
    for x in a.trace_speedup or ():
        _positive("--trace-speedup", x)


def image_spec(a: argparse.Namespace) -> ImageSpec | None:
    """The image workload the flags ask for; None without --images-per-request."""
    _positive("--images-per-request", a.images_per_request, allow_zero=True)
    size = parse_size(a.image_size)
    if not 0 <= a.image_reuse <= 1:
        raise ValueError(f"--image-reuse is a share of the requests, 0 to 1; got {a.image_reuse}")
    if not a.images_per_request:
        return None
    if a.endpoint not in IMAGE_APIS:
        raise ValueError(
            f"--images-per-request needs --endpoint {', '.join(IMAGE_APIS)} (not {a.endpoint})"
        )
    _positive("--image-pool", a.image_pool)
    if a.image_reuse > 0 and a.image_pool < a.images_per_request:
        raise ValueError(
            f"--image-pool {a.image_pool} is smaller than --images-per-request "
            f"{a.images_per_request}: a reusing request takes that many pool images"
        )
    return ImageSpec(a.images_per_request, *size, reuse=a.image_reuse, pool=a.image_pool)


def config_from_args(a: argparse.Namespace) -> BenchConfig:
    """Checked settings; ValueError with a message that names the flag."""
    if a.concurrency and a.request_rate:
        raise ValueError("give --concurrency (closed loop) or --request-rate (open loop), not both")
    _check_trace(a)
    if a.trace is not None:
        mode, levels = "trace", list(a.trace_speedup or [1.0])
    elif a.request_rate:
        mode, levels = "open", list(a.request_rate)
        for r in levels:
            if not r > 0:
                raise ValueError(f"--request-rate must be positive (or inf), got {r}")
    else:
        mode, levels = "closed", [float(c) for c in (a.concurrency or [8])]
        for c in levels:
            _positive("--concurrency", c)
    if a.max_concurrency is not None and mode == "closed":
        raise ValueError("--max-concurrency caps the open loop; use --concurrency for a closed one")
    for name in ("burstiness", "max_concurrency", "num_requests", "duration", "timeout"):
        _positive("--" + name.replace("_", "-"), getattr(a, name))
    for name in ("input_len", "output_len", "turns"):
        _positive("--" + name.replace("_", "-"), getattr(a, name))
    for name in ("warmup", "tools", "input_len_std", "output_len_std"):
        _positive("--" + name.replace("_", "-"), getattr(a, name), allow_zero=True)
    if a.tools and a.endpoint not in TOOL_APIS:
        raise ValueError(f"--tools needs --endpoint {', '.join(TOOL_APIS)} (not {a.endpoint})")
    if a.dataset is not None and (a.shared_prefix or a.turns != 1 or a.mix):
        raise ValueError(
            "--dataset gives the requests; it takes no --shared-prefix, --turns or --mix"
        )
    if a.mix and (a.shared_prefix or a.turns != 1):
        raise ValueError("--mix makes one-turn prompts of its own; no --shared-prefix or --turns")
    _positive("--tokens-per-word", a.tokens_per_word)
    if a.dataset is not None and not a.dataset.is_file():
        raise ValueError(f"--dataset {a.dataset}: no such file")
    if mode == "open" and any(map(math.isinf, levels)) and a.duration and not a.num_requests:
        raise ValueError("--request-rate inf needs --num-requests (a duration sends without end)")
    prefix = parse_shared_prefix(a.shared_prefix) if a.shared_prefix else None
    workload = WorkloadSpec(
        input_len=a.input_len,
        input_len_std=a.input_len_std,
        output_len=a.output_len,
        output_len_std=a.output_len_std,
        shared_prefix=prefix,
        turns=a.turns,
        dataset=a.dataset,
        mix=parse_mix(a.mix) if a.mix else None,
        images=image_spec(a),
    )
    return BenchConfig(
        url=a.url,
        model=a.model,
        endpoint=a.endpoint,
        api_key=a.api_key,
        mode=mode,
        levels=levels,
        burstiness=a.burstiness,
        max_concurrency=a.max_concurrency,
        num_requests=a.num_requests,
        duration=a.duration,
        warmup=a.warmup,
        timeout=a.timeout,
        workload=workload,
        tools=a.tools,
        ignore_eos=a.ignore_eos,
        seed=a.seed,
        slo=parse_slo(a.slo) if a.slo else {},
        server_pids=list(a.server_pid or []),
        output_dir=a.output_dir,
        label=a.label,
        progress=not a.no_progress,
        trace=a.trace,
        trace_format=a.trace_format,
        trace_block_size=a.trace_block_size,
        tokens_per_word=a.tokens_per_word,
    )
