"""report.html: one self-contained page (inline CSS and SVG, nothing fetched)
for one run or several side by side (--compare)."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from rotor.bench.results import x_label, x_value
from rotor.bench.svg import Series, color, histogram, line_chart
from rotor.bench.table import columns, rows

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1500px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12.5px}td,th{padding:3px 8px;border-bottom:1px solid #eee;
text-align:right}td:first-child,th:first-child,td:nth-child(2){text-align:left}
.grid{stroke:#e4e4e4}.plots{display:flex;flex-wrap:wrap;gap:10px}
svg.plot{background:#fafafa;border:1px solid #e6e6e6;border-radius:4px}
svg .t{font-size:13px;font-weight:600;text-anchor:middle}svg .ax{font-size:11px;text-anchor:middle;fill:#555}
svg .xt{font-size:10.5px;text-anchor:middle;fill:#444}svg .yt{font-size:10.5px;text-anchor:end;fill:#444}
svg .lg{font-size:10.5px;fill:#333}.meta{color:#555;font-size:12.5px}code{font-size:12px}
"""
METRICS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E latency"))
PCTS = (("p50", "solid"), ("p90", "dash"), ("p99", "dot"))


def _categories(docs: list[dict[str, Any]]) -> list[tuple[float, str]]:
    seen: dict[float, str] = {}
    for d in docs:
        for lv in d["levels"]:
            seen.setdefault(x_value(lv), x_label(lv))
    return sorted(seen.items(), key=lambda kv: (math.isinf(kv[0]), kv[0]))


def _x_title(docs: list[dict[str, Any]]) -> str:
    modes = {lv["mode"] for d in docs for lv in d["levels"]}
    if modes == {"closed"}:
        return "concurrency"
    if modes == {"trace"}:
        return "trace speedup"
    return "request rate (req/s)" if modes == {"open"} else "level"


def _by_x(doc: dict[str, Any]) -> dict[float, dict[str, Any]]:
    return {x_value(lv): lv for lv in doc["levels"]}


def latency_plots(docs: list[dict[str, Any]]) -> list[str]:
    cats = _categories(docs)
    names = [c for _, c in cats]
    out = []
    for key, name in METRICS:
        series = []
        for i, d in enumerate(docs):
            levels = _by_x(d)
            for j, (pct, dash) in enumerate(PCTS):
                vals = []
                for x, _ in cats:
                    s = levels.get(x, {}).get("summary", {}).get(key)
                    vals.append(s[pct] if s else None)
                label = pct if len(docs) == 1 else f"{d['label']} {pct}"
                col = color(j) if len(docs) == 1 else color(i)
                series.append(Series(label, vals, col, "solid" if len(docs) == 1 else dash))
        out.append(line_chart(f"{name} percentiles", names, series, _x_title(docs), "ms"))
    return out


def throughput_plots(docs: list[dict[str, Any]]) -> list[str]:
    cats = _categories(docs)
    names = [c for _, c in cats]

    def values(d: dict[str, Any], get: Any) -> list[float | None]:
        levels = _by_x(d)
        return [get(levels[x]["summary"]) if x in levels else None for x, _ in cats]

    tok = [
        Series(d["label"], values(d, lambda s: s["output_throughput"]), color(i))
        for i, d in enumerate(docs)
    ]
    req = []
    for i, d in enumerate(docs):
        name = "" if len(docs) == 1 else f"{d['label']} "
        done = values(d, lambda s: s["request_throughput"])
        req.append(Series(f"{name}completed", done, color(i)))
        if d["config"].get("slo"):
            good = values(d, lambda s: s["goodput"]["request_throughput"] if s["goodput"] else None)
            req.append(Series(f"{name}goodput", good, color(i), "dash"))
    x = _x_title(docs)
    return [
        line_chart("Output tokens/s", names, tok, x, "tokens/s"),
        line_chart("Requests/s", names, req, x, "requests/s"),
    ]


