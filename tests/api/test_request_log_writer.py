"""The request log's writer (api/request_log.py): lines reach the file from a
thread of its own; the file is rotated by size, keeping three old files (a
`.gz` one closed whole first); a file that cannot be written costs records,
counted and said once, never the caller — and is tried again every
`retry_s` (an injected clock); a writer that falls behind drops, never blocks."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from rotor.api.request_log import RequestLog, process_path

from support.clock import FakeClock


class Line:
    """An entry of `size` bytes with its newline."""

    def __init__(self, n: int, size: int = 20) -> None:
        head = orjson.dumps({"n": n, "pad": ""})
        self.data = orjson.dumps({"n": n, "pad": "x" * (size - 1 - len(head))})
        assert len(self.data) + 1 == size

    def encode(self) -> bytes:
        return self.data


class Broken:
    def encode(self) -> bytes:
        raise RuntimeError("a bug in a record")


@pytest.fixture
def logs() -> Iterator[list[RequestLog]]:
    """Every writer a test made, closed at its end."""
    made: list[RequestLog] = []
    yield made
    for w in made:
        w.close()


def started(made: list[RequestLog], path: Path, **kw: object) -> RequestLog:
    w = RequestLog(str(path), **{"max_bytes": 10**6, **kw})  # type: ignore[arg-type]
    w.start()
    made.append(w)
    return w


def numbers(data: bytes) -> list[int]:
    return [orjson.loads(line)["n"] for line in data.splitlines()]


def test_lines_reach_the_file(tmp_path: Path, logs: list[RequestLog]) -> None:
    path = tmp_path / "requests.jsonl"
    w = started(logs, path)
    for n in range(3):
        w.submit(Line(n))
    assert w.sync()
    assert numbers(path.read_bytes()) == [0, 1, 2]
    assert w.dropped == 0 and w.written == 3


def test_appends_to_a_file_that_is_there(tmp_path: Path, logs: list[RequestLog]) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(Line(7).encode() + b"\n")
    w = started(logs, path)
    w.submit(Line(8))
    assert w.sync()
    assert numbers(path.read_bytes()) == [7, 8]


def test_rotation_keeps_three_old_files(tmp_path: Path, logs: list[RequestLog]) -> None:
    """Lines of 40 bytes, 100 at most: two lines a file; the oldest two go."""
    path = tmp_path / "requests.jsonl"
    w = started(logs, path, max_bytes=100)
    for n in range(1, 11):
        w.submit(Line(n, size=40))
    assert w.sync()
    files = {p.name: numbers(p.read_bytes()) for p in tmp_path.iterdir()}
    assert files == {
        "requests.jsonl": [9, 10],
        "requests.jsonl.1": [7, 8],
        "requests.jsonl.2": [5, 6],
        "requests.jsonl.3": [3, 4],
    }
    assert all(p.stat().st_size <= 100 for p in tmp_path.iterdir())
    assert w.dropped == 0


def test_a_line_over_the_size_has_a_file_to_itself(tmp_path: Path, logs: list[RequestLog]) -> None:
    path = tmp_path / "requests.jsonl"
    w = started(logs, path, max_bytes=30)
    for n in range(3):
        w.submit(Line(n, size=50))
    assert w.sync()
    assert numbers(path.read_bytes()) == [2]
    assert numbers((tmp_path / "requests.jsonl.1").read_bytes()) == [1]


def test_gzip_files_are_whole_once_rotated_or_closed(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl.gz"
    w = RequestLog(str(path), max_bytes=100)
    w.start()
    for n in range(1, 6):
        w.submit(Line(n, size=40))
    w.close()  # the writer drains its queue first
    assert numbers(gzip.decompress((tmp_path / "requests.jsonl.gz.2").read_bytes())) == [1, 2]
    assert numbers(gzip.decompress((tmp_path / "requests.jsonl.gz.1").read_bytes())) == [3, 4]
    assert numbers(gzip.decompress(path.read_bytes())) == [5]
    w.submit(Line(6))  # after close: dropped quietly, nothing raised
    assert numbers(gzip.decompress(path.read_bytes())) == [5]


def test_an_unwritable_file_costs_records_said_once_then_recovers(
    tmp_path: Path, logs: list[RequestLog], caplog: pytest.LogCaptureFixture
) -> None:
    """A directory where the file should be: every record is dropped and
    counted, one warning; once it can be written and `retry_s` has passed,
    lines go to the file again."""
    path = tmp_path / "requests.jsonl"
    path.mkdir()
    clock = FakeClock(1000.0)
    caplog.set_level(logging.WARNING, "rotor.request_log")
    w = started(logs, path, retry_s=5.0, clock=clock)
    for n in range(3):
        w.submit(Line(n))
    assert w.sync()
    assert w.dropped == 3 and w.written == 0
    warnings = [r.getMessage() for r in caplog.records if r.name == "rotor.request_log"]
    assert len(warnings) == 1 and "dropping records" in warnings[0], warnings
    assert str(path) in warnings[0]
    path.rmdir()
    clock.now += 4.9  # not yet tried again
    w.submit(Line(3))
    assert w.sync()
    assert w.dropped == 4 and not path.exists()
    clock.now += 0.2
    w.submit(Line(4))
    assert w.sync()
    assert numbers(path.read_bytes()) == [4] and w.dropped == 4
    assert any("writing again" in r.getMessage() for r in caplog.records)


def test_a_full_queue_drops_and_never_blocks(tmp_path: Path, logs: list[RequestLog]) -> None:
    path = tmp_path / "requests.jsonl"
    w = RequestLog(str(path), max_bytes=10**6, queue_size=2)
    logs.append(w)
    for n in range(5):  # no writer yet: the queue fills
        w.submit(Line(n))
    assert w.dropped == 3
    w.start()
    assert w.sync()
    assert numbers(path.read_bytes()) == [0, 1]


def test_a_record_that_cannot_be_encoded_costs_itself(
    tmp_path: Path, logs: list[RequestLog]
) -> None:
    path = tmp_path / "requests.jsonl"
    w = started(logs, path)
    w.submit(Broken())
    w.submit(Line(1))
    assert w.sync()
    assert numbers(path.read_bytes()) == [1] and w.dropped == 1


def test_the_dropped_metric(tmp_path: Path) -> None:
    w = RequestLog(str(tmp_path / "r.jsonl"), max_bytes=10**6, queue_size=1)
    w.submit(Line(0))
    w.submit(Line(1))
    registry = CollectorRegistry()
    registry.register(w.collector())
    assert b"rotor_request_log_dropped_total 1.0" in generate_latest(registry)


@pytest.mark.parametrize(
    ("path", "index", "want"),
    [
        ("requests.jsonl", 0, "requests-0.jsonl"),
        ("/var/log/rotor/requests.jsonl.gz", 3, "/var/log/rotor/requests-3.jsonl.gz"),
        ("logs/r.json", 1, "logs/r-1.json"),
        ("r.gz", 2, "r-2.gz"),
        ("requests", 1, "requests-1"),
        (".jsonl", 1, ".jsonl-1"),
    ],
)
def test_each_http_process_has_a_file_of_its_own(path: str, index: int, want: str) -> None:
    assert process_path(path, index) == want
