"""file:// media (rotor/media/local.py): read only under allowed_local_path,
after symlinks and `..` are resolved; a FIFO, a directory or a file over the
byte cap refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rotor.media.errors import MediaError
from rotor.media.limits import MediaLimits
from rotor.media.local import read_file_url

WHERE = "messages[0].content[0]"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """allowed/ holding an image and links, and a secret beside it."""
    allowed = tmp_path / "allowed"
    (allowed / "sub").mkdir(parents=True)
    (allowed / "sub" / "cat.png").write_bytes(b"cat bytes")
    (tmp_path / "secret.txt").write_bytes(b"secret")
    (allowed / "escape.png").symlink_to(tmp_path / "secret.txt")
    (allowed / "inside.png").symlink_to(allowed / "sub" / "cat.png")
    (allowed / "up").symlink_to(tmp_path)
    return allowed


def limits(tree: Path, **options: object) -> MediaLimits:
    return MediaLimits(allowed_local_path=tree, **options)  # type: ignore[arg-type]


def refused(url: str, limits: MediaLimits) -> MediaError:
    with pytest.raises(MediaError) as caught:
        read_file_url(url, limits, WHERE)
    assert str(caught.value).startswith(f"{WHERE}: ")
    return caught.value


def test_a_file_under_the_directory_is_read(tree: Path) -> None:
    assert read_file_url(f"file://{tree}/sub/cat.png", limits(tree), WHERE) == b"cat bytes"
    assert read_file_url(f"file://localhost{tree}/sub/cat.png", limits(tree), WHERE) == b"cat bytes"
    spaced = tree / "a cat.png"
    spaced.write_bytes(b"spaced")
    assert read_file_url(f"file://{tree}/a%20cat.png", limits(tree), WHERE) == b"spaced"


def test_a_link_that_stays_inside_is_read(tree: Path) -> None:
    assert read_file_url(f"file://{tree}/inside.png", limits(tree), WHERE) == b"cat bytes"


def test_no_file_is_read_without_a_directory(tree: Path) -> None:
    error = refused(f"file://{tree}/sub/cat.png", MediaLimits())
    assert error.reason == "local_path_not_allowed"
    assert "--allowed-local-media-path" in str(error)


@pytest.mark.parametrize(
    "path",
    [
        "../secret.txt",
        "sub/../../secret.txt",
        "escape.png",
        "up/secret.txt",
        "up/allowed/../secret.txt",
    ],
)
def test_a_path_that_leaves_the_directory_is_refused(tree: Path, path: str) -> None:
    """`..` and symlinks are resolved before the path is compared."""
    error = refused(f"file://{tree}/{path}", limits(tree))
    assert error.reason == "local_path_not_allowed"
    assert "not under the directory" in str(error)


def test_a_missing_file_outside_says_outside_not_missing(tree: Path) -> None:
    """Whether a file exists outside the directory is never told."""
    error = refused(f"file://{tree.parent}/no-such-file", limits(tree))
    assert error.reason == "local_path_not_allowed"
    inside = refused(f"file://{tree}/no-such-file", limits(tree))
    assert inside.reason == "bad_url" and "No such file" in str(inside)


def test_a_host_or_a_relative_path_is_refused(tree: Path) -> None:
    assert refused(f"file://example.com{tree}/sub/cat.png", limits(tree)).reason == "bad_url"
    assert refused("file:sub/cat.png", limits(tree)).reason == "bad_url"


def test_a_directory_and_a_fifo_are_refused(tree: Path) -> None:
    """A FIFO would block a plain read forever: opened non-blocking, refused."""
    os.mkfifo(tree / "pipe")
    for name in ("sub", "pipe"):
        error = refused(f"file://{tree}/{name}", limits(tree))
        assert error.reason == "bad_url" and "not a regular file" in str(error)


def test_the_byte_cap_is_exact(tree: Path) -> None:
    url = f"file://{tree}/sub/cat.png"
    assert read_file_url(url, limits(tree, max_media_bytes=9), WHERE) == b"cat bytes"
    error = refused(url, limits(tree, max_media_bytes=8))
    assert error.reason == "too_large"
    assert "is 9 bytes, over the 8-byte cap" in str(error)
