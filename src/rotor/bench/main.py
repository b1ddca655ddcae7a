"""`rotor bench`: preflight (model, ignore_eos), warm-up, the levels, then
results.json, report.html and the terminal table; or `--compare` of earlier
results."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from rotor import event_loop
from rotor.bench import arrivals, html, results, tokens
from rotor.bench import trace as traces
from rotor.bench.args import BenchConfig, config_from_args
from rotor.bench.client import Client, api_headers, tool_specs
from rotor.bench.cpu import check_pids, total_cpu_seconds
from rotor.bench.http import Connections, Endpoint, HTTPError
from rotor.bench.loop import Budget, closed_loop, open_loop
from rotor.bench.progress import Live, Quiet
from rotor.bench.stats import summarize
from rotor.bench.workload import conversations


class BenchError(Exception):
    """A run that cannot go on, with the message the user sees."""


def _rotor_version() -> str:
    try:
        return version("rotor")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


async def resolve_model(connections: Connections) -> str:
    try:
        status, body = await connections.get("/models")
    except HTTPError as e:
        raise BenchError(f"cannot reach the server: {e}") from None
    if status != 200:
        raise BenchError(f"GET /models answered {status}; give --model")
    try:
        model = orjson.loads(body)["data"][0]["id"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        model = None
    if not isinstance(model, str):
        raise BenchError("GET /models listed no model; give --model")
    return model


async def probe(
    cfg: BenchConfig, connections: Connections, model: str, tools: list[Any]
) -> tuple[bool, dict[str, Any]]:
    """One short request: does the server take `ignore_eos`, and does it answer
    at all? Returns whether to send ignore_eos, and the answered request."""
    messages = [{"role": "user", "content": "Say hello."}]
    tries = {"auto": (True, False), "on": (True,), "off": (False,)}[cfg.ignore_eos]
    last: dict[str, str] | None = None
    for ignore_eos in tries:
        client = Client(cfg.endpoint, connections, model, ignore_eos, tools, cfg.timeout)
        record, _ = await client.send(client.body(messages, 2), time.perf_counter())
        last = record["error"]
        if last is None:
            return ignore_eos, record
        if not (ignore_eos and last["kind"] == "http_400" and "ignore_eos" in last["message"]):
            break
    assert last is not None
    raise BenchError(f"the server refused a probe request ({last['kind']}): {last['message']}")


async def tokens_per_word(
    cfg: BenchConfig, client: Client, trace: traces.Trace | None, console: Console
) -> tuple[float | None, list[dict[str, Any]]]:
    """The server's tokens per word, where lengths are tokens (a trace, a mix):
    the flag's, or measured with two requests (their records returned too)."""
    if not (cfg.workload.mix or (trace is not None and trace.in_tokens)):
        return None, []
    if cfg.tokens_per_word is not None:
        return cfg.tokens_per_word, []
    try:
        tpw, recs = await tokens.measure(client, time.perf_counter(), cfg.seed)
    except ValueError as e:
        raise BenchError(str(e)) from None
    console.print(
        f"rotor bench: the server's tokenizer makes {tpw:.3f} tokens of a word (measured)"
    )
    return tpw, recs


async def run_levels(
    cfg: BenchConfig, console: Console, trace: traces.Trace | None = None
) -> dict[str, Any]:
    endpoint = Endpoint.parse(cfg.url)
    connections = Connections(endpoint, api_headers(cfg.api_key))
    try:
        model = cfg.model or await resolve_model(connections)
        tools = tool_specs(cfg.tools)
        ignore_eos, probed = await probe(cfg, connections, model, tools)
        client = Client(cfg.endpoint, connections, model, ignore_eos, tools, cfg.timeout)
        console.print(
            f"rotor bench: {cfg.endpoint} · {model} · {cfg.url} · "
            f"ignore_eos {'on' if ignore_eos else 'not accepted' if cfg.ignore_eos == 'auto' else 'off'}"
        )
        tpw, calibration = await tokens_per_word(cfg, client, trace, console)
        cfg.workload = replace(cfg.workload, tokens_per_word=tpw)
        progress = Live(console) if cfg.progress and console.is_terminal else Quiet()
        warmup: list[dict[str, Any]] = []
        try:
            if cfg.warmup:
                first = int(cfg.levels[0]) if cfg.mode == "closed" else 8
                warm = conversations(cfg.workload, f"{cfg.seed}:warmup")
                progress.begin("warm-up", cfg.warmup, None)
                budget = Budget(cfg.warmup, None)
                run = await closed_loop(client, warm, min(first, cfg.warmup), budget, progress)
                warmup = run.records
                progress.end()
            levels = []
            for i, level in enumerate(cfg.levels):
                levels.append(await _level(cfg, client, i, level, progress, console, trace))
        finally:
            progress.close()
    finally:
        connections.close()
    return {
        "schema": results.SCHEMA,
        "label": "",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rotor_version": _rotor_version(),
        "config": results.config_json(cfg, model, ignore_eos),
        "probe": probed,
        "calibration": results.totals(calibration),
        "warmup": results.totals(warmup),
        "levels": levels,
    }


