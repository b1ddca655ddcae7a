"""A real pseudo-terminal for `rotor run in=text` (tests/inputs).

The child gets the pty as its controlling terminal, so Ctrl-C is a real SIGINT
from the line discipline and line editing is prompt_toolkit's. The harness
answers cursor-position requests like a terminal does. prompt_toolkit turns
bracketed paste on when a prompt starts and off when the line is accepted,
so the text between those two marks is exactly what rotor printed for a line.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time

PROMPT_ON = b"\x1b[?2004h"  # a prompt is waiting for input
PROMPT_OFF = b"\x1b[?2004l"  # the line was accepted
CPR_REQUEST = b"\x1b[6n"
ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|[\r\x08]")
STARTUP_S = 20.0  # the first prompt (interpreter start, imports)
PROMPT_BACK_S = 5.0  # a few dozen 5 ms tokens take far less; a cancelled answer would take 10 s


class Terminal:
    """A child process on a pty, read with deadlines (never a blind sleep)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        full_env = {**os.environ, "TERM": "xterm-256color", **(env or {})}
        full_env.pop("ROTOR_IN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rotor.cli", "run", "in=text", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=full_env,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.buf = b""
        self.pos = 0  # how far expect() has consumed

    def _pump(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        # A CPR request may be split across reads; answer each complete one once.
        before = self.buf.count(CPR_REQUEST)
        self.buf += data
        for _ in range(self.buf.count(CPR_REQUEST) - before):
            os.write(self.master, b"\x1b[1;1R")
        return True

    def expect(self, marker: bytes, timeout: float) -> bytes:
        """Wait for `marker` after what was consumed; return the bytes before it."""
        deadline = time.monotonic() + timeout
        while True:
            at = self.buf.find(marker, self.pos)
            if at >= 0:
                before = self.buf[self.pos : at]
                self.pos = at + len(marker)
                return before
            left = deadline - time.monotonic()
            if left <= 0 or not self._pump(min(left, 0.1)):
                if self.buf.find(marker, self.pos) >= 0:
                    continue
                raise AssertionError(
                    f"no {marker!r} within {timeout}s; output since: {self.buf[self.pos :]!r}"
                )

    def prompt(self, timeout: float = PROMPT_BACK_S) -> None:
        self.expect(PROMPT_ON, timeout)

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def line(self, text: str, timeout: float = PROMPT_BACK_S) -> bytes:
        """Type a line at the prompt; what was printed for it before the prompt
        came back (within `timeout`, or this fails)."""
        self.send(text.encode() + b"\r")
        self.expect(PROMPT_OFF, timeout)
        return self.expect(PROMPT_ON, timeout)

    def wait_exit(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._pump(0.05)
        return self.proc.wait(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def plain(data: bytes) -> str:
    return ESCAPES.sub(b"", data).decode()