def _samples(level: dict[str, Any], key: str) -> list[float]:
    reqs = [r for r in level["requests"] if not r["error"]]
    if key == "itl":
        return [1e3 * g for r in reqs for g in r["itl_s"]]
    return [1e3 * r["ttft_s"] for r in reqs if r["ttft_s"] is not None]


def distribution_plots(docs: list[dict[str, Any]]) -> list[str]:
    out = []
    if len(docs) == 1:
        levels = docs[0]["levels"]
        for key, name in (("ttft", "TTFT"), ("itl", "Inter-token latency")):
            series = [
                Series(x_label(lv), _samples(lv, key), color(i)) for i, lv in enumerate(levels)
            ]
            out.append(histogram(f"{name} distribution", series, f"{name} (ms)"))
        return out
    for x, label in _categories(docs):
        for key, name in (("ttft", "TTFT"), ("itl", "ITL")):
            series = []
            for i, d in enumerate(docs):
                lv = _by_x(d).get(x)
                if lv is not None:
                    series.append(Series(d["label"], _samples(lv, key), color(i)))
            out.append(histogram(f"{name} at {label}", series, f"{name} (ms)"))
    return out


def _table(docs: list[dict[str, Any]]) -> str:
    cols = columns(docs)
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows(docs, cols)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _work(c: dict[str, Any]) -> str:
    """What the requests were, in words."""
    w = c["workload"]
    if w["dataset"]:
        return f"dataset {w['dataset']}"
    if c["mode"] == "trace":
        return "the trace's requests"
    out = f"{w['output_len']}±{w['output_len_std']:g} tokens out"
    if w.get("mix"):
        classes = (
            f"{m['name']} {m['min_tokens']}–{m['max_tokens']} ({m['share']:.0%})" for m in w["mix"]
        )
        return f"mix {', '.join(classes)} tokens in, {out}"
    prefix = w["shared_prefix"]
    return (
        f"{w['input_len']}±{w['input_len_std']:g} words in, {out}"
        + (f", shared prefix {prefix[0]}×{prefix[1]}" if prefix else "")
        + (f", {w['turns']} turns" if w["turns"] > 1 else "")
    )


def _meta(d: dict[str, Any]) -> str:
    c = d["config"]
    levels = ", ".join(map(str, c["levels"]))
    load = {
        "closed": f"closed loop, concurrency {levels}",
        "trace": f"trace {c.get('trace')} ({c.get('trace_format')}), speedup {levels}",
    }.get(c["mode"], f"open loop, {levels} req/s, burstiness {c['burstiness']}")
    work = _work(c)
    tools = f", {c['tools']} tools" if c["tools"] else ""
    eos = "ignore_eos" if c["ignore_eos"] else "no ignore_eos"
    return (
        f"<p class=meta><b>{escape(d['label'])}</b>: {escape(c['endpoint'])} · "
        f"<code>{escape(c['model'])}</code> at <code>{escape(c['url'])}</code> · {escape(load)} · "
        f"{escape(work + tools)} · {eos} · seed {c['seed']} · {escape(d['created'])}</p>"
    )


def render(docs: list[dict[str, Any]]) -> str:
    """The whole page. `docs` are results.json documents, each with a label."""
    title = "rotor bench: " + " vs ".join(d["label"] for d in docs)
    sections = [
        ("Summary (latencies in ms)", _table(docs)),
        ("Latency", "".join(latency_plots(docs))),
        ("Throughput", "".join(throughput_plots(docs))),
        ("Distributions", "".join(distribution_plots(docs))),
    ]
    body = "".join(
        f"<h2>{escape(h)}</h2>" + (f'<div class="plots">{b}</div>' if "<svg" in b else b)
        for h, b in sections
    )
    meta = "".join(_meta(d) for d in docs)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{escape(title)}</h1>{meta}{body}</body></html>"
    )
