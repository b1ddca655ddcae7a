"""`rotor planner --connector local`: each pool is a set of `rotor worker`
processes on this machine, started from the pool's command (`--worker-cmd`).

Every child dies with the planner, however it dies: PR_SET_PDEATHSIG sends
it SIGTERM, so it drains like any worker told to leave. A child that exits
unasked is a failure: counted, logged with its log's tail, and replaced after
an exponential backoff while the pool's target still wants it. Each child
runs in its own session (a terminal's Ctrl-C reaches the planner alone, which
then drains its workers) and writes to its own log file, never to the
planner's output.

PR_SET_PDEATHSIG fires when the thread that started the child ends: run the
connector on the planner's main event loop, not one in a passing thread. A
child that ignores SIGTERM outlives a SIGKILLed planner (an orderly `stop`
SIGKILLs it after the grace period).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rotor.lifeline import die_with_parent
from rotor.planner.connectors import ConnectorError
from rotor.planner.observation import PoolName, WorkerLoad

log = logging.getLogger("rotor.planner")

# After a child's grace period, this long more before SIGKILL: the worker's
# own drain ends at its grace; the margin covers its shutdown after that.
KILL_MARGIN_S = 5.0
TAIL_BYTES = 4096  # how much of a failed child's log is read back
TAIL_LINES = 10  # and how many of its last lines are kept


def format_command(template: str) -> list[str]:
    """`--worker-cmd`'s template as an argv (shell quoting, no shell run).
    ValueError for an empty or unparseable one."""
    try:
        argv = shlex.split(template)
    except ValueError as e:
        raise ValueError(f"worker command {template!r} does not parse: {e}") from None
    if not argv:
        raise ValueError("the worker command is empty")
    return argv


@dataclass(frozen=True)
class Backoff:
    """How long to wait before replacing a failed child: `base` × 2^(n − 1)
    after n failures in a row, at most `cap`. A child that stayed up
    `stable_s` starts the count again."""

    base: float = 1.0
    cap: float = 60.0
    stable_s: float = 30.0

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return min(self.cap, self.base * 2.0 ** min(failures - 1, 64))


@dataclass(frozen=True)
class LocalWorker:
    """One child as the planner (and a test) may read it."""

    pool: PoolName
    pid: int
    log_path: str
    draining: bool


@dataclass
class _Child:
    pool: PoolName
    serial: int  # start order: the youngest goes first when drain names too few
    process: asyncio.subprocess.Process
    log_path: str
    started: float
    draining: bool = False
    watch: asyncio.Task[None] | None = None
    kill_timer: asyncio.TimerHandle | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _tail(path: str) -> str:
    """The last lines of a child's log ('' if there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode(errors="replace").splitlines()
    return "\n".join(line.rstrip() for line in lines[-TAIL_LINES:]).strip()


