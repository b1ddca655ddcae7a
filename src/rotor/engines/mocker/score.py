"""The mocker's cross-encoder scores: a number in [0, 1) per pair, from a
hash of the pair's token ids and where its second text starts. The same pair
always gets the same score and different pairs (practically always)
different ones, so clients, ranking and routing can be tested without a
model; the scores mean nothing else."""

from __future__ import annotations

import hashlib
from array import array

from rotor.protocol.scores import ScorePair


def pair_score(pair: ScorePair) -> float:
    """The pair's score: the first 53 bits of its BLAKE2b hash, over 2**53."""
    start = -1 if pair.type_start is None else pair.type_start
    data = array("I", pair.token_ids).tobytes() + start.to_bytes(8, "little", signed=True)
    digest = hashlib.blake2b(data, digest_size=8).digest()
    return (int.from_bytes(digest, "little") >> 11) / float(1 << 53)
