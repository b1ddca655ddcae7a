"""MediaLimits (rotor/media/limits.py): the defaults, its checks, and the
parsers of the command-line forms — vLLM's `--limit-mm-per-prompt` in its
JSON form and as `image=2,video=1`, with errors that say what they read."""

from __future__ import annotations

from pathlib import Path

import pytest

from rotor.media.limits import (
    DEFAULT_FORMATS,
    MediaLimits,
    parse_allowed_domains,
    parse_allowed_local_path,
    parse_limit_per_prompt,
    parse_max_media_bytes,
)


def test_the_defaults_are_the_safe_ones() -> None:
    limits = MediaLimits()
    assert limits.max_media_bytes == 20 * 1024 * 1024
    assert (limits.connect_timeout, limits.total_timeout) == (3.0, 5.0)
    assert not limits.allow_redirects and not limits.allow_internal
    assert limits.allowed_domains is None and limits.allowed_local_path is None
    assert limits.formats == DEFAULT_FORMATS == {"PNG", "JPEG", "WEBP", "GIF", "BMP"}
    assert dict(limits.limit_per_prompt) == {}


def test_limits_are_normalised_and_frozen() -> None:
    limits = MediaLimits(
        allowed_domains=frozenset({"Images.Example.", "cdn.test"}),
        formats=frozenset({"png", "Jpeg"}),
        limit_per_prompt={"image": 2},
    )
    assert limits.allowed_domains == {"images.example", "cdn.test"}
    assert limits.formats == {"PNG", "JPEG"}
    with pytest.raises(TypeError):
        limits.limit_per_prompt["image"] = 3  # type: ignore[index]
    with pytest.raises(AttributeError):
        limits.max_media_bytes = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"max_media_bytes": 0}, "max_media_bytes must be a positive integer"),
        ({"max_pixels": -1}, "max_pixels must be a positive integer"),
        ({"max_media_bytes": True}, "max_media_bytes must be a positive integer"),
        ({"connect_timeout": 0}, "connect_timeout must be a positive number of seconds"),
        ({"total_timeout": float("inf")}, "total_timeout must be a positive number"),
        ({"max_redirects": -1}, "max_redirects must be 0 or more"),
        ({"allowed_local_path": Path("relative")}, "must be an absolute directory"),
        ({"formats": frozenset({"PNG", "NOPE"})}, "formats ['NOPE'] are not image formats"),
        ({"limit_per_prompt": {"images": 1}}, "'images' is not a modality"),
        ({"limit_per_prompt": {"image": -1}}, "count must be an integer of 0 or more"),
    ],
)
def test_impossible_limits_are_refused(options: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        MediaLimits(**options)  # type: ignore[arg-type]
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ('{"image": 2}', {"image": 2}),
        ('{"image": 2, "video": 1, "audio": 0}', {"image": 2, "video": 1, "audio": 0}),
        ('{"image": {"count": 3, "width": 512, "height": 512}}', {"image": 3}),
        ('{"video": {"count": 1, "num_frames": 32}}', {"video": 1}),
        ("{}", {}),
        ("image=2,video=1", {"image": 2, "video": 1}),
        (" image = 2 , audio=0 ", {"image": 2, "audio": 0}),
        ("image=5", {"image": 5}),
    ],
)
def test_limit_per_prompt_reads_both_forms(text: str, counts: dict[str, int]) -> None:
    assert parse_limit_per_prompt(text) == counts


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "takes MODALITY=COUNT pairs"),
        ("image", "takes MODALITY=COUNT pairs"),
        ("image=", "takes MODALITY=COUNT pairs"),
        ("image=2,", "takes MODALITY=COUNT pairs"),
        ("image=two", "image's count must be an integer, not 'two'"),
        ("image=1.5", "image's count must be an integer"),
        ("image=-1", "image's count must be an integer of 0 or more, not -1"),
        ("image=1,image=2", "names 'image' twice"),
        ("images=2", "'images' is not a modality (image, video, audio)"),
        ('{"image": 2', "is not valid JSON"),
        ('["image"]', "must be an object"),
        ('{"image": "2"}', "image's count must be an integer of 0 or more, not '2'"),
        ('{"image": true}', "not True"),
        ('{"image": 2.0}', "not 2.0"),
        ('{"image": {"width": 512}}', "takes a count"),
        ('{"image": {"count": 1, "depth": 3}}', "not ['depth']"),
        ('{"text": 1}', "'text' is not a modality"),
    ],
)
def test_limit_per_prompt_errors_say_what_they_read(text: str, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_limit_per_prompt(text)
    assert says in str(caught.value)
    assert str(caught.value).startswith("--limit-mm-per-prompt")


def test_max_media_bytes_is_a_positive_number_of_bytes() -> None:
    assert parse_max_media_bytes("1048576") == 1048576
    assert parse_max_media_bytes("20_000_000") == 20_000_000
    for bad in ("0", "-5", "20MB", "1.5", ""):
        with pytest.raises(ValueError, match="positive number of bytes"):
            parse_max_media_bytes(bad)


def test_allowed_domains_are_host_names() -> None:
    assert parse_allowed_domains("Upload.Wikimedia.org, cdn.example.") == {
        "upload.wikimedia.org",
        "cdn.example",
    }
    for bad in ("", "a.example,,b.example", "https://a.example", "a.example:443", "a.example/x"):
        with pytest.raises(ValueError, match="--allowed-media-domains"):
            parse_allowed_domains(bad)


def test_the_local_path_is_an_existing_directory(tmp_path: Path) -> None:
    assert parse_allowed_local_path(str(tmp_path)) == tmp_path.resolve()
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", tmp_path / "missing"):
        with pytest.raises(ValueError, match="is not a directory"):
            parse_allowed_local_path(str(bad))
