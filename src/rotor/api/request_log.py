"""The request log's writer (`--request-log FILE.jsonl[.gz]`): one JSON line per
finished generating request, written by a thread of its own.

Why a thread: the event loop only puts a record on a bounded queue, once per
request, and never waits; the writer encodes it (api/request_record.py: the
percentiles, the KV block hashes, the JSON), writes it and flushes — at most
`flush_s` after it was written, so a tailing reader sees it soon, and under
load many lines per write.

Why it never fails a request: a file that cannot be opened or written (a
directory, a read-only place, a full disk) costs records, never requests.
The first failure is one warning; the records lost are counted
(`rotor_request_log_dropped_total`, as are records the writer fell behind on,
queue full); every `retry_s` the writer tries the file again, and says so
when it can write again.

Rotation: before a line would take the file past `max_bytes` (the lines'
own size: a `.gz` file is smaller on disk), FILE becomes FILE.1, FILE.1
FILE.2, … up to `backups` old files, and a new FILE starts. A `.gz` file is
closed whole (a complete gzip file) before it moves.
"""

from __future__ import annotations

import enum
import errno
import gzip
import io
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final, Protocol

from prometheus_client.core import CounterMetricFamily

log = logging.getLogger("rotor.request_log")

BACKUPS = 3  # old files kept: FILE.1 … FILE.3
QUEUE_SIZE = 65536  # records waiting for the writer; past it, records are dropped
FLUSH_S = 0.5  # a written line reaches the file within this
RETRY_S = 5.0  # after a failure, the file is tried again this often


class Entry(Protocol):
    """What the log writes: something that becomes one JSON line."""

    def encode(self) -> bytes: ...


class _Stop(enum.Enum):
    STOP = enum.auto()


_STOP: Final = _Stop.STOP  # what close() queues: the writer ends
# what the writer reads: a record, a sync's event, or the stop
_Item = Entry | threading.Event | _Stop


