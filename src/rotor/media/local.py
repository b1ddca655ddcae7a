"""An image read from a `file://` URL, only under `allowed_local_path` (vLLM's
`--allowed-local-media-path`); without that directory no local file is read.

The path is resolved (symlinks followed, `..` collapsed) before it is
compared, so neither a `..` nor a symlink inside the directory reaches a file
outside it; a path outside is refused before anything is said about whether
it exists. The file is opened without following a symlink at its last
component (a file swapped for a link after the check is refused), must be a
regular file (a FIFO would block the read), and is read no further than the
byte cap allows."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

from rotor.media.errors import MediaError
from rotor.media.limits import MediaLimits

_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def read_file_url(url: str, limits: MediaLimits, where: str) -> bytes:
    """The bytes of the local file `url` names, or MediaError."""
    root = limits.allowed_local_path
    if root is None:
        raise MediaError(
            where,
            "local_path_not_allowed",
            "rotor reads no local file unless given a directory (--allowed-local-media-path)",
        )
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise MediaError(
            where, "bad_url", f"a file: URL names a local path, not a host ({parts.netloc})"
        )
    path = Path(unquote(parts.path))
    if not path.is_absolute():
        raise MediaError(where, "bad_url", "a file: URL's path must be absolute (file:///…)")
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise MediaError(
            where,
            "local_path_not_allowed",
            f"{path} is not under the directory media is read from (--allowed-local-media-path)",
        )
    cap = limits.max_media_bytes
    try:
        fd = os.open(resolved, _FLAGS)
    except OSError as e:
        raise MediaError(where, "bad_url", f"cannot read {path}: {e.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MediaError(where, "bad_url", f"{path} is not a regular file")
        # the size before the read, and the read itself capped: a file that grows between
        data = _read(fd, cap + 1) if info.st_size <= cap else b""
    finally:
        os.close(fd)
    size = max(info.st_size, len(data))
    if size > cap:
        raise MediaError(
            where,
            "too_large",
            f"{path} is {size} bytes, over the {cap}-byte cap (--max-media-bytes)",
        )
    return data


def _read(fd: int, most: int) -> bytes:
    chunks = []
    while most > 0:
        chunk = os.read(fd, min(most, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        most -= len(chunk)
    return b"".join(chunks)