class LocalConnector:
    """Worker processes on this machine, one command per pool."""

    name = "local"

    def __init__(
        self,
        commands: dict[PoolName, list[str]],
        nats_url: str,
        grace_period: float = 30.0,
        backoff: Backoff | None = None,
        env: dict[str, str] | None = None,
        log_dir: str | None = None,
        *,
        kill_margin: float = KILL_MARGIN_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        for pool, argv in commands.items():
            if not argv:
                raise ValueError(f"the {pool} pool's worker command is empty")
        if grace_period < 0 or kill_margin < 0:
            raise ValueError("grace_period and kill_margin must not be negative")
        self.commands = {pool: list(argv) for pool, argv in commands.items()}
        self.nats_url = nats_url
        self.grace_period = grace_period
        self.backoff = backoff or Backoff()
        self.env = dict(env or {})
        self.kill_margin = kill_margin
        self._log_dir = log_dir
        self._log_dir_ready = False
        self._clock = clock
        self._sleep = sleep
        self._parent: int | None = None
        self._children: dict[int, _Child] = {}  # by pid, until reaped
        self._targets: dict[PoolName, int] = {}
        self._failures: dict[PoolName, int] = {}
        self._in_a_row: dict[PoolName, int] = {}  # consecutive failures: the backoff's n
        self._last_failure: dict[PoolName, str] = {}
        self._refills: dict[PoolName, asyncio.Task[None]] = {}
        self._again: set[PoolName] = set()  # a failure while the pool's refill was running
        self._serial = 0
        self._stopping = False
        self._spawn_lock = asyncio.Lock()
        self._stop_lock = asyncio.Lock()

    # -- the Connector protocol ------------------------------------------------------

    async def start(self) -> None:
        """Nothing starts yet; the children will die with this process."""
        self._parent = os.getpid()

    async def replicas(self, pool: PoolName) -> int:
        """Children running and not draining (a draining one is leaving)."""
        return len(self._running(pool))

    async def scale(self, pool: PoolName, target: int, drain: list[WorkerLoad]) -> None:
        """Start the missing children, or SIGTERM the extra ones: those `drain`
        names first (by the pid in their lease's address), then the youngest.
        While the pool waits out a failure's backoff, its refill starts them."""
        if self._stopping:
            raise ConnectorError("the local connector has stopped")
        if pool not in self.commands:
            raise ConnectorError(f"no worker command for the {pool} pool")
        if target < 0:
            raise ConnectorError(f"cannot scale the {pool} pool to {target} workers")
        self._targets[pool] = target
        running = self._running(pool)
        if target < len(running):
            for child in self._pick(running, len(running) - target, drain):
                self._drain(child)
            return
        try:
            while self._wanted(pool) > 0 and not self._refilling(pool) and not self._stopping:
                await self._spawn(pool)
        except OSError as e:
            raise ConnectorError(
                f"could not start a {pool} worker ({shlex.join(self.commands[pool])}): {e}"
            ) from e

    async def stop(self) -> None:
        """SIGTERM every child, SIGKILL those still there after the grace
        period (and margin), reap them all. A second call does nothing more."""
        async with self._stop_lock:
            self._stopping = True
            refills = list(self._refills.values())
            for task in refills:
                task.cancel()
            await asyncio.gather(*refills, return_exceptions=True)
            async with self._spawn_lock:  # a start under way is in _children after this
                pass
            while self._children:
                children = list(self._children.values())
                log.info("local: stopping %d worker(s)", len(children))
                for child in children:
                    child.draining = True
                    self._signal(child, signal.SIGTERM)
                watches = [c.watch for c in children if c.watch is not None]
                _, late = await asyncio.wait(watches, timeout=self.grace_period + self.kill_margin)
                for child in children:
                    if child.process.returncode is None:
                        log.warning("local: worker pid %d outlived its grace: SIGKILL", child.pid)
                        self._signal(child, signal.SIGKILL)
                await asyncio.gather(*watches, return_exceptions=True)

    # -- what else the planner reads -------------------------------------------------

    def failures(self, pool: PoolName) -> int:
        """Children of `pool` that exited unasked, since the start."""
        return self._failures.get(pool, 0)

    def last_failure(self, pool: PoolName) -> str | None:
        """The last failure of `pool`: its exit code and its log's tail."""
        return self._last_failure.get(pool)

    def workers(self, pool: PoolName) -> list[LocalWorker]:
        """The pool's children not reaped yet, draining ones included, oldest first."""
        children = sorted(
            (c for c in self._children.values() if c.pool == pool), key=lambda c: c.serial
        )
        return [LocalWorker(c.pool, c.pid, c.log_path, c.draining) for c in children]

    @property
    def log_dir(self) -> str | None:
        """Where the children's logs go (None until the first one starts, if not given)."""
        return self._log_dir

    # -- starting ----------------------------------------------------------------------

    def _environment(self, pool: PoolName) -> dict[str, str]:
        """Every rotor flag reads ROTOR_<FLAG>: an explicit flag in the command wins."""
        return {
            **os.environ,
            "ROTOR_NATS": self.nats_url,
            "ROTOR_DISAGGREGATION_MODE": pool,
            "ROTOR_GRACE_PERIOD": str(self.grace_period),
            **self.env,
        }

    def _logs(self) -> str:
        if self._log_dir is None:
            self._log_dir = tempfile.mkdtemp(prefix="rotor-planner-")
        elif not self._log_dir_ready:
            os.makedirs(self._log_dir, exist_ok=True)
        if not self._log_dir_ready:
            self._log_dir_ready = True
            log.info("local: worker logs go to %s", self._log_dir)
        return self._log_dir

    async def _spawn(self, pool: PoolName) -> None:
        async with self._spawn_lock:
            if self._stopping:
                return
            self._serial += 1
            path = os.path.join(self._logs(), f"{pool}-{self._serial}.log")
            parent = self._parent if self._parent is not None else os.getpid()
            with open(path, "ab") as out:  # the child keeps its own descriptor
                process = await asyncio.create_subprocess_exec(
                    *self.commands[pool],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self._environment(pool),
                    start_new_session=True,
                    preexec_fn=functools.partial(die_with_parent, parent),
                )
            child = _Child(pool, self._serial, process, path, self._clock())
            self._children[child.pid] = child
            child.watch = asyncio.create_task(self._watch(child), name=f"local-{child.pid}")
            log.info("local: started a %s worker, pid %d, log %s", pool, child.pid, path)

    def _running(self, pool: PoolName) -> list[_Child]:
        """Oldest first."""
        children = (c for c in self._children.values() if c.pool == pool and not c.draining)
        return sorted(children, key=lambda c: c.serial)

    def _wanted(self, pool: PoolName) -> int:
        return self._targets.get(pool, 0) - len(self._running(pool))

    def _refilling(self, pool: PoolName) -> bool:
        task = self._refills.get(pool)
        return task is not None and not task.done()

    # -- failures ----------------------------------------------------------------------

    async def _watch(self, child: _Child) -> None:
        """Reap the child; an exit nobody asked for is a failure. Everything
        after the wait runs in one step, so a refill sees it whole."""
        code = await child.process.wait()
        self._children.pop(child.pid, None)
        if child.kill_timer is not None:
            child.kill_timer.cancel()
        if child.draining or self._stopping:
            log.info("local: %s worker pid %d left (%s)", child.pool, child.pid, _describe(code))
            return
        uptime = self._clock() - child.started
        stable = uptime >= self.backoff.stable_s
        text = f"pid {child.pid} exited unasked with {_describe(code)} after {uptime:.1f} s"
        text += f" (log {child.log_path})"
        tail = _tail(child.log_path)
        self._failed(child.pool, text + (f":\n{tail}" if tail else ""), stable)
        self._refill_later(child.pool)

    def _failed(self, pool: PoolName, text: str, stable: bool) -> None:
        self._failures[pool] = self._failures.get(pool, 0) + 1
        self._in_a_row[pool] = 1 if stable else self._in_a_row.get(pool, 0) + 1
        self._last_failure[pool] = text
        log.warning("local: a %s worker failed: %s", pool, text)

    def _refill_later(self, pool: PoolName) -> None:
        if self._stopping:
            return
        if self._refilling(pool):
            self._again.add(pool)
            return
        self._refills[pool] = asyncio.create_task(self._refill(pool), name=f"local-refill-{pool}")

    async def _refill(self, pool: PoolName) -> None:
        """After the backoff, start what the target still wants; a failure
        meanwhile means another backoff first."""
        while True:
            self._again.discard(pool)
            delay = self.backoff.delay(self._in_a_row.get(pool, 0))
            if self._wanted(pool) > 0:
                log.info("local: replacing a %s worker in %.1f s", pool, delay)
            await self._sleep(delay)
            try:
                while self._wanted(pool) > 0 and pool not in self._again and not self._stopping:
                    await self._spawn(pool)
            except OSError as e:
                self._failed(pool, f"could not start {shlex.join(self.commands[pool])}: {e}", False)
                continue
            if pool not in self._again or self._stopping:
                return

    # -- stopping ----------------------------------------------------------------------

    def _pick(self, running: list[_Child], count: int, drain: list[WorkerLoad]) -> list[_Child]:
        """`count` children: those `drain` names (least loaded first), then the youngest."""
        host = socket.gethostname()
        left = {c.pid: c for c in running}
        chosen: list[_Child] = []
        for worker in drain:
            if len(chosen) == count:
                break
            where, _, pid = worker.address.rpartition(":")
            if (where and where != host) or not pid.isdigit():
                continue
            child = left.pop(int(pid), None)
            if child is not None:
                chosen.append(child)
        youngest = sorted(left.values(), key=lambda c: c.serial, reverse=True)
        return chosen + youngest[: count - len(chosen)]

    def _drain(self, child: _Child) -> None:
        """SIGTERM: the worker withdraws, finishes its requests, exits; SIGKILL
        if it is still there after the grace period and margin."""
        child.draining = True
        log.info("local: draining %s worker pid %d", child.pool, child.pid)
        self._signal(child, signal.SIGTERM)
        child.kill_timer = asyncio.get_running_loop().call_later(
            self.grace_period + self.kill_margin, self._overdue, child
        )

    def _overdue(self, child: _Child) -> None:
        if child.process.returncode is None:
            log.warning("local: worker pid %d outlived its grace: SIGKILL", child.pid)
            self._signal(child, signal.SIGKILL)

    @staticmethod
    def _signal(child: _Child, sig: int) -> None:
        """To the child's process group (its session): a wrapper's worker gets it too."""
        if child.process.returncode is not None:
            return
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:  # not our group after all: the child alone
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(sig)
