"""Batch mode reads JSONL lines: split at "\n" only, so the line separators
that JSON allows raw inside strings stay inside their line."""

from __future__ import annotations

import json
from pathlib import Path

from rotor.engines.echo import EchoEngine
from rotor.inputs.batch import jsonl_lines, run_batch
from rotor.model.card import echo_card

from support.app import system_over

# Each of these is a line boundary to str.splitlines, and plain text to JSON.
SEPARATORS = "\u2028\u2029\u0085"


def test_jsonl_lines_split_at_newlines_only() -> None:
    assert jsonl_lines(f'{{"a": "x{SEPARATORS}y"}}\r\n{{}}\n') == [
        f'{{"a": "x{SEPARATORS}y"}}',
        "{}",
        "",
    ]
    assert jsonl_lines("one\rtwo") == ["one\rtwo"]  # a lone CR ends no line


async def test_separators_inside_json_strings_stay_in_their_line(tmp_path: Path) -> None:
    text = f"before{SEPARATORS}after"
    source = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": text}, ensure_ascii=False), json.dumps({"text": "crlf"})]
    source.write_bytes("\r\n".join(lines).encode("utf-8") + b"\r\n")
    out = tmp_path / "out.jsonl"
    card = echo_card()
    system = system_over(EchoEngine(card, None, 0))

    assert await run_batch(system, str(source), str(out)) == 0

    records = [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n") if line]
    assert [r["index"] for r in records] == [0, 1]
    assert [r.get("error") for r in records] == [None, None]
    assert records[0]["text"] == text
    assert records[1]["text"] == "crlf"
