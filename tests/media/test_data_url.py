"""data: URLs (rotor/media/data_url.py): the byte cap checked from the encoded
length before anything is decoded, base64 and image media types only."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rotor.media import data_url
from rotor.media.data_url import decoded_length, read_data_url
from rotor.media.errors import MediaError

WHERE = "messages[0].content[1]"


def url_of(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


@given(st.binary(max_size=300), st.booleans())
def test_the_decoded_length_follows_from_the_encoded_length(data: bytes, padded: bool) -> None:
    """For any bytes, padded or with the padding left off."""
    encoded = base64.b64encode(data).decode()
    if not padded:
        encoded = encoded.rstrip("=")
    assert decoded_length(encoded) == len(data)


@given(st.binary(min_size=1, max_size=300), st.booleans())
def test_the_cap_is_exact(data: bytes, padded: bool) -> None:
    """At the cap the image is taken; one byte under the image's length it is not."""
    encoded = base64.b64encode(data).decode()
    if not padded:
        encoded = encoded.rstrip("=")
    url = f"data:image/png;base64,{encoded}"
    assert read_data_url(url, len(data), WHERE) == data
    with pytest.raises(MediaError) as caught:
        read_data_url(url, len(data) - 1, WHERE)
    assert caught.value.reason == "too_large"
    assert f"is {len(data)} bytes, over the {len(data) - 1}-byte cap" in str(caught.value)


def test_an_image_over_the_cap_is_refused_without_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 50 MB image against the 20 MiB default: refused, base64 never decoded."""
    calls: list[int] = []
    real = base64.b64decode

    def counting(payload: str, validate: bool = False) -> bytes:
        calls.append(len(payload))
        return real(payload, validate=validate)

    monkeypatch.setattr(data_url.base64, "b64decode", counting)
    url = "data:image/png;base64," + "A" * 66_666_667 + "="  # 50 000 000 bytes
    with pytest.raises(MediaError) as caught:
        read_data_url(url, 20 * 1024 * 1024, WHERE)
    assert caught.value.reason == "too_large"
    assert str(caught.value) == (
        f"{WHERE}: the data: URL's image is 50000000 bytes, over the 20971520-byte cap "
        "(--max-media-bytes)"
    )
    assert calls == []
    assert read_data_url(url_of(b"small"), 100, WHERE) == b"small"
    assert len(calls) == 1


@pytest.mark.parametrize(
    "url",
    [
        "data:image/jpeg;base64,/9j/",
        "data:image/png;name=x.png;base64,/9j/",
        "DATA:IMAGE/PNG;BASE64,/9j/",
    ],
)
def test_a_base64_image_data_url_is_read(url: str) -> None:
    assert read_data_url(url, 100, WHERE) == base64.b64decode("/9j/")


@pytest.mark.parametrize(
    ("url", "reason", "says"),
    [
        ("data:image/png;base64,ab$d", "bad_url", "not valid base64"),
        ("data:image/png;base64,ab d", "bad_url", "not valid base64"),
        ("data:image/png;base64,abcde", "bad_url", "not valid base64"),
        ("data:image/png;base64,Zm9v\n", "bad_url", "not valid base64"),
        ("data:image/png;base64,é", "bad_url", "not valid base64"),
        ("data:image/png,%89PNG", "bad_url", "base64 data: URLs only"),
        ("data:base64,Zm9v", "bad_url", "base64 data: URLs only"),
        ("data:image/png;base64", "bad_url", "after the comma"),
        ("data:text/plain;base64,Zm9v", "not_an_image", "media type is text/plain, not an image"),
        ("data:;base64,Zm9v", "not_an_image", "media type is missing"),
        ("data:application/pdf;base64,Zm9v", "not_an_image", "application/pdf"),
    ],
)
def test_a_data_url_that_is_not_a_base64_image_says_why(url: str, reason: str, says: str) -> None:
    with pytest.raises(MediaError) as caught:
        read_data_url(url, 1000, WHERE)
    assert caught.value.reason == reason
    assert str(caught.value).startswith(f"{WHERE}: ")
    assert says in str(caught.value)
