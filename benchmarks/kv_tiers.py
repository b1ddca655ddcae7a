"""KV beyond the device: the same fleet with its KV tiers off and on, on a
Mooncake-format trace whose working set is ~4 x the fleet's device blocks.

  tiers off  nats-server, 4 x `rotor worker out=mocker --num-kv-blocks D`,
             `rotor frontend --router kv`
  tiers on   the same, each worker with `--host-kv-blocks H --disk-kv-blocks K`
             below its D device blocks (H + K hold the whole working set)

Both replay one trace at its timestamps with `rotor bench --trace FILE
--trace-format mooncake`, interleaved over `--repeats` rounds. The trace
(built here, in Mooncake's format) is conversations: `--sessions` of them
under a few shared system prompts, each `--turns` turns long, every turn its
conversation's last prompt and answer plus a new message (1-3 of the trace's
512-token blocks), the turns of all conversations interleaved at random at
`--rate`. So most of each prompt was computed before, but long enough ago
that other conversations have pushed it off a worker's device: the case
host and disk tiers are for. D is chosen so that the trace's distinct
blocks are `--working-set` times the fleet's device blocks. Reported per run: TTFT p50/p99, ITL p50, output
tokens per second, the prompt tokens served from cache (`cached_tokens`),
and the blocks the router credited by medium (the frontend's
`rotor_router_kv_*` counters, when it has them).

    python benchmarks/kv_tiers.py --out /tmp/kv-tiers

Writes each run's results and summary.md to --out. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import statistics
import sys
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dynamo_compare import MODEL_NAME, write_model_dir  # noqa: E402
from mooncake_trace import write  # noqa: E402
from trace_compare import Running, bench  # noqa: E402

TRACE_BLOCK = 512  # tokens per hash id of the trace (Mooncake's)


def conversations(
    sessions: int, turns: int, rate: float, systems: int, seed: int
) -> list[dict[str, Any]]:
    """The trace's rows, in time order: every turn of every conversation, the
    turns interleaved at random (each conversation's in order)."""
    rng = random.Random(seed)
    ids = itertools.count()
    heads = [[next(ids) for _ in range(2)] for _ in range(systems)]  # shared system prompts
    prompts = [list(heads[i % systems]) for i in range(sessions)]
    order = [s for s in range(sessions) for _ in range(turns)]
    rng.shuffle(order)
    rows, t = [], 0.0
    for s in order:
        prompts[s] += [next(ids) for _ in range(rng.randint(1, 3))]  # the new message
        output = rng.randint(64, 256)
        rows.append(
            {
                "timestamp": round(t * 1000),
                "input_length": len(prompts[s]) * TRACE_BLOCK - rng.randint(0, 255),
                "output_length": output,
                "hash_ids": list(prompts[s]),
            }
        )
        prompts[s].append(next(ids))  # its answer, in the next turn's prompt
        t += rng.expovariate(rate)
    return rows


def distinct_blocks(rows: list[dict[str, Any]], block_size: int) -> int:
    """The trace's working set in the mocker's blocks: every distinct hash id."""
    ids = {h for row in rows for h in row["hash_ids"]}
    return len(ids) * (TRACE_BLOCK // block_size)


def router_counters(url: str) -> dict[str, float]:
    """The frontend's `rotor_router_kv_*` counters, summed over their labels
    but the medium (whatever of them the frontend has)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("rotor_router_kv_") or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        medium = re.search(r'medium="(\w+)"', name)
        key = name.split("{")[0] + (f"[{medium.group(1)}]" if medium else "")
        out[key] = out.get(key, 0.0) + float(value)
    return out


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, default=Path("/tmp/rotor-kv-tiers"))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--speedup-ratio", type=float, default=10.0)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--sessions", type=int, default=32, help="conversations")
    p.add_argument("--turns", type=int, default=8, help="turns of each conversation")
    p.add_argument("--rate", type=float, default=4.0, help="the trace's requests/s")
    p.add_argument("--trace-speedup", type=float, default=1.0)
    p.add_argument("--tokens-per-word", type=float, default=1.0)
    p.add_argument("--working-set", type=float, default=4.0, help="x the fleet's device blocks")
    p.add_argument("--worker-args", default="", help="more flags for every worker")
    args = p.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model_dir = write_model_dir(out / MODEL_NAME, 8192, 0)
    trace = out / "trace.jsonl"
    rows = conversations(args.sessions, args.turns, args.rate, systems=3, seed=0)
    write(trace, rows)
    working = distinct_blocks(rows, args.block_size)
    device = max(1, round(working / args.working_set / args.workers))
    longest = max(r["input_length"] + r["output_length"] for r in rows)
    device = max(device, -(-longest // args.block_size) + 1)  # a request must fit
    host, disk = working // 2, working
    variants = {
        "tiers off": f"--num-kv-blocks {device}",
        "tiers on": f"--num-kv-blocks {device} --host-kv-blocks {host} --disk-kv-blocks {disk}",
    }
    print(
        f"trace: {len(rows)} requests, {working} distinct blocks; per worker {device} device "
        f"blocks ({working / (device * args.workers):.1f} x the fleet's), tiers on: {host} "
        f"host + {disk} disk",
        flush=True,
    )
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
    for r in range(args.repeats):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            args.rotor_worker_args = f"{variants[name]} {args.worker_args}"
            label = f"r{r + 1}-{name.replace(' ', '-')}"
            system = Running("rotor", args, model_dir, out / "work" / label)
            system.start()
            try:
                system.wait_ready()
                res = bench(args, system, trace, out / label)
                res["router"] = router_counters(system.url)
            finally:
                system.stop()
            runs[name].append(res)
            s = res["levels"][0]["summary"]
            print(
                f"{label}: TTFT p50 {s['ttft_ms']['p50']:.1f} p99 {s['ttft_ms']['p99']:.1f} ms, "
                f"{s['completed']}/{s['requests']} ok, cache hit {s.get('cache_hit_ratio')}",
                flush=True,
            )
    lines = [
        f"{len(rows)} requests, {working} distinct blocks of {args.block_size} tokens; "
        f"{args.workers} workers of {device} device blocks each "
        f"({working / (device * args.workers):.1f} x the fleet's); tiers on: {host} host + "
        f"{disk} disk blocks each; mockers at speedup {args.speedup_ratio:g}.",
        "",
        "| tiers | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | output tok/s | cache hit | ok | router credited |",
        "|---|---|---|---|---|---|---|---|",
    ]
    medians: dict[str, float] = {}
    for name, results in runs.items():
        for res in results:
            s = res["levels"][0]["summary"]
            credited = ", ".join(f"{k} {v:.0f}" for k, v in sorted(res["router"].items()))
            lines.append(
                f"| {name} | {s['ttft_ms']['p50']:.1f} | {s['ttft_ms']['p99']:.1f} "
                f"| {s['itl_ms']['p50']:.2f} | {s['output_throughput']:.0f} "
                f"| {s.get('cache_hit_ratio') or 0:.2f} | {s['completed']}/{s['requests']} "
                f"| {credited or '-'} |"
            )
        medians[name] = statistics.median(
            res["levels"][0]["summary"]["ttft_ms"]["p50"] for res in results
        )
    if medians.get("tiers off"):
        lines += [
            "",
            f"TTFT p50, tiers on / tiers off (medians): "
            f"{medians['tiers on'] / medians['tiers off']:.2f}",
        ]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
