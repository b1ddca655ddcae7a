"""results.json: the run's settings, every request's timings, each level's
summary. The schema is versioned (`schema`); fields are only ever added.

    {
      "schema": "rotor.bench/1",
      "label": str, "created": ISO-8601 time, "rotor_version": str,
      "probe": the preflight request's record (shape as in levels[].requests),
      "calibration": the same, of the two requests that measured the server's
                     tokens per word (none when no length is in tokens),
      "warmup": {requests, failed, prompt_tokens, output_tokens} (not in any level),
      "config": {url, endpoint, model, mode: "closed"|"open"|"trace", levels: [number],
                 burstiness, max_concurrency, num_requests, duration, warmup,
                 timeout, seed, ignore_eos: bool, tools, slo: {key: seconds},
                 server_pids: [int], workload: {input_len, input_len_std,
                 output_len, output_len_std, shared_prefix: [n, len]|null,
                 turns, dataset: path|null,
                 mix: [{name, min_tokens, max_tokens, share}]|null,
                 tokens_per_word: number|null (the one used: given or measured),
                 images: {per_request, width, height, reuse, pool}|null},
                 trace: path|null, trace_format, trace_block_size,
                 tokens_per_word: number|null (as given)},
      "levels": [{
        "mode": "closed"|"open"|"trace",
        "concurrency": int|null, "request_rate": number|null ("inf" when unbounded),
        "trace_speedup": number|null,
        "summary": {requests, completed, failed, errors: {kind: count},
                    without_usage, duration_s, request_throughput,
                    output_throughput, total_token_throughput, prompt_tokens,
                    output_tokens, cached_tokens, cache_hit_ratio|null,
                    ttft_ms, tpot_ms, itl_ms, e2e_ms: {count, mean, std, min,
                      p50, p90, p99, max}|null,
                    goodput: {requests, request_throughput, output_tokens,
                              output_throughput, fraction}|null,
                    schedule_lag_ms: {count, mean, …, max}|null (open loop and
                      trace: each request's send time after its scheduled one),
                    classes: {name: a summary of the class's requests}
                      (only with --mix),
                    images: {sent, bytes, reused, requests_with_images}
                      (only when requests carried images; bytes of the PNGs),
                    max_in_flight,
                    server_cpu: {seconds, cores, us_per_output_token}|null,
                    client_cpu: {seconds, cores}},
        "requests": [{index, conversation, turn, max_tokens,
                      scheduled_s|null (open loop, first turns), class|null,
                      images, image_bytes, images_reused (counts; PNG bytes),
                      start_s, ttft_s|null,
                      e2e_s, itl_s: [seconds between output events],
                      prompt_tokens|null, output_tokens|null, cached_tokens|null,
                      error: {kind, message}|null}]
      }]
    }

Token counts are the server's usage; times are seconds in requests and
milliseconds in summaries. `ttft_s` is the first event that carries output
(text, reasoning or a tool call); an answer with no visible output has its
end as its first token; a failed request has none. Error kinds: http_<status>, connect,
connection_closed, protocol, timeout, stream_error, incomplete.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

SCHEMA = "rotor.bench/1"
LEVEL_KEYS = ("mode", "concurrency", "request_rate", "summary", "requests")
SUMMARY_KEYS = (
    "requests",
    "completed",
    "failed",
    "errors",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
)


def config_json(config: Any, model: str, ignore_eos: bool) -> dict[str, Any]:
    """The settings that shaped the run (never the API key)."""
    d = asdict(config)
    d.pop("api_key", None)
    d.pop("progress", None)
    d.pop("output_dir", None)
    d.pop("label", None)
    d["model"] = model
    d["ignore_eos"] = ignore_eos
    d["levels"] = [_number(x) for x in d["levels"]]
    wl = d["workload"]
    wl["dataset"] = str(wl["dataset"]) if wl["dataset"] is not None else None
    d["trace"] = str(d["trace"]) if d["trace"] is not None else None
    return d


def _number(x: float) -> float | int | str:
    if math.isinf(x):
        return "inf"
    return int(x) if float(x).is_integer() else x


def level_json(
    mode: str, level: float, summary: dict[str, Any], records: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "mode": mode,
        "concurrency": int(level) if mode == "closed" else None,
        "request_rate": _number(level) if mode == "open" else None,
        "trace_speedup": _number(level) if mode == "trace" else None,
        "summary": summary,
        "requests": records,
    }


def totals(records: list[dict[str, Any]]) -> dict[str, int]:
    """What unrecorded requests (the warm-up) cost the server, for accounting."""
    return {
        "requests": len(records),
        "failed": sum(1 for r in records if r["error"]),
        "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in records),
        "output_tokens": sum(r["output_tokens"] or 0 for r in records),
    }


def x_value(level: dict[str, Any]) -> float:
    """The level's position on a plot's x axis."""
    if level["mode"] == "closed":
        return float(level["concurrency"])
    if level["mode"] == "trace":
        return float(level["trace_speedup"])
    rate = level["request_rate"]
    return math.inf if rate == "inf" else float(rate)


def x_label(level: dict[str, Any]) -> str:
    if level["mode"] == "closed":
        return f"c={level['concurrency']}"
    if level["mode"] == "trace":
        return f"trace ×{level['trace_speedup']}"
    return f"{level['request_rate']} req/s"


def write(path: Path, doc: dict[str, Any]) -> None:
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def load(path: Path) -> dict[str, Any]:
    """A results.json for --compare, checked enough that the report can trust it."""
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    except orjson.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a rotor bench results file (schema {SCHEMA})")
    levels = doc.get("levels")
    if not isinstance(levels, list) or not levels:
        raise ValueError(f"{path}: no levels")
    for i, level in enumerate(levels):
        missing = [k for k in LEVEL_KEYS if k not in level]
        missing += [f"summary.{k}" for k in SUMMARY_KEYS if k not in level.get("summary", {})]
        if missing:
            raise ValueError(f"{path}: level {i} lacks {', '.join(missing)}")
    return doc
