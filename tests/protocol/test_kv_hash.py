"""The block hash is the specified one: golden vectors, the byte layout by hand,
the same value in another process, and chaining that names whole prefixes."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from rotor.protocol.kv import (
    ROOT_PARENT,
    SALT_SEED,
    SEED,
    block_hash,
    block_hashes,
    chain_root,
    lora_root,
)

# Computed once from the spec in rotor.protocol.kv; they must never change.
GOLDEN = [
    ((None, []), 0x34EA9D3A8944F5CA),
    ((None, [0, 1, 2, 3]), 0x39A81EC8D7E55617),
    ((None, [1, 2, 3, 4]), 0x04A5CF6F5B800931),
    ((0x39A81EC8D7E55617, [4, 5, 6, 7]), 0x90F07270E639663E),
    ((0xFFFFFFFFFFFFFFFF, [42]), 0x85CB591839AC2F7D),
]
GOLDEN_CHAINS = [
    ((list(range(10)), 4), [0x39A81EC8D7E55617, 0x90F07270E639663E]),
    (([2**32 - 1, 0, 70000, 151643], 2), [0xEF6E1540586A5E3F, 0xB2853930EFD9A233]),
    ((list(range(100, 148)), 16), [0x0E736C7E01F91E32, 0x760EF0DE95D78720, 0x27F65C830803443D]),
]

tokens = st.lists(st.integers(0, 2**32 - 1), max_size=40)


def test_seed_is_rotor_in_ascii() -> None:
    assert SEED == int.from_bytes(b"rotor", "big") == 0x726F746F72
    assert ROOT_PARENT == 0


@pytest.mark.parametrize(("args", "expected"), GOLDEN)
def test_golden_block_hashes(args: tuple, expected: int) -> None:
    assert block_hash(*args) == expected


@pytest.mark.parametrize(("args", "expected"), GOLDEN_CHAINS)
def test_golden_chains(args: tuple, expected: list[int]) -> None:
    assert block_hashes(*args) == expected


def test_one_vector_by_hand_from_the_byte_layout() -> None:
    """Parent as LE u64 (0 for the root), then each token as LE u32, XXH3-64 with SEED."""
    first = bytes.fromhex("000000000000000000000000010000000200000003000000")
    h0 = xxhash.xxh3_64_intdigest(first, seed=0x726F746F72)
    assert h0 == 0x39A81EC8D7E55617
    second = struct.pack("<Q", h0) + bytes.fromhex("04000000050000000600000007000000")
    assert xxhash.xxh3_64(second, seed=SEED).intdigest() == 0x90F07270E639663E
    assert block_hashes(list(range(8)), 4) == [h0, 0x90F07270E639663E]


@given(tokens, st.integers(1, 8), st.none() | st.integers(0, 2**64 - 1))
def test_block_hashes_chain_block_hash(ids: list[int], size: int, parent: int | None) -> None:
    expected, prev = [], parent
    for start in range(0, len(ids) - size + 1, size):
        prev = block_hash(prev, ids[start : start + size])
        expected.append(prev)
    assert block_hashes(ids, size, parent) == expected
    assert len(expected) == len(ids) // size  # full blocks only


@given(tokens, st.integers(1, 8))
def test_a_hash_names_the_whole_prefix(ids: list[int], size: int) -> None:
    """Changing any token changes the hash of its block and of every later block."""
    hashes = block_hashes(ids, size)
    for pos in range(len(hashes) * size):
        changed = list(ids)
        changed[pos] = (changed[pos] + 1) % 2**32
        other = block_hashes(changed, size)
        first = pos // size
        assert other[:first] == hashes[:first]
        assert all(a != b for a, b in zip(other[first:], hashes[first:], strict=True))


def test_root_parent_is_zero_and_tuples_hash_like_lists() -> None:
    assert block_hash(None, [5, 6]) == block_hash(0, (5, 6)) == block_hashes([5, 6], 2)[0]


@pytest.mark.parametrize("bad", [[-1], [2**32], [1.0], ["a"], [None]])
def test_tokens_outside_u32_are_a_value_error(bad: list) -> None:
    with pytest.raises(ValueError, match=r"\[0, 2\*\*32\)"):
        block_hash(None, bad)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*32\)"):
        block_hashes(bad, 1)


@pytest.mark.parametrize("parent", [-1, 2**64, "x"])
def test_bad_parent_is_a_value_error(parent: object) -> None:
    with pytest.raises(ValueError, match="parent hash"):
        block_hash(parent, [1])  # type: ignore[arg-type]


def test_block_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="block_size"):
        block_hashes([1, 2], 0)


def test_two_processes_with_different_hash_seeds_agree() -> None:
    code = (
        "from rotor.protocol.kv import block_hashes;"
        "print(block_hashes(list(range(1000, 1100)), 16, 7))"
    )
    outputs = set()
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(done.stdout.strip())
    assert outputs == {str(block_hashes(list(range(1000, 1100)), 16, 7))}


def test_lora_root_golden_and_by_hand() -> None:
    """An adapter's root is XXH3-64 of b"lora:" + its name's UTF-8, with SEED;
    the base model's is None (0)."""
    assert lora_root(None) is None
    assert lora_root("sql") == 0xA9A6AA13E9543C80
    assert lora_root("sql") == xxhash.xxh3_64_intdigest(b"lora:sql", seed=SEED)
    assert block_hashes([1, 2, 3, 4], 2, lora_root("sql")) == [
        0x6A27775F3CE116CB,
        0xB89A841E3E33C378,
    ]


