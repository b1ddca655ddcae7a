"""One worker's measured performance: how long a prompt takes to prefill, and
how fast streams decode together, on one model, engine and machine.

Throughput mode (throughput.py) sizes pools from it, so it answers between
and beyond the measured points:

- `ttft(isl)`: linear between the measured prompt lengths. Beyond the
  longest, the line through the last two points, never falling (a longer
  prompt never prefills faster); below the shortest, the line through the
  first two, never below the smallest measured TTFT (fixed per-request
  costs dominate short prompts). One point alone is read as a line through
  the origin (prefill time proportional to the prompt), so a profile of one
  length still gives a finite prefill throughput at any length.
- `itl(concurrency, context)`: each measured context is a row over
  concurrency, interpolated by the same rule (beyond the largest measured
  concurrency linearly, never falling; a row of one point is flat); the rows
  bracketing the asked context are then blended linearly, and beyond the
  outer rows extrapolated by the same rule. On a full grid that is exactly
  bilinear interpolation; on a ragged one (rows measured at different
  concurrencies) every row still answers for itself.

The file is JSON, `{"version": 1, ...}`, written by `rotor planner profile`.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

VERSION = 1


@dataclass(frozen=True)
class PrefillPoint:
    isl: int  # prompt tokens
    ttft_s: float  # p50 time to first token of a lone request with this prompt length


@dataclass(frozen=True)
class DecodePoint:
    concurrency: int  # streams decoding together on the worker
    context: int  # tokens each holds (prompt + half the answer)
    itl_s: float  # p50 inter-token latency


@dataclass
class Profile:
    model: str
    prefill: list[PrefillPoint]
    decode: list[DecodePoint]
    meta: dict[str, Any] = field(default_factory=dict)  # how it was measured

    # -- the file -----------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "model": self.model,
            "meta": self.meta,
            "prefill": [{"isl": p.isl, "ttft_s": p.ttft_s} for p in self.prefill],
            "decode": [
                {"concurrency": d.concurrency, "context": d.context, "itl_s": d.itl_s}
                for d in self.decode
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> Profile:
        """The profile in `data` (parsed JSON); ValueError saying what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        if "version" not in data:
            raise ValueError("missing field 'version'")
        if isinstance(data["version"], bool) or data["version"] != VERSION:
            raise ValueError(f"unknown version {data['version']!r} (this rotor reads {VERSION})")
        model = _field(data, "model", "")
        if not isinstance(model, str) or not model:
            raise ValueError("'model' must be a non-empty string")
        meta = data.get("meta", {})
        if not isinstance(meta, dict):
            raise ValueError("'meta' must be an object")
        prefill = [
            PrefillPoint(_count(row, "isl", where), _seconds(row, "ttft_s", where))
            for row, where in _rows(data, "prefill")
        ]
        decode = [
            DecodePoint(
                _count(row, "concurrency", where),
                _count(row, "context", where),
                _seconds(row, "itl_s", where),
            )
            for row, where in _rows(data, "decode")
        ]
        return cls(model=model, prefill=prefill, decode=decode, meta=dict(meta))

    def save(self, path: str) -> None:
        """Write the file whole or not at all (a reader never sees half of it)."""
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2)
            f.write("\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> Profile:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            return cls.from_json(data)
        except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
            raise ValueError(f"profile {path}: {e}") from e

    # -- prefill ------------------------------------------------------------------

    def ttft(self, isl: float) -> float:
        """Seconds to the first token of a lone request with `isl` prompt tokens."""
        if not self.prefill:
            raise ValueError(f"profile of {self.model} has no prefill points")
        xs, ys = _merge((p.isl, p.ttft_s) for p in self.prefill)
        if len(xs) == 1:
            xs, ys = [0.0, *xs], [0.0, *ys]
            return max(_interp(xs, ys, isl), ys[1])
        return _interp(xs, ys, isl)

    def prefill_throughput(self, isl: float) -> float:
        """Prompt tokens per second one worker prefills at this prompt length."""
        return isl / self.ttft(isl) if isl > 0 else 0.0

    # -- decode -------------------------------------------------------------------

    def itl(self, concurrency: float, context: float) -> float:
        """Seconds between tokens of each of `concurrency` streams holding
        `context` tokens each."""
        return _itl(self._rows(), concurrency, context)

    def decode_capacity(self, itl_target: float, context: float) -> tuple[float, float]:
        """(c, tokens/s): the most streams of `context` tokens one worker
        decodes within `itl_target`, and their tokens/s = c / itl(c).

        c is the largest in [1, 4 × the largest measured concurrency] such
        that every concurrency up to it meets the target (on a profile whose
        ITL rises with concurrency, simply the largest that meets it; on a
        noisy one, a dip beyond a miss does not count), found by bisection.
        If even one stream misses the target: (1.0, 1 / itl(1)), and the
        caller says the SLA cannot be met by adding workers."""
        rows = self._rows()
        hi = 4.0 * max(max(cs) for cs, _ in rows.values())
        # The worst ITL over [1, c] is at c or at a measured concurrency below it.
        knots = sorted({c for cs, _ in rows.values() for c in cs if 1.0 < c < hi})

        def worst(c: float) -> float:
            return max([_itl(rows, c, context)] + [_itl(rows, k, context) for k in knots if k < c])

        one = _itl(rows, 1.0, context)
        if one > itl_target:
            return 1.0, 1.0 / one
        lo = 1.0
        if worst(hi) <= itl_target:
            lo = hi
        else:
            while hi - lo > 1e-6 * hi:
                mid = (lo + hi) / 2.0
                if worst(mid) <= itl_target:
                    lo = mid
                else:
                    hi = mid
        return lo, lo / _itl(rows, lo, context)

    def _rows(self) -> dict[int, tuple[list[float], list[float]]]:
        """context → (concurrencies, ITLs), each row sorted, duplicates averaged."""
        if not self.decode:
            raise ValueError(f"profile of {self.model} has no decode points")
        by_context: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for d in self.decode:
            by_context[d.context].append((d.concurrency, d.itl_s))
        return {ctx: _merge(points) for ctx, points in by_context.items()}


def _itl(
    rows: dict[int, tuple[list[float], list[float]]], concurrency: float, context: float
) -> float:
    contexts = sorted(rows)
    at = [_interp(*rows[ctx], concurrency) for ctx in contexts]
    return _interp([float(c) for c in contexts], at, context)


def _merge(points: Any) -> tuple[list[float], list[float]]:
    """Sorted xs and their ys, the ys of a repeated x averaged."""
    groups: dict[float, list[float]] = defaultdict(list)
    for x, y in points:
        groups[float(x)].append(float(y))
    xs = sorted(groups)
    return xs, [sum(groups[x]) / len(groups[x]) for x in xs]


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise linear through (xs, ys), xs sorted and distinct. Beyond the
    last point the last segment's line, never falling; before the first the
    first segment's line, never below the smallest y. One point: flat."""
    if len(xs) == 1:
        return ys[0]
    if x >= xs[-1]:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return ys[-1] + max(slope, 0.0) * (x - xs[-1])
    if x <= xs[0]:
        slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
        return max(ys[0] + slope * (x - xs[0]), min(ys))
    i = next(i for i in range(1, len(xs)) if x <= xs[i])
    t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + t * (ys[i] - ys[i - 1])


# -- validation -------------------------------------------------------------------


def _field(row: dict[str, Any], name: str, where: str) -> Any:
    if name not in row:
        raise ValueError(f"{where + ': ' if where else ''}missing field {name!r}")
    return row[name]


def _rows(data: dict[str, Any], name: str) -> list[tuple[dict[str, Any], str]]:
    rows = _field(data, name, "")
    if not isinstance(rows, list):
        raise ValueError(f"{name!r} must be a list")
    if not rows:
        raise ValueError(f"{name!r} is empty: a profile needs at least one {name} point")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{name}[{i}]: expected an object, got {type(row).__name__}")
    return [(row, f"{name}[{i}]") for i, row in enumerate(rows)]


def _count(row: dict[str, Any], name: str, where: str) -> int:
    v = _field(row, name, where)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where}.{name}: must be an integer, got {v!r}")
    if v <= 0:
        raise ValueError(f"{where}.{name}: must be positive, got {v}")
    return v


def _seconds(row: dict[str, Any], name: str, where: str) -> float:
    v = _field(row, name, where)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}.{name}: must be a number, got {v!r}")
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{where}.{name}: must be positive, got {v}")
    return float(v)