async def _level(
    cfg: BenchConfig,
    client: Client,
    i: int,
    level: float,
    progress: Any,
    console: Console,
    trace: traces.Trace | None = None,
) -> dict[str, Any]:
    count = cfg.requests_for(level)
    if trace is not None:  # each level its own text: no level reuses another's cache
        convs = trace.conversations(cfg.workload.tokens_per_word, f"{cfg.seed}:{i}")
        label = f"trace ×{level:g}"
    else:
        convs = conversations(cfg.workload, f"{cfg.seed}:{i}")
        label = f"c={int(level)}" if cfg.mode == "closed" else f"{level:g} req/s"
    cpu0 = total_cpu_seconds(cfg.server_pids) if cfg.server_pids else 0.0
    client0 = time.process_time()
    progress.begin(label, count or (len(trace.timestamps_ms) if trace else None), cfg.duration)
    budget = Budget(count, cfg.duration)
    if cfg.mode == "closed":
        run = await closed_loop(client, convs, int(level), budget, progress)
    elif trace is not None:
        times: Iterable[float] = traces.send_offsets(trace.timestamps_ms, level)
        run = await open_loop(client, convs, times, budget, progress, cfg.max_concurrency)
    else:
        rng = arrivals.seeded(cfg.seed * 1000 + i)
        times = arrivals.schedule(level, cfg.burstiness, rng, until=cfg.duration)
        run = await open_loop(client, convs, times, budget, progress, cfg.max_concurrency)
    progress.end()
    client_cpu = time.process_time() - client0
    summary = summarize(run.records, run.duration_s, cfg.slo or None)
    dur = run.duration_s or math.nan
    summary["max_in_flight"] = run.max_in_flight
    summary["server_cpu"] = None
    if cfg.server_pids:
        cpu = total_cpu_seconds(cfg.server_pids) - cpu0
        out = summary["output_tokens"]
        summary["server_cpu"] = {
            "seconds": cpu,
            "cores": cpu / dur,
            "us_per_output_token": 1e6 * cpu / out if out else None,
        }
    summary["client_cpu"] = {"seconds": client_cpu, "cores": client_cpu / dur}
    if not isinstance(progress, Live):
        console.print(
            f"  {label}: {summary['completed']}/{summary['requests']} ok, "
            f"{summary['request_throughput']:.1f} req/s, {summary['output_throughput']:,.0f} tok/s"
        )
    return results.level_json(cfg.mode, level, summary, run.records)


def _default_dir() -> Path:
    return Path("bench-results") / datetime.now().strftime("%Y%m%d-%H%M%S")


def _labels(docs: list[dict[str, Any]], paths: list[Path]) -> None:
    """Each compared run a distinct name: its label, else its folder's name."""
    seen: set[str] = set()
    for doc, path in zip(docs, paths, strict=True):
        label = doc.get("label") or path.parent.name or path.stem
        if label in seen:
            label = f"{label} ({path})"
        seen.add(label)
        doc["label"] = label


def compare(paths: list[Path], out_dir: Path | None, console: Console) -> int:
    from rotor.bench.table import print_table

    if len(paths) < 2:
        raise BenchError("--compare needs two or more results.json files")
    try:
        docs = [results.load(p) for p in paths]
    except ValueError as e:
        raise BenchError(str(e)) from None
    _labels(docs, paths)
    out_dir = out_dir or _default_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.html"
    report.write_text(html.render(docs), encoding="utf-8")
    print_table(console, docs)
    console.print(f"report: {report}")
    return 0


def main(args: argparse.Namespace) -> int:
    console = Console(width=None if sys.stdout.isatty() else 200)
    try:
        if args.compare:
            return compare(list(args.compare), args.output_dir, console)
        cfg = config_from_args(args)
        check_pids(cfg.server_pids)
        trace = None
        if cfg.trace is not None:
            options = traces.TraceOptions(block_size=cfg.trace_block_size)
            trace = traces.read(cfg.trace, cfg.trace_format, options)
        doc = event_loop.run(run_levels(cfg, console, trace))  # uvloop: a cheaper client
    except (BenchError, ValueError) as e:
        console.print(f"[red]rotor bench:[/red] {e}", highlight=False)
        return 2
    except KeyboardInterrupt:
        console.print("rotor bench: interrupted")
        return 130
    from rotor.bench.table import print_table

    out_dir = cfg.output_dir or _default_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    doc["label"] = cfg.label or out_dir.name
    results.write(out_dir / "results.json", doc)
    (out_dir / "report.html").write_text(html.render([doc]), encoding="utf-8")
    print_table(console, [doc])
    console.print(f"results: {out_dir / 'results.json'}\nreport:  {out_dir / 'report.html'}")
    failed = sum(lv["summary"]["failed"] for lv in doc["levels"])
    return 1 if failed and failed == sum(lv["summary"]["requests"] for lv in doc["levels"]) else 0