@given(tokens.filter(lambda ids: len(ids) >= 2), st.text(min_size=1), st.text(min_size=1))
def test_adapters_never_share_blocks(ids: list[int], a: str, b: str) -> None:
    """The same tokens under two adapters, or an adapter and the base, hash apart."""
    base = block_hashes(ids, 2)
    under_a = block_hashes(ids, 2, lora_root(a))
    assert not set(base) & set(under_a)
    if a != b:
        assert not set(under_a) & set(block_hashes(ids, 2, lora_root(b)))


def test_salted_root_golden_and_by_hand() -> None:
    """A cache_salt's root is XXH3-64, with SALT_SEED, of the unsalted root's
    8 little-endian bytes and the salt's UTF-8; no salt leaves the root as it
    was (so every hash computed before salts keeps its value)."""
    assert chain_root() is None
    assert chain_root("sql") == lora_root("sql")
    assert chain_root(None, "tenant-a") == 0xBC634DBD836B4009
    by_hand = xxhash.xxh3_64_intdigest(bytes(8) + b"tenant-a", seed=SALT_SEED)
    assert chain_root(None, "tenant-a") == by_hand
    sql = (lora_root("sql") or 0).to_bytes(8, "little")
    assert chain_root("sql", "tenant-a") == xxhash.xxh3_64_intdigest(
        sql + b"tenant-a", seed=SALT_SEED
    )
    assert chain_root("sql", "tenant-a") == 0xB537D206FC533FE2
    assert block_hashes([1, 2, 3, 4], 2, chain_root(None, "tenant-a")) == [
        0x08AE3D93F63FB375,
        0x8A888C5F94330BBE,
    ]


@given(
    tokens.filter(lambda ids: len(ids) >= 2),
    st.text(min_size=1),
    st.text(min_size=1),
    st.one_of(st.none(), st.text(min_size=1)),
)
def test_salts_never_share_blocks(ids: list[int], a: str, b: str, lora: str | None) -> None:
    """The same tokens under two salts, or a salt and none, hash apart (with
    or without an adapter); one salt twice hashes alike; a salt and an
    adapter of the same name hash apart."""
    plain = block_hashes(ids, 2, chain_root(lora))
    salted = block_hashes(ids, 2, chain_root(lora, a))
    assert not set(plain) & set(salted)
    assert salted == block_hashes(ids, 2, chain_root(lora, a))
    if a != b:
        assert not set(salted) & set(block_hashes(ids, 2, chain_root(lora, b)))
    assert not set(block_hashes(ids, 2, chain_root(None, a))) & set(
        block_hashes(ids, 2, chain_root(a))
    )
