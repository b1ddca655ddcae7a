"""Codec benchmark: µs per encode and decode of a typical EngineOutput (and one request).

Compares the old path (`dataclasses.asdict` + msgpack, and the old `from_dict`
rebuilding the dataclasses) with `rotor.protocol.codec`, on the same payloads:

    python benchmarks/codec_bench.py            # best of 7 runs of 20000 calls each
    python benchmarks/codec_bench.py --number 100000 --repeat 5
"""

from __future__ import annotations

import argparse
import dataclasses
import timeit
from collections.abc import Callable
from typing import Any

import msgpack

from rotor.protocol import codec
from rotor.protocol.engine import EngineOutput, EngineRequest, TokenLogprob


def old_encode(out: EngineOutput) -> bytes:
    return msgpack.packb(dataclasses.asdict(out))


def old_decode(data: bytes) -> EngineOutput:
    """What `EngineOutput.from_dict(msgpack.unpackb(data))` did."""
    d: dict[str, Any] = msgpack.unpackb(data)
    if d.get("logprobs") is not None:
        d["logprobs"] = [
            TokenLogprob(lp["token_id"], lp["logprob"], [tuple(t) for t in lp.get("top", [])])
            for lp in d["logprobs"]
        ]
    return EngineOutput(**d)


def payloads() -> dict[str, EngineOutput]:
    top = [(1000 + k, -0.5 - k) for k in range(5)]
    return {
        "1 token": EngineOutput(index=0, token_ids=[15339]),
        "8 tokens + logprobs (top 5)": EngineOutput(
            index=0,
            token_ids=list(range(15339, 15347)),
            logprobs=[TokenLogprob(15339 + i, -0.25 * i, list(top)) for i in range(8)],
        ),
        "last (finish eos)": EngineOutput(
            index=1, token_ids=[151645], finish="eos", matched=151645, cached_tokens=64
        ),
    }


def best_us(fns: dict[str, Callable[[], object]], number: int, repeat: int) -> dict[str, float]:
    """Best µs per call of each, the runs interleaved so a busy machine hurts all alike."""
    runs: dict[str, list[float]] = {key: [] for key in fns}
    for _ in range(repeat):
        for key, fn in fns.items():
            runs[key].append(timeit.timeit(fn, number=number) / number * 1e6)
    return {key: min(times) for key, times in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per run")
    parser.add_argument("--repeat", type=int, default=7, help="runs; the best is reported")
    args = parser.parse_args()
    n, r = args.number, args.repeat

    print(f"{'payload':<30}{'path':<8}{'encode µs':>11}{'decode µs':>11}{'bytes':>7}")
    for name, out in payloads().items():
        old, new = old_encode(out), codec.encode_output(out)
        assert old_decode(old) == out and codec.decode_output(new) == out
        t = best_us(
            {
                "old enc": lambda o=out: old_encode(o),
                "old dec": lambda b=old: old_decode(b),
                "new enc": lambda o=out: codec.encode_output(o),
                "new dec": lambda b=new: codec.decode_output(b),
            },
            n,
            r,
        )
        print(f"{name:<30}{'old':<8}{t['old enc']:>11.2f}{t['old dec']:>11.2f}{len(old):>7}")
        print(f"{name:<30}{'codec':<8}{t['new enc']:>11.2f}{t['new dec']:>11.2f}{len(new):>7}")

    request = EngineRequest("req-1", "model", list(range(1000)))
    data = codec.encode_request(request)
    t = best_us(
        {"enc": lambda: codec.encode_request(request), "dec": lambda: codec.decode_request(data)},
        max(1, n // 10),
        r,
    )
    print(
        f"{'request, 1000 prompt tokens':<30}{'codec':<8}{t['enc']:>11.2f}{t['dec']:>11.2f}{len(data):>7}"
    )


if __name__ == "__main__":
    main()
