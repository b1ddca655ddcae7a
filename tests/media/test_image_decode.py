"""Images decoded and measured (rotor/media/decode.py): formats allowed by
name, the pixel cap read from the header before any pixel, a corrupt,
truncated or unsupported image one MediaError, the content hash of the bytes,
and decoding in the decoder's threads, never on the event loop."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import struct
import threading
import zlib

import pytest
from PIL import Image

from rotor.media import decode
from rotor.media.decode import DecodedImage, ImageDecoder, decode_image
from rotor.media.errors import MediaError
from rotor.media.limits import MediaLimits

WHERE = "messages[1].content[2]"
LIMITS = MediaLimits()


def encoded(fmt: str, size: tuple[int, int] = (40, 20), **options: object) -> bytes:
    image = Image.new("RGB", size, (200, 30, 90))
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG of a signature, an IHDR claiming width × height, and no pixel data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def refused(data: bytes, limits: MediaLimits = LIMITS) -> MediaError:
    with pytest.raises(MediaError) as caught:
        decode_image(data, limits, WHERE)
    assert str(caught.value).startswith(f"{WHERE}: ")
    return caught.value


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF", "BMP"])
def test_each_default_format_decodes_with_its_size(fmt: str) -> None:
    data = encoded(fmt)
    image = decode_image(data, LIMITS, WHERE)
    assert image == DecodedImage(data, fmt, 40, 20, hashlib.sha256(data).hexdigest())


def test_a_format_not_allowed_is_refused_by_name() -> None:
    """TIFF decodes with Pillow, but not unless named; named, it does."""
    data = encoded("TIFF")
    error = refused(data)
    assert error.reason == "not_an_image"
    assert "not an image of BMP, GIF, JPEG, PNG or WEBP" in str(error)
    assert decode_image(data, MediaLimits(formats=frozenset({"tiff"})), WHERE).format == "TIFF"
    assert "not an image of PNG" in str(
        refused(encoded("JPEG"), MediaLimits(formats=frozenset({"PNG"})))
    )


@pytest.mark.parametrize(
    "data", [b"", b"hello, world", b"<html>not found</html>", b"\x89PNG\r\n\x1a\n"]
)
def test_bytes_that_are_no_image_are_refused(data: bytes) -> None:
    assert refused(data).reason == "not_an_image"


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF", "BMP"])
def test_a_truncated_image_is_refused(fmt: str) -> None:
    """Cut in its pixel data: the header reads, the pixels do not."""
    data = encoded(fmt, (300, 200))
    error = refused(data[: len(data) * 2 // 3])
    assert error.reason == "not_an_image"


def test_a_corrupt_image_is_refused() -> None:
    """A PNG whose pixel data is garbage (its checksums fail)."""
    data = bytearray(encoded("PNG", (300, 200)))
    start = data.index(b"IDAT") + 8
    data[start : start + 64] = os.urandom(64)
    error = refused(bytes(data))
    assert error.reason == "not_an_image"
    assert "corrupt or truncated" in str(error)


def test_an_image_over_the_pixel_cap_is_refused_from_its_header() -> None:
    """8000 × 8000 claimed, no pixel data sent: refused as too many pixels, so
    before its (missing) pixels were read — reading them would fail as truncated."""
    error = refused(png_header(8000, 8000))
    assert error.reason == "too_many_pixels"
    assert "8000 × 8000 (64000000 pixels), over the 40000000-pixel cap" in str(error)


def test_a_decompression_bomb_header_is_refused() -> None:
    """50000 × 50000 claimed (past Pillow's own bomb limit too)."""
    error = refused(png_header(50000, 50000))
    assert error.reason == "too_many_pixels"


def test_the_pixel_cap_is_exact() -> None:
    data = encoded("PNG", (40, 20))
    assert decode_image(data, MediaLimits(max_pixels=800), WHERE).width == 40
    assert refused(data, MediaLimits(max_pixels=799)).reason == "too_many_pixels"


def test_exif_orientation_turns_the_size_as_displayed() -> None:
    """Orientation 6 (a quarter turn): 40 × 20 stored is 20 × 40 shown, as
    vLLM's loader transposes it; orientation 3 (a half turn) keeps the size."""
    for orientation, size in ((6, (20, 40)), (8, (20, 40)), (3, (40, 20)), (1, (40, 20))):
        exif = Image.Exif()
        exif[0x0112] = orientation
        image = decode_image(encoded("JPEG", exif=exif), LIMITS, WHERE)
        assert (image.width, image.height) == size


def test_the_content_hash_is_of_the_bytes() -> None:
    """Bytes that decode to the same pixels but differ (another compression
    level) are other bytes, so another hash; the same bytes, the same hash."""
    fast, small = encoded("PNG", compress_level=1), encoded("PNG", compress_level=9)
    assert fast != small
    one, two = decode_image(fast, LIMITS, WHERE), decode_image(small, LIMITS, WHERE)
    assert one.content_hash != two.content_hash
    assert decode_image(bytes(fast), LIMITS, WHERE).content_hash == one.content_hash
    assert one.content_hash == decode.content_hash(fast) == hashlib.sha256(fast).hexdigest()


def big_png() -> bytes:
    """About 8 MB: noise does not compress."""
    side = 1650
    image = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=1)
    return out.getvalue()


async def test_decoding_runs_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 concurrent decodes of an 8 MB image: each runs in one of the
    decoder's threads, never the loop's; and the loop runs while they do: the
    decodes are held inside until the loop itself releases them."""
    data = big_png()
    assert len(data) > 8_000_000
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    threads: list[int] = []
    inside = asyncio.Event()
    release = threading.Event()
    real = decode.decode_image

    def watched(data: bytes, limits: MediaLimits, where: str) -> DecodedImage:
        threads.append(threading.get_ident())
        if threads[-1] == loop_thread:  # holding it here would hold the loop
            raise AssertionError("an image was decoded on the event loop's thread")
        loop.call_soon_threadsafe(inside.set)
        assert release.wait(30), "the loop never ran while an image was decoding"
        return real(data, limits, where)

    monkeypatch.setattr(decode, "decode_image", watched)
    decoder = ImageDecoder(LIMITS)
    try:
        decodes = [asyncio.ensure_future(decoder.decode(data, f"m[{i}]")) for i in range(16)]
        await asyncio.wait_for(inside.wait(), 30)
        release.set()
        images = await asyncio.gather(*decodes)
    finally:
        release.set()
        decoder.close()
    assert len(threads) == 16 and loop_thread not in threads
    assert {(i.width, i.height, i.format) for i in images} == {(1650, 1650, "PNG")}


async def test_a_decoder_says_which_part_failed() -> None:
    decoder = ImageDecoder(LIMITS, workers=1)
    try:
        with pytest.raises(MediaError) as caught:
            await decoder.decode(b"not an image", "input[0].content[3]")
        assert await decoder.decode(encoded("PNG"), WHERE) == decode_image(
            encoded("PNG"), LIMITS, WHERE
        )
    finally:
        decoder.close()
    assert str(caught.value).startswith("input[0].content[3]: the bytes are not an image")
