"""Logging for every rotor process: one handler on stderr, in one of two formats.

`text` is for people (`2025-01-02 03:04:05,678 INFO rotor.access: ...`);
`json` is for machines: one object per line, so that every line a rotor
process writes to stderr parses. uvicorn is told to leave logging alone
(`uvicorn_options`): its records reach the same handler, and its own access
log stays off (rotor writes one, `api/access_log.py`). The lines rotor always
prints whatever the level (`rotor: serving ... on URL`, startup errors) go
through `say`, so they follow the format too.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any

import orjson

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# What `say` writes with; `setup` replaces it.
_formatter: logging.Formatter | None = None


class JSONFormatter(logging.Formatter):
    """One JSON object per record: ts (ISO-8601, UTC), level, logger, msg,
    then the record's structured `fields` (`extra={"fields": {...}}`), and the
    exception or stack as strings."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, timezone.utc)
        out: dict[str, Any] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                out.setdefault(key, value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        try:
            return orjson.dumps(out, default=str).decode()
        except (TypeError, orjson.JSONEncodeError):  # a lone surrogate, an odd key
            return json.dumps(out, default=str)


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JSONFormatter()
    if fmt == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"--log-format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def setup(level: str, fmt: str = "text") -> None:
    """The root logger at `level` with one stderr handler in `fmt`, for this
    process and the ones it forks. Replaces any handler set before (a second
    call does not double the lines)."""
    global _formatter
    _formatter = formatter(fmt)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # warnings.warn follows the format too
    if fmt == "json":
        sys.excepthook = _log_uncaught


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
    logging.getLogger("rotor").critical("uncaught exception", exc_info=(kind, exc, tb))


def say(message: str, level: int = logging.INFO, **fields: Any) -> None:
    """A line rotor prints whatever the log level (what it serves, why it
    cannot start): `rotor: message` in text, one record in json."""
    if not isinstance(_formatter, JSONFormatter):
        print(f"rotor: {message}", file=sys.stderr, flush=True)
        return
    record = logging.LogRecord("rotor", level, __file__, 0, message, None, None)
    record.fields = fields
    sys.stderr.write(_formatter.format(record) + "\n")
    sys.stderr.flush()


def uvicorn_options(level: str) -> dict[str, Any]:
    """The uvicorn.Config arguments every rotor server passes: uvicorn keeps
    its hands off logging (no handlers of its own) and writes no access log."""
    return {"log_level": level.lower(), "log_config": None, "access_log": False}
