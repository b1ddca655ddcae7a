"""rotor's request log as a trace (bench/rotor_trace.py): records that got a
response are replayed in arrival order, bad lines are named with file and
line, `.gz` files (rotated ones concatenated too) read as they are, and
records whose leading KV block hashes agree send the same leading text —
Mooncake's text, one piece per few blocks, of about the logged token counts."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import orjson
import pytest

from rotor.bench import tokens
from rotor.bench.rotor_trace import Logged, RotorTrace, blocks_per_piece
from rotor.bench.trace import FORMATS, TraceOptions, read
from rotor.model.builtin import builtin_test_model


def rec(
    arrival: float,
    n_in: int | None,
    n_out: int = 8,
    hashes: list[int] | None = None,
    block: int = 16,
    **extra: object,
) -> dict:
    """A record as the request log writes it (the fields a replay reads, and a few more)."""
    out: dict = {"arrival": arrival, "request_id": "r", "route": "/v1/chat/completions"}
    out |= {"status": 200, **extra}
    if n_in is not None:
        out |= {"prompt_tokens": n_in, "completion_tokens": n_out}
    if hashes is not None:
        out |= {"block_size": block, "block_hashes": hashes}
    return out


def write(tmp_path: Path, *lines: str | dict, name: str = "requests.jsonl") -> Path:
    path = tmp_path / name
    text = [line if isinstance(line, str) else orjson.dumps(line).decode() for line in lines]
    path.write_text("\n".join(text) + "\n")
    return path


def test_replays_what_got_a_response_in_arrival_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        rec(1700000002.5, 40, 3),
        "",
        rec(1700000001.0, None, status=404),  # refused before it began: not replayed
        rec(1700000000.0, 20, 0, status=499),  # its client left before a token
        rec(1700000001.5, 0),  # no prompt: nothing to send
    )
    trace = read(path, "rotor", TraceOptions())
    assert isinstance(trace, RotorTrace) and trace.in_tokens and "rotor" in FORMATS
    assert trace.timestamps_ms == [1700000000000.0, 1700000002500.0]
    assert trace.records == [Logged(1700000000000.0, 20, 0), Logged(1700000002500.0, 40, 3)]
    rows, _ = trace.rows(1.0)
    assert [r.output_length for r in rows] == [1, 3]  # at least one token to ask for


H = [11, 12, 13, 14]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON"),
        ("[1]", "expected an object"),
        (rec(-1, 10), "'arrival' must be unix seconds"),
        ({"prompt_tokens": 10, "completion_tokens": 1}, "'arrival'"),
        (rec(0, "10"), "'prompt_tokens' must be an integer"),  # type: ignore[arg-type]
        ({"arrival": 0, "prompt_tokens": 10}, "'completion_tokens' must be an integer"),
        (rec(0, 10, hashes="x"), "'block_hashes' must be a list"),  # type: ignore[arg-type]
        (rec(0, 100, hashes=[1, -2]), "unsigned 64-bit"),
        (orjson.dumps(rec(0, 100, hashes=[1, 2])).decode().replace("2]", f"{2**64}]"), "64-bit"),
        (rec(0, 100, hashes=[1], block=0), "'block_size' must be a positive integer"),
        (rec(0, 63, hashes=H), "4 block hashes of 16 tokens are more than its 63"),
        (rec(0, 100, hashes=H, block=8), "block_size 8, but line 1's is 16"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, line: str | dict, message: str) -> None:
    path = write(tmp_path, rec(0, 100, hashes=H), rec(5, 10), line)
    with pytest.raises(ValueError, match=message) as e:
        read(path, "rotor", TraceOptions())
    assert f"{path}:3:" in str(e.value)


def test_empty_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no requests that got a response"):
        read(write(tmp_path, rec(0, None, status=400)), "rotor", TraceOptions())
    with pytest.raises(ValueError, match="--trace .*nope"):
        read(tmp_path / "nope.jsonl", "rotor", TraceOptions())
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b" + b"not gzip at all")
    with pytest.raises(ValueError, match=f"--trace {bad}: not a gzip file"):
        read(bad, "rotor", TraceOptions())


def test_a_gzip_log_still_being_written(tmp_path: Path) -> None:
    """The writer's flushes end whole lines, but the file has no gzip end
    yet, and may hold the start of the next lines: its whole lines are read."""
    zip_ = zlib.compressobj(wbits=31)
    data = zip_.compress(b"".join(orjson.dumps(rec(i, 10 + i)) + b"\n" for i in range(2)))
    data += zip_.flush(zlib.Z_SYNC_FLUSH)
    data += zip_.compress(orjson.dumps(rec(5, 99))[:20]) + zip_.flush(zlib.Z_SYNC_FLUSH)
    path = tmp_path / "live.jsonl.gz"
    path.write_bytes(data)
    assert [r.prompt_tokens for r in read(path, "rotor", TraceOptions()).records] == [10, 11]


def test_gzip_and_rotated_files_concatenated(tmp_path: Path) -> None:
    """`cat requests.jsonl.gz.1 requests.jsonl.gz > all.gz`: two gzip members, one trace."""
    old = gzip.compress(orjson.dumps(rec(1, 10)) + b"\n" + orjson.dumps(rec(3, 30)) + b"\n")
    new = gzip.compress(orjson.dumps(rec(2, 20)) + b"\n")
    path = tmp_path / "all.gz"
    path.write_bytes(old + new)
    trace = read(path, "rotor", TraceOptions())
    assert [r.prompt_tokens for r in trace.records] == [10, 20, 30]


def texts(trace: RotorTrace, tpw: float, seed: str = "0:0") -> list[str]:
    return [c.turns[0].text for c in trace.conversations(tpw, seed)]


def test_shared_leading_hashes_share_leading_text(tmp_path: Path) -> None:
    """One token a word: a piece is one block of 16 words; records share
    text for exactly the blocks whose hashes they share, then go their own ways."""
    a = rec(0, 100, hashes=[1, 2, 3, 4, 5, 6])
    b = rec(1, 70, hashes=[1, 2, 3, 9])  # three blocks of a's
    c = rec(2, 40, hashes=[7, 8])  # none
    d = rec(3, 100, hashes=[1, 2, 3, 4, 5, 6])  # a's prompt again (its tail differs)
    trace = read(write(tmp_path, a, b, c, d), "rotor", TraceOptions())
    ta, tb, tc, td = (t.split() for t in texts(trace, 1.0))
    assert [len(t) for t in (ta, tb, tc, td)] == [100, 70, 40, 100]
    assert tb[:48] == ta[:48] and tb[48:64] != ta[48:64]
    assert tc[:16] != ta[:16]
    assert td[:96] == ta[:96] and td[96:] != ta[96:]  # its last 4 tokens: no hash, its own
    assert texts(trace, 1.0) == texts(trace, 1.0)  # the same seed, the same text
    other = [t.split() for t in texts(trace, 1.0, "0:1")]  # another level: its own text
    assert other[0] != ta and other[1][:48] == other[0][:48]


def test_pieces_are_whole_blocks_of_enough_words(tmp_path: Path) -> None:
    assert blocks_per_piece(16, 1.0) == 1
    assert blocks_per_piece(16, 4.8) == 5  # 80 tokens: 16.7 words
    assert blocks_per_piece(512, 4.8) == 1
    a = rec(0, 200, hashes=list(range(1, 13)))
    b = rec(1, 200, hashes=[*range(1, 8), 99, 100, 101, 102, 103])  # 7 blocks of a's
    trace = read(write(tmp_path, a, b), "rotor", TraceOptions())
    rows, piece = trace.rows(5.0)
    assert piece == 80  # 5 blocks of 16
    assert rows[0].hash_ids[:2] == (5, 10) and rows[1].hash_ids[0] == 5  # a piece: its last hash
    assert rows[1].hash_ids[1] != 10  # the second piece is not whole in common
    assert len(rows[0].hash_ids) == 3  # 2 pieces of 80, then 40 tokens of its own


def test_without_hashes_every_prompt_is_its_own(tmp_path: Path) -> None:
    trace = read(write(tmp_path, rec(0, 600), rec(1, 600)), "rotor", TraceOptions(block_size=64))
    assert trace.block_size is None
    rows, piece = trace.rows(1.0)
    assert piece == 64 and len(rows[0].hash_ids) == 10
    assert not set(rows[0].hash_ids) & set(rows[1].hash_ids)
    a, b = (t.split() for t in texts(trace, 1.0))
    assert len(a) == len(b) == 600 and a[:64] != b[:64]


def test_prompt_token_counts_are_close_with_a_real_tokenizer(tmp_path: Path) -> None:
    """The built-in model's tokenizer (~5 tokens a word) at 16-token blocks:
    the replayed prompts tokenize to about the logged counts, and records
    sharing a long prefix share its tokens."""
    _, tok = builtin_test_model()
    short, long = (tokens.keyed_words(f"calibration-0-{n}", n) for n in tokens.CALIBRATION_WORDS)
    tpw = tokens.tokens_per_word_from(
        {"prompt_tokens": len(tok.encode(short)), "error": None},
        {"prompt_tokens": len(tok.encode(long)), "error": None},
        tokens.CALIBRATION_WORDS[1] - tokens.CALIBRATION_WORDS[0],
    )
    lengths = [300, 1000, 3000]
    lines = [
        rec(i, n, hashes=list(range(1000 * i, 1000 * i + n // 16))) for i, n in enumerate(lengths)
    ]
    lines.append(rec(9, 1500, hashes=[*range(0, 18), *range(5000, 5075)]))  # 18 of the first's
    trace = read(write(tmp_path, *lines), "rotor", TraceOptions())
    got = texts(trace, tpw, "3:0")
    for n, text in zip([*lengths, 1500], got, strict=True):
        assert abs(len(tok.encode(text)) - n) <= 0.06 * n, (n, len(tok.encode(text)))
    first, last = tok.encode(got[0]), tok.encode(got[3])
    common = next(i for i, (x, y) in enumerate(zip(first, last, strict=False)) if x != y)
    assert common >= 0.8 * 18 * 16 - 2 * 16, common  # most of the 288 shared tokens