class RequestLog:
    """One writer of one file. `start()` it in the process that serves (a
    thread does not survive a fork); `submit` from the event loop."""

    def __init__(
        self,
        path: str,
        max_bytes: int,
        hashes: bool = False,
        backups: int = BACKUPS,
        queue_size: int = QUEUE_SIZE,
        flush_s: float = FLUSH_S,
        retry_s: float = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.hashes = hashes  # records carry the prompt's KV block hashes
        self.backups = backups
        self.flush_s = flush_s
        self.retry_s = retry_s
        self._clock = clock
        self._gz = path.endswith(".gz")
        self._queue: queue.Queue[_Item] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        self._closed = False
        # dropped on the loop (queue full) and on the writer's thread: one writer each
        self._dropped_full = 0
        self._dropped_write = 0
        self._warned_full = False
        # the writer thread's own
        self._file: gzip.GzipFile | io.FileIO | None = None
        self._size = 0  # bytes of lines in the current file, the batch's included
        self._pending: list[bytes] = []  # lines not written yet: the next write
        self._flushed_at = 0.0
        self._broken_until: float | None = None  # failed: not tried again before this
        self.written = 0  # lines written to a file

    @property
    def dropped(self) -> int:
        """Records that never reached the file."""
        return self._dropped_full + self._dropped_write

    def start(self) -> None:
        """The writer thread; the file is opened at once, so a bad path is said at startup."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rotor-request-log", daemon=True)
            self._thread.start()

    def submit(self, entry: Entry) -> None:
        """Queue one record; never blocks (a full queue drops it, counted)."""
        if self._closed:
            return
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self._dropped_full += 1
            if not self._warned_full:
                self._warned_full = True
                log.warning(
                    "request log %s: the writer fell behind; dropping records "
                    "(rotor_request_log_dropped_total)",
                    self.path,
                )

    def sync(self, timeout: float = 10.0) -> bool:
        """Wait until every record submitted so far is written and flushed
        (or dropped); False when `timeout` passed first."""
        if self._thread is None or not self._thread.is_alive():
            return False
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, close the file (a `.gz` one whole), stop the thread."""
        self._closed = True
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            log.warning("request log %s: could not stop its writer in time", self.path)
            return
        thread.join(timeout)

    def collector(self) -> _DroppedCollector:
        """`rotor_request_log_dropped_total`, for the app's registry."""
        return _DroppedCollector(self)

    # -- the writer's thread ------------------------------------------------------------

    def _run(self) -> None:
        self._reopen()
        while True:
            timeout = None
            if self._pending:
                timeout = max(0.0, self._flushed_at + self.flush_s - self._clock())
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                self._flush()
                continue
            if item is _STOP:
                self._flush()
                self._close_file()
                return
            if isinstance(item, threading.Event):
                self._flush()
                item.set()
                continue
            try:
                self._add(item)
                if self._pending and self._clock() - self._flushed_at >= self.flush_s:
                    self._flush()
            except Exception:  # a bug here must not stop the writer: what it held is lost
                log.exception("request log %s: the writer failed", self.path)
                self._dropped_write += 1 + len(self._pending)
                self._pending = []

    def _add(self, entry: Entry) -> None:
        """One record into the batch of the current file (rotated first when it would be full)."""
        try:
            line = entry.encode() + b"\n"
        except Exception:  # a bug in a record must not stop the writer
            log.exception("request log %s: a record could not be encoded", self.path)
            self._dropped_write += 1
            return
        if self._file is None and not self._reopen():
            self._dropped_write += 1
            return
        if self._size and self._size + len(line) > self.max_bytes:
            self._flush()
            if self._file is None:  # the flush failed: counted, tried again later
                self._dropped_write += 1
                return
            try:
                self._rotate()
            except OSError as e:
                self._fail(e, lost=1)
                return
        self._pending.append(line)
        self._size += len(line)

    def _flush(self) -> None:
        """The batch to the file in one write, whole lines only, so a reader
        of a log being written sees no line cut in two."""
        batch, self._pending = self._pending, []
        self._flushed_at = self._clock()
        if not batch or self._file is None:
            return
        try:
            _write_all(self._file, b"".join(batch))
            self._file.flush()
        except OSError as e:
            self._fail(e, lost=len(batch))
            return
        self.written += len(batch)

    def _open(self) -> None:
        path = self.path
        size = os.path.getsize(path) if os.path.isfile(path) else 0
        # unbuffered: a batch is one write; gzip buffers its own, flushed whole
        self._file = gzip.open(path, "ab") if self._gz else open(path, "ab", buffering=0)  # noqa: SIM115
        self._size = size
        self._flushed_at = self._clock()

    def _reopen(self) -> bool:
        """The file open again, unless it failed less than `retry_s` ago."""
        if self._broken_until is not None and self._clock() < self._broken_until:
            return False
        try:
            self._open()
        except OSError as e:
            self._fail(e, lost=0)
            return False
        if self._broken_until is not None:
            self._broken_until = None
            log.warning("request log %s: writing again", self.path)
        return True

    def _rotate(self) -> None:
        """FILE → FILE.1 → … → FILE.<backups>, and a new FILE."""
        f, self._file = self._file, None
        assert f is not None
        f.close()  # a .gz file gets its trailer: whole before it moves
        path = self.path
        if not os.path.exists(path):  # moved away meanwhile (by hand, by logrotate)
            pass
        elif self.backups < 1:
            os.remove(path)
        else:
            for k in range(self.backups - 1, 0, -1):
                if os.path.exists(f"{path}.{k}"):
                    os.replace(f"{path}.{k}", f"{path}.{k + 1}")
            os.replace(path, f"{path}.1")
        self._open()

    def _fail(self, error: OSError, lost: int) -> None:
        """Count what is lost, drop the file, try again later; say it once."""
        self._dropped_write += lost + len(self._pending)
        self._pending = []
        self._close_file()
        first = self._broken_until is None
        self._broken_until = self._clock() + self.retry_s
        if first:
            log.warning(
                "request log %s: %s; dropping records (rotor_request_log_dropped_total), "
                "trying again every %gs",
                self.path,
                error.strerror or error,
                self.retry_s,
            )

    def _close_file(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError:
                pass  # a full disk: what it held is counted lost already


def _write_all(f: gzip.GzipFile | io.FileIO, data: bytes) -> None:
    """All of `data` (an unbuffered file may take part of it per write)."""
    view = memoryview(data)
    while view:
        n = f.write(view)
        if not n:
            raise OSError(errno.ENOSPC, "the file took nothing")
        view = view[n:]


class _DroppedCollector:
    """The records a request log lost, read at scrape time."""

    def __init__(self, request_log: RequestLog) -> None:
        self._log = request_log

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "rotor_request_log_dropped",
            "Request-log records not written: the file could not be written, or the "
            "writer fell behind",
            value=self._log.dropped,
        )


def process_path(path: str, index: int) -> str:
    """HTTP process `index`'s own file of `--request-log FILE` (`--http-workers`):
    `requests.jsonl.gz` → `requests-1.jsonl.gz`, so no process writes another's."""
    head, name = os.path.split(path)
    for suffix in (".jsonl.gz", ".jsonl", ".json.gz", ".json", ".gz"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return os.path.join(head, f"{name[: -len(suffix)]}-{index}{suffix}")
    return os.path.join(head, f"{name}-{index}")
