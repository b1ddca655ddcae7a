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


def decoded_length(encoded: str) -> int:
    """How many bytes the base64 text `encoded` decodes to, padded or not
    (each 4 characters are 3 bytes; each `=` of padding one byte fewer)."""
    padding = len(encoded) - len(encoded.rstrip("="))
    return (len(encoded) - min(padding, 2)) * 3 // 4


def read_data_url(url: str, max_bytes: int, where: str) -> bytes:
    """The bytes of a base64 image data URL, or MediaError (not a data URL of an
    image, over `max_bytes`, bad base64)."""
    header, comma, payload = url.partition(",")
    scheme, _, spec = header.partition(":")
    if scheme.strip().lower() != "data" or not comma:
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
    size = decoded_length(payload)
    if size > max_bytes:
        raise MediaError(
            where,
            "too_large",
            f"the data: URL's image is {size} bytes, over the {max_bytes}-byte cap "
            "(--max-media-bytes)",
        )
    try:
        return base64.b64decode(payload + "=" * (-len(payload) % 4), validate=True)
    except (binascii.Error, ValueError) as e:
        raise MediaError(
            where, "bad_url", f"the data: URL's data is not valid base64 ({e})"
        ) from None
