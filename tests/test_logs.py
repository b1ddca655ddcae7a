"""rotor.logs: the JSON format is one object per record with its structured
fields and its exception as a string; the text format is the one rotor always
had; an unknown format is refused by name."""

from __future__ import annotations

import json
import logging
from datetime import datetime

import pytest

from rotor.logs import TEXT_FORMAT, JSONFormatter, formatter, uvicorn_options


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("rotor.test", logging.WARNING, __file__, 1, msg, args, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_a_record_is_one_json_line_with_its_fields() -> None:
    rec = record("%d tokens", 3, fields={"model": "m", "status": 200, "level": "forged"})
    line = JSONFormatter().format(rec)
    assert "\n" not in line
    out = json.loads(line)
    assert out["level"] == "warning"  # a field never replaces the record's own keys
    assert (out["logger"], out["msg"], out["model"], out["status"]) == (
        "rotor.test",
        "3 tokens",
        "m",
        200,
    )
    assert out["ts"].endswith("Z")
    stamp = datetime.fromisoformat(out["ts"].removesuffix("Z") + "+00:00")
    assert abs(stamp.timestamp() - rec.created) < 0.001


def test_an_exception_is_a_string_field() -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        import sys

        rec = logging.LogRecord("rotor", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    line = JSONFormatter().format(rec)
    assert "\n" not in line
    out = json.loads(line)
    assert out["msg"] == "failed"
    assert out["exc"].startswith("Traceback (most recent call last):")
    assert out["exc"].endswith("ValueError: boom\nsecond line")


def test_what_orjson_refuses_is_still_one_json_line() -> None:
    line = JSONFormatter().format(record("odd", fields={"path": "\ud800", 1: "int key"}))
    out = json.loads(line)
    assert out["path"] == "\ud800" and out["1"] == "int key"


def test_text_keeps_rotors_look() -> None:
    fmt = formatter("text")
    assert fmt._fmt == TEXT_FORMAT == "%(asctime)s %(levelname)s %(name)s: %(message)s"
    assert fmt.format(record("hello")).endswith(" WARNING rotor.test: hello")


def test_an_unknown_format_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="--log-format must be one of text, json, got 'xml'"):
        formatter("xml")


def test_uvicorn_keeps_its_hands_off_logging() -> None:
    assert uvicorn_options("INFO") == {"log_level": "info", "log_config": None, "access_log": False}
