"""A media part's URL to its bytes (rotor/media/source.py), by scheme, and on
to a decoded image: the same image as a data: URL, fetched over http and read
from a file is the same bytes, so the same content hash."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image

from rotor.media.decode import ImageDecoder
from rotor.media.errors import MediaError
from rotor.media.limits import MediaLimits
from rotor.media.source import MediaSource

from support.media_http import FakeNetwork, MediaServer, TableResolver, body

PUBLIC = "93.184.216.34"
WHERE = "messages[1].content[2]"


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 200, 30)).save(out, "PNG")
    return out.getvalue()


async def test_the_same_image_by_any_url_is_the_same_image(tmp_path: Path) -> None:
    data = png()
    (tmp_path / "cat.png").write_bytes(data)
    server = await MediaServer(routes={"/cat.png": body(data)}).start()
    limits = MediaLimits(allowed_local_path=tmp_path)
    source = MediaSource(
        limits, TableResolver({"img.test": [PUBLIC]}), FakeNetwork({PUBLIC: server.port})
    )
    decoder = ImageDecoder(limits)
    urls = [
        "data:image/png;base64," + base64.b64encode(data).decode(),
        "http://img.test/cat.png",
        f"file://{tmp_path}/cat.png",
    ]
    try:
        images = [await decoder.decode(await source.load(url, WHERE), WHERE) for url in urls]
    finally:
        decoder.close()
        await source.aclose()
        await server.close()
    assert {(i.data, i.format, i.width, i.height, i.content_hash) for i in images} == {
        (data, "PNG", 64, 48, images[0].content_hash)
    }


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://img.test/cat.png", "the image URL's scheme is ftp:"),
        ("gopher://x", "the image URL's scheme is gopher:"),
        ("cat.png", "the image is not a URL"),
        ("", "the image is not a URL"),
        ("javascript:alert(1)", "the image URL's scheme is javascript:"),
    ],
)
async def test_a_scheme_rotor_does_not_take_is_refused(url: str, says: str) -> None:
    source = MediaSource(MediaLimits(), TableResolver({}), FakeNetwork({}))
    try:
        with pytest.raises(MediaError) as caught:
            await source.load(url, WHERE)
    finally:
        await source.aclose()
    assert caught.value.reason == "bad_url"
    assert str(caught.value).startswith(f"{WHERE}: {says}; rotor takes data:, http(s): and")


async def test_each_scheme_keeps_its_own_checks() -> None:
    """The source hands each URL to its reader with the limits: a data: URL's
    cap, file: off by default, an internal host refused."""
    resolver = TableResolver({"intranet.test": ["10.0.0.7"]})
    network = FakeNetwork({})
    source = MediaSource(MediaLimits(max_media_bytes=2), resolver, network)
    reasons = []
    try:
        for url in ("data:image/png;base64,AAAA", "file:///etc/hosts", "https://intranet.test/x"):
            with pytest.raises(MediaError) as caught:
                await source.load(url, WHERE)
            reasons.append(caught.value.reason)
    finally:
        await source.aclose()
    assert reasons == ["too_large", "local_path_not_allowed", "refused_address"]
    assert network.dialled == []
