"""The mocker's embeddings: a deterministic unit vector per input. The same
token ids always give the same vector and different ones (practically
always) different vectors, so clients and routing can be tested without a
model; `dimensions` keeps the first N numbers, renormalised, as Matryoshka
models do."""

from __future__ import annotations

import hashlib
import math
import random
from array import array


def unit_vector(token_ids: list[int], dim: int) -> list[float]:
    """A vector of `dim` numbers, length 1, seeded by the token ids alone."""
    digest = hashlib.blake2b(array("I", token_ids).tobytes(), digest_size=8).digest()
    rng = random.Random(int.from_bytes(digest, "little"))
    return normalised([rng.gauss(0.0, 1.0) for _ in range(dim)])


def normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def shortened(vector: list[float], dimensions: int | None) -> list[float]:
    """The first `dimensions` numbers, back to length 1 (None: all of them)."""
    if dimensions is None or dimensions >= len(vector):
        return vector
    return normalised(vector[:dimensions])
