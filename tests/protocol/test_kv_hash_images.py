"""Image-aware KV block hashes (protocol/kv.block_hashes with `images`), as
every place rotor hashes a request uses them: the same image at the same
place hashes alike; a different image behind the same text diverges exactly
at the first block holding its tokens; the identity is the bytes' content
hash, whatever URL brought them; a request without images hashes as before;
a prompt hashed in slices (`start`) equals it hashed at once; and the request
log's hashes (api/request_record.py) are the router's."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from rotor.api.request_record import Record
from rotor.media.decode import content_hash
from rotor.media.limits import MediaLimits
from rotor.media.source import MediaSource
from rotor.protocol.engine import EngineImage
from rotor.protocol.kv import block_hashes, chain_root

BS = 4
PAD = 9  # the placeholder token each image's span repeats
RED, BLUE = b"\x89PNG red pixels", b"\x89PNG blue pixels"


def prompt_with(offset: int, length: int, total: int) -> list[int]:
    """`total` tokens of text with an image's span of PAD tokens at `offset`."""
    ids = [100 + i for i in range(total)]
    ids[offset : offset + length] = [PAD] * length
    return ids


def image(data: bytes, offset: int, length: int) -> EngineImage:
    return EngineImage(content_hash(data), offset, length, PAD, data)


IDS = prompt_with(6, 7, 24)  # 6 blocks; the image's tokens in blocks 1..3


def test_the_same_image_at_the_same_place_hashes_alike() -> None:
    one = block_hashes(IDS, BS, images=[image(RED, 6, 7)])
    again = block_hashes(IDS, BS, images=[EngineImage(content_hash(RED), 6, 7, PAD, None)])
    assert one == again  # the bytes (or their absence) are not hashed: their hash is


def test_a_different_image_diverges_at_its_first_block() -> None:
    red = block_hashes(IDS, BS, images=[image(RED, 6, 7)])
    blue = block_hashes(IDS, BS, images=[image(BLUE, 6, 7)])
    text = block_hashes(IDS, BS)
    assert red[:1] == blue[:1] == text[:1]  # block 0 holds no image token
    assert all(r != b for r, b in zip(red[1:], blue[1:], strict=True))
    assert all(r != t for r, t in zip(red[1:], text[1:], strict=True))


def test_the_same_image_elsewhere_is_another_block() -> None:
    # the same tokens and image, the image one token later: its blocks differ
    ids = prompt_with(6, 7, 24)
    ids[13] = PAD  # (the span's tokens are equal; only where the image starts moves)
    here = block_hashes(ids, BS, images=[image(RED, 6, 8)])
    later = block_hashes(ids, BS, images=[image(RED, 7, 7)])
    assert here[0] == later[0] and here[1] != later[1]


def test_without_images_a_prompt_hashes_as_before() -> None:
    root = chain_root("adapter", "salt")
    assert block_hashes(IDS, BS, root, images=()) == block_hashes(IDS, BS, root)
    # an image wholly in a partial last block changes no full block's hash
    ids = prompt_with(24, 2, 26)
    assert block_hashes(ids, BS, images=[image(RED, 24, 2)]) == block_hashes(ids, BS)


async def test_the_same_bytes_from_any_url_are_the_same_image(tmp_path: Path) -> None:
    (tmp_path / "red.png").write_bytes(RED)
    source = MediaSource(MediaLimits(allowed_local_path=tmp_path))
    try:
        inline = await source.load(
            "data:image/png;base64," + base64.b64encode(RED).decode(), "messages[0].content[0]"
        )
        local = await source.load((tmp_path / "red.png").as_uri(), "messages[0].content[0]")
    finally:
        await source.aclose()
    assert inline == local == RED
    a = block_hashes(IDS, BS, images=[image(inline, 6, 7)])
    b = block_hashes(IDS, BS, images=[image(local, 6, 7)])
    assert a == b


@st.composite
def prompts_with_images(draw: st.DrawFn) -> tuple[list[int], list[EngineImage], int]:
    """A prompt, its images (apart, in order, some spanning several blocks),
    and a block size."""
    size = draw(st.integers(1, 6))
    total = draw(st.integers(0, 60))
    ids = draw(st.lists(st.integers(0, 2**32 - 1), min_size=total, max_size=total))
    images: list[EngineImage] = []
    at = 0
    while at < total and draw(st.booleans()):
        offset = draw(st.integers(at, total - 1))
        length = draw(st.integers(1, total - offset))
        images.append(EngineImage(draw(st.sampled_from(["a" * 64, "b" * 64])), offset, length, 7))
        at = offset + length
    return ids, images, size


@settings(max_examples=200, deadline=None)
@given(prompts_with_images(), st.lists(st.integers(0, 12), max_size=6))
def test_hashed_in_slices_equals_hashed_at_once(
    case: tuple[list[int], list[EngineImage], int], cuts: list[int]
) -> None:
    """As the mocker's cache names blocks as they fill: each slice from a
    block boundary, chained on the last hash, with the whole prompt's images."""
    ids, images, size = case
    whole = block_hashes(ids, size, None, images)
    full = len(ids) // size
    bounds = sorted({0, full, *(min(c, full) for c in cuts)})
    sliced: list[int] = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        parent = sliced[-1] if sliced else None
        sliced.extend(block_hashes(ids[lo * size : hi * size], size, parent, images, lo * size))
    assert sliced == whole


def test_the_request_log_hashes_as_the_router_does() -> None:
    images = [image(RED, 6, 7)]
    root = chain_root(None, "tenant")
    record = Record({}, None, IDS, BS, root, images)
    logged = orjson.loads(record.encode())
    assert logged["block_hashes"] == block_hashes(IDS, BS, root, images)
    assert logged["block_hashes"] != block_hashes(IDS, BS, root)
