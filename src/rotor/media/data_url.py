"""An image sent inline as a `data:` URL (RFC 2397): `data:image/png;base64,…`.

The size cap is checked before anything is decoded: base64's decoded length
follows from the encoded length alone (`decoded_length`), so a data URL over
`max_media_bytes` is refused without allocating its bytes. Only base64 data
URLs of an `image/…` media type are taken (as vLLM: no percent-encoded
payloads); missing `=` padding is accepted, anything outside base64's
alphabet — whitespace included — is not."""

from __future__ import annotations

import base64
import binascii

from rotor.media.errors import MediaError

# A data URL's header (`data:image/png;base64`) is short; its payload is read in
# pieces of this many characters (a multiple of 4), so decoding megabytes never
# holds the GIL in one C call for long (the event loop waits on it otherwise)
MAX_HEADER = 256
PIECE = 1 << 18


def decoded_length(encoded: str, start: int = 0) -> int:
    """How many bytes the base64 text `encoded[start:]` decodes to, padded or
    not (each 4 characters are 3 bytes; each `=` of padding one byte fewer);
    reads its end only, never copies it."""
    tail = encoded[max(start, len(encoded) - 2) :]
    padding = len(tail) - len(tail.rstrip("="))
    return (len(encoded) - start - padding) * 3 // 4


def read_data_url(url: str, max_bytes: int, where: str) -> bytes:
    """The bytes of a base64 image data URL, or MediaError (not a data URL of an
    image, over `max_bytes`, bad base64)."""
    comma = url.find(",", 0, MAX_HEADER)
    header = url[:comma] if comma >= 0 else url[:MAX_HEADER]
    scheme, _, spec = header.partition(":")
    if scheme.strip().lower() != "data" or comma < 0:
        raise MediaError(
            where, "bad_url", "a data: URL is data:image/…;base64, and its data after the comma"
        )
    params = [p.strip().lower() for p in spec.split(";")]
    if params[-1] != "base64" or len(params) < 2:
        raise MediaError(
            where, "bad_url", "rotor takes base64 data: URLs only (data:image/png;base64,…)"
        )
    media_type = params[0]
    if not media_type.startswith("image/"):
        raise MediaError(
            where,
            "not_an_image",
            f"the data: URL's media type is {media_type or 'missing'}, not an image "
            "(image/png, image/jpeg, …)",
        )
    start = comma + 1
    size = decoded_length(url, start)
    if size > max_bytes:
        raise MediaError(
            where,
            "too_large",
            f"the data: URL's image is {size} bytes, over the {max_bytes}-byte cap "
            "(--max-media-bytes)",
        )
    end = len(url)
    pieces = []
    try:
        for at in range(start, end, PIECE):
            piece = url[at : at + PIECE]
            if at + PIECE >= end:  # the last piece: its missing padding restored
                piece += "=" * (-(end - start) % 4)
            pieces.append(base64.b64decode(piece, validate=True))
    except (binascii.Error, ValueError) as e:
        raise MediaError(
            where, "bad_url", f"the data: URL's data is not valid base64 ({e})"
        ) from None
    return b"".join(pieces)
