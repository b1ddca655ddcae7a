"""The summary as rows of formatted cells: the terminal table (rich) and the
report's HTML table are the same columns."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from rotor.bench.results import x_label


def _ms(d: dict[str, Any] | None, key: str) -> str:
    return "-" if not d else f"{d[key]:.2f}"


def columns(docs: list[dict[str, Any]]) -> list[str]:
    cols = ["run", "level", "ok", "err", "req/s", "out tok/s"]
    cols += ["TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99"]
    cols += ["E2E p50", "E2E p99", "cache hit"]
    if any(lv["summary"].get("schedule_lag_ms") for d in docs for lv in d["levels"]):
        cols.append("lag p99")
    if any(d["config"].get("slo") for d in docs):
        cols += ["goodput/s", "good tok/s"]
    if any(lv["summary"].get("server_cpu") for d in docs for lv in d["levels"]):
        cols.append("srv µs/tok")
    return cols


def rows(docs: list[dict[str, Any]], cols: list[str]) -> list[list[str]]:
    out = []
    for doc in docs:
        for lv in doc["levels"]:
            s = lv["summary"]
            hit = s.get("cache_hit_ratio")
            cells = {
                "run": doc.get("label", ""),
                "level": x_label(lv),
                "ok": str(s["completed"]),
                "err": str(s["failed"]),
                "req/s": f"{s['request_throughput']:.1f}",
                "out tok/s": f"{s['output_throughput']:,.0f}",
                "TTFT p50": _ms(s["ttft_ms"], "p50"),
                "TTFT p99": _ms(s["ttft_ms"], "p99"),
                "TPOT p50": _ms(s["tpot_ms"], "p50"),
                "TPOT p99": _ms(s["tpot_ms"], "p99"),
                "ITL p50": _ms(s["itl_ms"], "p50"),
                "ITL p99": _ms(s["itl_ms"], "p99"),
                "E2E p50": _ms(s["e2e_ms"], "p50"),
                "E2E p99": _ms(s["e2e_ms"], "p99"),
                "cache hit": "-" if hit is None else f"{100 * hit:.0f}%",
                "lag p99": _ms(s.get("schedule_lag_ms"), "p99"),
                "goodput/s": "-"
                if not s.get("goodput")
                else f"{s['goodput']['request_throughput']:.1f}",
                "good tok/s": "-"
                if not s.get("goodput") or "output_throughput" not in s["goodput"]
                else f"{s['goodput']['output_throughput']:,.0f}",
                "srv µs/tok": "-"
                if not s.get("server_cpu") or s["server_cpu"]["us_per_output_token"] is None
                else f"{s['server_cpu']['us_per_output_token']:.1f}",
            }
            out.append([cells[c] for c in cols])
    return out


def notes(lv: dict[str, Any]) -> list[str]:
    """What the table has no room for: how well an open loop kept to its
    schedule, and each --mix class's latencies."""
    s = lv["summary"]
    out = []
    lag = s.get("schedule_lag_ms")
    if lag:
        out.append(
            f"{x_label(lv)}: sent {lag['p50']:.2f} ms (p50), {lag['p99']:.2f} ms (p99), "
            f"{lag['max']:.2f} ms (max) after the schedule"
        )
    images = s.get("images")
    if images:
        out.append(
            f"{x_label(lv)}: {images['sent']} images sent ({images['bytes'] / 1e6:,.1f} MB of PNG), "
            f"{images['reused']} of them reused from the pool"
        )
    for name, c in (s.get("classes") or {}).items():
        good = c.get("goodput")
        out.append(
            f"{x_label(lv)} · {name}: {c['completed']} ok, TTFT p50 {_ms(c['ttft_ms'], 'p50')} "
            f"p99 {_ms(c['ttft_ms'], 'p99')}, ITL p50 {_ms(c['itl_ms'], 'p50')} "
            f"p99 {_ms(c['itl_ms'], 'p99')} ms"
            + (f", goodput {good['requests']}/{c['requests']}" if good else "")
        )
    return out


def print_table(console: Console, docs: list[dict[str, Any]]) -> None:
    """The summary table; latencies in ms. Errors by kind under it."""
    cols = columns(docs)
    if len(docs) == 1:
        cols.remove("run")
    doc = docs[0]
    cfg = doc["config"]
    title = f"rotor bench · {cfg['endpoint']} · {cfg['model']} · {cfg['url']}"
    if len(docs) > 1:
        title = "rotor bench · " + " vs ".join(d.get("label", "?") for d in docs)
    table = Table(title=title, caption="latencies in ms", header_style="bold")
    for c in cols:
        table.add_column(c, justify="left" if c in ("run", "level") else "right")
    for r in rows(docs, cols):
        table.add_row(*r)
    console.print(table)
    for d in docs:
        for lv in d["levels"]:
            for line in notes(lv):
                console.print(line, highlight=False)
            if lv["summary"]["errors"]:
                kinds = ", ".join(f"{k}: {n}" for k, n in lv["summary"]["errors"].items())
                first = next(r["error"] for r in lv["requests"] if r["error"])
                console.print(
                    f"[red]errors at {x_label(lv)}[/red] {kinds} — first: {first['message'][:200]}"
                )
