"""An image's bytes checked and measured with Pillow, off the event loop.

`decode_image` opens the bytes with only the allowed formats' decoders, reads
the size from the header and refuses an image over `max_pixels` before any
pixel is decoded (a decompression bomb costs its header), then decodes the
first frame's pixels whole — so a corrupt or truncated image is found here,
as a MediaError, and never later in an engine. Whatever Pillow raises on
bytes it cannot read (it raises many kinds) becomes that one error.

What it returns is what later stages need: the bytes as sent (the engine gets
those, never decoded pixels), Pillow's format name, the width and height as
the image is displayed (EXIF orientation applied, as vLLM's loader does, so a
token count agrees with vLLM's), and a content hash of the bytes.

The content hash is SHA-256 of the bytes, not of decoded pixels: the same
image sent as a data: URL and fetched from a URL is the same bytes, so the
same hash, and hashing bytes needs no decode. It is cryptographic on purpose:
it is the image's identity across clients (the router's index, the KV block
hash, vLLM's `multi_modal_uuids`, whose cache answers by it), and a hash a
client could collide on purpose (xxhash is not built to resist that) would let
one client's image answer another's request.

`ImageDecoder` runs `decode_image` in its own few threads (Pillow decodes
without the GIL), so the event loop stays free while large images decode and
a burst of them never takes the loop's default executor from DNS lookups."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from rotor.media.errors import MediaError
from rotor.media.limits import MediaLimits

# EXIF orientations 5-8 turn the image a quarter: displayed, width and height swap
_ORIENTATION = 0x0112
_QUARTER_TURNS = frozenset({5, 6, 7, 8})


@dataclass(frozen=True)
class DecodedImage:
    """A checked image: `data` as sent, `format` (Pillow's name, "PNG"), the
    displayed `width` and `height`, and `content_hash` (SHA-256 of `data`, hex)."""

    data: bytes
    format: str
    width: int
    height: int
    content_hash: str


def content_hash(data: bytes) -> str:
    """An image's identity: SHA-256 of its bytes as sent, in hex."""
    return hashlib.sha256(data).hexdigest()


def decode_image(data: bytes, limits: MediaLimits, where: str) -> DecodedImage:
    """`data` decoded and measured under `limits` (blocking: call it off the
    loop, as ImageDecoder does), or MediaError."""
    allowed = sorted(limits.formats)
    try:
        with Image.open(io.BytesIO(data), formats=allowed) as image:
            width, height = image.size
            if width * height > limits.max_pixels:
                raise MediaError(
                    where,
                    "too_many_pixels",
                    f"the image is {width} × {height} ({width * height} pixels), over the "
                    f"{limits.max_pixels}-pixel cap",
                )
            image.load()
            found = image.format or "image"
            if image.getexif().get(_ORIENTATION) in _QUARTER_TURNS:
                width, height = height, width
    except MediaError:
        raise
    except Image.DecompressionBombError:
        raise MediaError(
            where,
            "too_many_pixels",
            f"the image is over Pillow's decompression-bomb limit and the "
            f"{limits.max_pixels}-pixel cap",
        ) from None
    except UnidentifiedImageError:
        raise MediaError(
            where, "not_an_image", f"the bytes are not an image of {_names(allowed)}"
        ) from None
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError, EOFError, ...
        raise MediaError(
            where, "not_an_image", f"the image is corrupt or truncated ({_reason(e)})"
        ) from None
    return DecodedImage(data, found, width, height, content_hash(data))


class ImageDecoder:
    """decode_image in `workers` threads of its own (default: up to 4)."""

    def __init__(self, limits: MediaLimits, workers: int | None = None) -> None:
        self.limits = limits
        count = workers if workers is not None else min(4, os.cpu_count() or 1)
        self._executor = ThreadPoolExecutor(count, thread_name_prefix="rotor-media")

    async def decode(self, data: bytes, where: str) -> DecodedImage:
        """`data` decoded in one of the decoder's threads, or MediaError."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, decode_image, data, self.limits, where)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _names(formats: list[str]) -> str:
    return formats[0] if len(formats) == 1 else f"{', '.join(formats[:-1])} or {formats[-1]}"


def _reason(error: Exception) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
