"""`rotor run in=batch:FILE`: one chat request per JSONL line, answers to a JSONL file.

A line is `{"text": "..."}` (other chat fields may sit beside it) or a full chat
request body. Each input line gets exactly one output line, in input order:
the answer, or `{"index": i, "error": ...}` when the line cannot run. Requests
run concurrently, a bounded number at a time; a window of finished-or-running
requests keeps both memory and write order in check.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from rotor.frontend import ModelNotFound
from rotor.inputs.interrupt import EXIT_INTERRUPTED, Interrupted, until_interrupted
from rotor.inputs.session import Answer, System, stream_chat
from rotor.pipeline.errors import RequestError, describe_validation
from rotor.pipeline.events import ResponseFailed
from rotor.protocol.openai import ChatCompletionRequest

CONCURRENCY = 16
WINDOW = 4 * CONCURRENCY  # requests started ahead of the oldest unwritten one
EXIT_UNREADABLE = 2


class LineError(ValueError):
    """A line that is not a request; its message goes to the output line."""


def output_path(path: str, output: str | None) -> Path:
    """`--output`, else `x.jsonl` → `x.out.jsonl`, anything else → `NAME.out.jsonl`."""
    if output:
        return Path(output)
    if path.endswith(".jsonl"):
        return Path(path[: -len(".jsonl")] + ".out.jsonl")
    return Path(path + ".out.jsonl")


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL file: split at "\\n" only (a "\\r" before it goes
    too). str.splitlines would also split at U+2028, U+2029, U+0085, ...,
    which JSON allows unescaped inside strings."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def build_request(line: str, max_tokens: int | None) -> ChatCompletionRequest:
    """One input line → a validated chat request (stream forced off).

    `max_tokens` (--max-tokens) applies only when the line sets no limit itself."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise LineError(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise LineError(f"a line must be a JSON object, got {type(obj).__name__}")
    body = dict(obj)
    if "messages" not in body:
        if "text" not in body:
            raise LineError('a line needs "text" or "messages"')
        text = body.pop("text")
        if not isinstance(text, str):
            raise LineError('"text" must be a string')
        body["messages"] = [{"role": "user", "content": text}]
    elif "text" in body:
        raise LineError('a line has "text" or "messages", not both')
    body["stream"] = False
    body.pop("stream_options", None)
    if (
        max_tokens is not None
        and body.get("max_tokens") is None
        and body.get("max_completion_tokens") is None
    ):
        body["max_tokens"] = max_tokens
    try:
        request = ChatCompletionRequest.model_validate(body)
    except ValidationError as e:
        raise LineError(describe_validation(e)[0]) from None
    if request.n != 1:
        raise LineError("batch mode answers one choice per line: n must be 1")
    return request


def answer_record(index: int, answer: Answer) -> dict[str, Any]:
    record: dict[str, Any] = {
        "index": index,
        "text": answer.text,
        "finish_reason": answer.finish_reason,
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "latency_s": round(answer.latency_s, 6),
    }
    if answer.reasoning:
        record["reasoning"] = answer.reasoning
    if answer.tool_calls:
        record["tool_calls"] = [
            {"name": c.name, "arguments": c.arguments} for c in answer.tool_calls
        ]
    return record


@dataclass
class Stats:
    """What the summary reports."""

    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttfts: list[float] = field(default_factory=list)

    def add(self, record: dict[str, Any], ttft: float | None) -> None:
        self.requests += 1
        if "error" in record:
            self.errors += 1
            return
        self.prompt_tokens += record["prompt_tokens"]
        self.completion_tokens += record["completion_tokens"]
        if ttft is not None:
            self.ttfts.append(ttft)

    def summary(self, elapsed: float, out: Path, interrupted: bool = False) -> str:
        total = self.prompt_tokens + self.completion_tokens
        rate = self.completion_tokens / elapsed if elapsed > 0 else 0.0
        head = f"rotor batch: {self.requests} requests, {self.errors} errors in {elapsed:.2f} s"
        if interrupted:
            head += " (interrupted: later lines were not run)"
        lines = [
            head,
            f"  tokens: {self.prompt_tokens} prompt + {self.completion_tokens} completion = {total} total,"
            f" {rate:.1f} completion tokens/s",
        ]
        if self.ttfts:
            p50, p90, p99 = (percentile(self.ttfts, p) * 1000 for p in (50, 90, 99))
            lines.append(f"  TTFT: p50 {p50:.1f} ms, p90 {p90:.1f} ms, p99 {p99:.1f} ms")
        if self.errors:
            lines.append(f'  {self.errors} lines failed: see their "error" in {out}')
        lines.append(f"  answers: {out}")
        return "\n".join(lines)


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile: always one of the measured values."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


class Progress:
    """A rich progress bar on stderr when it is a terminal; nothing otherwise."""

    def __init__(self, total: int) -> None:
        self._bar: Any = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import MofNCompleteColumn
            from rich.progress import Progress as Bar

            columns = (*Bar.get_default_columns(), MofNCompleteColumn())
            self._bar = Bar(*columns, console=Console(stderr=True))
            self._task = self._bar.add_task("requests", total=total)
            self._bar.start()

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


async def run_batch(
    system: System, path: str, output: str | None, max_tokens: int | None = None
) -> int:
    """0 when every line has its output line (errors included), 2 when FILE or
    the output cannot be opened, 130 on Ctrl-C (lines so far are written)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        print(f"rotor: cannot read {path}: {reason}", file=sys.stderr)
        return EXIT_UNREADABLE
    out_path = output_path(path, output)
    try:
        out = out_path.open("wb")
    except OSError as e:
        print(f"rotor: cannot write {out_path}: {e.strerror}", file=sys.stderr)
        return EXIT_UNREADABLE
    # Blank lines are not requests; `index` is the line's 0-based number in FILE.
    work = [(i, line) for i, line in enumerate(jsonl_lines(text)) if line.strip()]
    stats = Stats()
    progress = Progress(len(work))
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int, line: str) -> tuple[dict[str, Any], float | None]:
        try:
            request = build_request(line, max_tokens)
            async with limit:
                answer = await stream_chat(system.frontend, request)
        except (LineError, RequestError, ResponseFailed, ModelNotFound) as e:
            return {"index": index, "error": str(e)}, None
        except Exception as e:  # an engine bug must not stop the other lines
            return {"index": index, "error": f"internal error: {type(e).__name__}: {e}"}, None
        return answer_record(index, answer), answer.ttft_s

    def write(record: dict[str, Any], ttft: float | None) -> None:
        out.write(orjson.dumps(record) + b"\n")
        out.flush()  # finished lines are on disk as they come (tail -f, Ctrl-C)
        stats.add(record, ttft)
        progress.advance()

    async def drive() -> None:
        pending: deque[asyncio.Task[tuple[dict[str, Any], float | None]]] = deque()
        try:
            for index, line in work:
                pending.append(asyncio.ensure_future(one(index, line)))
                if len(pending) >= WINDOW:
                    write(*await pending.popleft())
            while pending:
                write(*await pending.popleft())
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    await system.start()
    start = time.perf_counter()
    interrupted = False
    try:
        await until_interrupted(drive())
    except Interrupted:
        interrupted = True
    finally:
        elapsed = time.perf_counter() - start
        progress.close()
        out.close()
        await system.stop()
    print(stats.summary(elapsed, out_path, interrupted), file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else 0
