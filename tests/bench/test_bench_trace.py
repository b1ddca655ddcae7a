"""Mooncake traces: bad lines are named; requests sharing leading hash ids send
the same leading text, of about the trace's token counts with a real tokenizer;
timestamps become send offsets divided by the speedup."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rotor.bench import tokens
from rotor.bench.mooncake import MooncakeTrace, Row
from rotor.bench.trace import FORMATS, TraceOptions, read, send_offsets
from rotor.model.builtin import builtin_test_model


def write(tmp_path: Path, *lines: str | dict) -> Path:
    path = tmp_path / "trace.jsonl"
    text = [line if isinstance(line, str) else orjson.dumps(line).decode() for line in lines]
    path.write_text("\n".join(text) + "\n")
    return path


def row(ts: float, n_in: int, ids: list[int], n_out: int = 8) -> dict:
    return {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


def test_reads_rows_in_time_order(tmp_path: Path) -> None:
    path = write(tmp_path, row(500, 600, [1, 2]), "", row(0, 100, [3], 4))
    trace = read(path, "mooncake", TraceOptions(block_size=512))
    assert isinstance(trace, MooncakeTrace) and trace.in_tokens
    assert trace.timestamps_ms == [0.0, 500.0]
    assert trace.rows == [Row(0.0, 100, 4, (3,)), Row(500.0, 600, 8, (1, 2))]
    assert "mooncake" in FORMATS


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected an object"),
        (row(-1, 10, [1]), "'timestamp' must be a number"),
        ({"input_length": 10, "output_length": 1, "hash_ids": [1]}, "'timestamp'"),
        (row(0, 0, [1]), "'input_length' must be a positive integer"),
        (row(0, 10, [1], n_out=True), "'output_length' must be a positive integer"),
        (row(0, 10, []), "'hash_ids' must be a non-empty list"),
        (row(0, 10, [1, "x"]), "'hash_ids' must be a non-empty list"),
        (row(0, 513, [1]), "does not fit 1 hash ids of 512"),
        (row(0, 512, [1, 2]), "--trace-block-size"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, line: str | dict, message: str) -> None:
    path = write(tmp_path, row(0, 10, [1]), row(5, 10, [2]), line)
    with pytest.raises(ValueError, match=message) as e:
        read(path, "mooncake", TraceOptions())
    assert f"{path}:3:" in str(e.value)


def test_empty_missing_and_unknown(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no requests"):
        read(write(tmp_path, ""), "mooncake", TraceOptions())
    with pytest.raises(ValueError, match="--trace .*nope"):
        read(tmp_path / "nope.jsonl", "mooncake", TraceOptions())
    with pytest.raises(ValueError, match="--trace-format 'sharegpt'"):
        read(write(tmp_path, row(0, 1, [1])), "sharegpt", TraceOptions())


def prompts(rows: list[dict], tmp_path: Path, block: int, tpw: float, seed: str) -> list[str]:
    trace = read(write(tmp_path, *rows), "mooncake", TraceOptions(block_size=block))
    return [c.turns[0].text for c in trace.conversations(tpw, seed)]


def test_shared_hash_ids_share_leading_text(tmp_path: Path) -> None:
    rows = [row(0, 250, [1, 2, 3]), row(1, 250, [1, 2, 4]), row(2, 50, [1]), row(3, 250, [5, 2, 3])]
    a, b, c, d = prompts(rows, tmp_path, 100, 1.0, "0:0")
    block1, block2 = a.split()[:100], a.split()[100:200]
    assert b.split()[:200] == block1 + block2  # two hash ids in common: two blocks of text
    assert a.split()[200:] != b.split()[200:]  # the third differs
    assert c.split() == block1[:50]  # a partial block is the start of its full text
    assert d.split()[:100] != block1 and d.split()[100:] == a.split()[100:]  # by id, not place
    assert [len(p.split()) for p in (a, b, c, d)] == [250, 250, 50, 250]  # 1 token a word
    other = prompts(rows, tmp_path, 100, 1.0, "0:1")  # another level: its own text
    assert other[0] != a and other[1].split()[:200] == other[0].split()[:200]
    assert prompts(rows, tmp_path, 100, 1.0, "0:0") == [a, b, c, d]  # and the same again


def test_prompt_token_counts_are_close_with_a_real_tokenizer(tmp_path: Path) -> None:
    """The built-in model's tokenizer makes ~5 tokens of a word: prompts sized
    with its tokens per word (measured as rotor bench measures it from usage)
    tokenize to about the trace's lengths, and shared blocks to the same tokens."""
    _, tok = builtin_test_model()
    short, long = (tokens.keyed_words(f"calibration-0-{n}", n) for n in tokens.CALIBRATION_WORDS)
    tpw = tokens.tokens_per_word_from(
        {"prompt_tokens": len(tok.encode(short)), "error": None},
        {"prompt_tokens": len(tok.encode(long)), "error": None},
        tokens.CALIBRATION_WORDS[1] - tokens.CALIBRATION_WORDS[0],
    )
    assert 3 < tpw < 7
    lengths = [512, 1000, 3000, 8000]
    rows = [row(i, n, list(range(100 * i, 100 * i + -(-n // 512)))) for i, n in enumerate(lengths)]
    rows.append(row(9, 1400, [0, 100, 101]))  # shares the first two rows' first blocks
    texts = prompts(rows, tmp_path, 512, tpw, "7:0")
    for n, text in zip([*lengths, 1400], texts, strict=True):
        assert abs(len(tok.encode(text)) - n) <= 0.06 * n, (n, len(tok.encode(text)))
    head = tok.encode(texts[0] + " " + " ".join(texts[1].split()[: tokens.words_for(512, tpw)]))
    assert tok.encode(texts[4])[: len(head)] == head


def test_send_offsets_divide_the_gaps_by_the_speedup() -> None:
    assert send_offsets([1000, 1500, 4000], 1) == [0.0, 0.5, 3.0]
    assert send_offsets([1000, 1500, 4000], 2) == [0.0, 0.25, 1.5]
    assert send_offsets([0, 100], 0.5) == [0.0, 0.2]
    assert send_offsets([], 3) == []
    with pytest.raises(ValueError, match="--trace-speedup must be positive"):
        send_offsets([0], 0)


def test_tokens_per_word_from_usage_and_its_failures() -> None:
    ok = {"prompt_tokens": 100, "error": None}
    assert tokens.tokens_per_word_from(ok, {"prompt_tokens": 600, "error": None}, 1000) == 0.5
    with pytest.raises(ValueError, match="refused \\(http_400\\): no"):
        tokens.tokens_per_word_from(ok, {"error": {"kind": "http_400", "message": "no"}}, 10)
    with pytest.raises(ValueError, match="no prompt tokens; give --tokens-per-word"):
        tokens.tokens_per_word_from(ok, {"prompt_tokens": None, "error": None}, 10)
    with pytest.raises(ValueError, match="cost 0 more tokens"):
        tokens.tokens_per_word_from(ok, ok, 10)
    assert tokens.words_for(512, 4.8) == 107 and tokens.words_for(1, 4.8) == 1
