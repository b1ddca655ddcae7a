"""What loading media may do, as one frozen value (MediaLimits), and the
parsers of the command-line forms that will set it (the flags come with the
request path's wiring; their names are vLLM's and Dynamo's): a number of bytes,
a domain list, a local directory and vLLM's `--limit-mm-per-prompt` in both of
its forms. Every parser raises ValueError with a message that names what it
read and what it takes."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

MiB = 1024 * 1024

# What a prompt may hold, by vLLM's names for them
MODALITIES = ("image", "video", "audio")

# Formats decoded by default, by Pillow's names: what OpenAI takes (PNG, JPEG, WEBP,
# GIF) and BMP. TIFF, ICO, PSD, ... are refused unless named: each is a parser more.
DEFAULT_FORMATS = frozenset({"PNG", "JPEG", "WEBP", "GIF", "BMP"})

# vLLM's keys in an object of --limit-mm-per-prompt's JSON form beside "count": sizes
# its engine profiles memory with. rotor's count limit reads only "count".
_PROFILING_HINTS = frozenset({"width", "height", "num_frames", "length"})


def _empty() -> Mapping[str, int]:
    return MappingProxyType({})


@dataclass(frozen=True)
class MediaLimits:
    """What fetching and decoding a media part may do.

    - `max_media_bytes`: an image's bytes as sent (a data: URL's decoded
      payload, a fetched body, a local file), 20 MiB by default (OpenAI and
      vLLM take about 20 MB per image).
    - `connect_timeout`, `total_timeout` (seconds): one fetch's TCP connect
      (DNS resolution included), and the whole fetch, every redirect and the
      body included (5 s, vLLM's VLLM_IMAGE_FETCH_TIMEOUT).
    - `allow_redirects` (off), `max_redirects`: a redirect is followed only when
      on, each hop checked as the first URL was.
    - `allowed_domains`: host names fetched, exactly (no subdomains); None is
      any host.
    - `allow_internal`: fetch from loopback, private, link-local, shared
      (CGNAT), multicast, reserved and metadata addresses too (off).
    - `allowed_local_path`: the directory `file://` URLs may read under; None
      is no `file://` at all.
    - `max_pixels`: width × height, read from the header before any pixel is
      decoded (a decompression bomb is refused unread); 40 megapixels.
    - `formats`: the image formats decoded, by Pillow's names.
    - `limit_per_prompt`: the most parts of a modality one prompt may hold;
      a modality not named has no count limit.
    """

    max_media_bytes: int = 20 * MiB
    connect_timeout: float = 3.0
    total_timeout: float = 5.0
    allow_redirects: bool = False
    max_redirects: int = 5
    allowed_domains: frozenset[str] | None = None
    allow_internal: bool = False
    allowed_local_path: Path | None = None
    max_pixels: int = 40_000_000
    formats: frozenset[str] = DEFAULT_FORMATS
    limit_per_prompt: Mapping[str, int] = field(default_factory=_empty)

    def __post_init__(self) -> None:
        for name in ("max_media_bytes", "max_pixels"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.max_redirects < 0:
            raise ValueError(f"max_redirects must be 0 or more, not {self.max_redirects!r}")
        for name in ("connect_timeout", "total_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if self.allowed_domains is not None:
            domains = frozenset(normalize_host(d) for d in self.allowed_domains)
            object.__setattr__(self, "allowed_domains", domains)
        if self.allowed_local_path is not None and not self.allowed_local_path.is_absolute():
            raise ValueError(
                f"allowed_local_path must be an absolute directory, not {self.allowed_local_path}"
            )
        formats = frozenset(f.upper() for f in self.formats)
        unknown = sorted(formats - _pillow_formats())
        if unknown:
            raise ValueError(f"formats {unknown} are not image formats Pillow decodes")
        object.__setattr__(self, "formats", formats)
        limits = dict(self.limit_per_prompt)
        _check_counts(limits)
        object.__setattr__(self, "limit_per_prompt", MappingProxyType(limits))


def normalize_host(host: str) -> str:
    """A host name as allowed_domains compares it: lower case, no trailing dot."""
    return host.strip().lower().rstrip(".")


def parse_max_media_bytes(text: str) -> int:
    """`--max-media-bytes N`: a positive number of bytes."""
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"--max-media-bytes takes a positive number of bytes, not {text!r}")
    return value


def parse_allowed_domains(text: str) -> frozenset[str]:
    """`--allowed-media-domains a.example,b.example`: host names, comma-separated."""
    domains = [normalize_host(d) for d in text.split(",")]
    if not all(domains):
        raise ValueError(
            f"--allowed-media-domains takes host names separated by commas, not {text!r}"
        )
    for domain in domains:
        if "/" in domain or ":" in domain or " " in domain:
            raise ValueError(
                f"--allowed-media-domains takes host names (no scheme, port or path): {domain!r}"
            )
    return frozenset(domains)


def parse_allowed_local_path(text: str) -> Path:
    """`--allowed-local-media-path DIR`: an existing directory, resolved."""
    path = Path(text).expanduser()
    if not path.is_dir():
        raise ValueError(f"--allowed-local-media-path {text!r} is not a directory")
    return path.resolve()


def parse_limit_per_prompt(text: str) -> dict[str, int]:
    """`--limit-mm-per-prompt`, in vLLM's JSON form (`{"image": 2}`, or an
    object per modality with its `count`, `{"image": {"count": 2, "width": 512}}`,
    whose size hints rotor ignores) or as `image=2,video=1`. A modality is one
    of image, video, audio; a count is an integer of 0 or more (0: none)."""
    text = text.strip()
    if text.startswith(("{", "[")):
        return _parse_json_limits(text)
    counts: dict[str, int] = {}
    for item in text.split(","):
        name, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not name or not value:
            raise ValueError(
                f"--limit-mm-per-prompt takes MODALITY=COUNT pairs separated by commas "
                f'(image=2,video=1) or JSON ({{"image": 2}}), not {text!r}'
            )
        if name in counts:
            raise ValueError(f"--limit-mm-per-prompt names {name!r} twice")
        try:
            counts[name] = int(value)
        except ValueError:
            raise ValueError(
                f"--limit-mm-per-prompt: {name}'s count must be an integer, not {value!r}"
            ) from None
    _check_counts(counts)
    return counts


def _parse_json_limits(text: str) -> dict[str, int]:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--limit-mm-per-prompt is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError('--limit-mm-per-prompt\'s JSON must be an object ({"image": 2})')
    counts: dict[str, Any] = {}
    for name, value in data.items():
        if isinstance(value, dict):
            extra = sorted(set(value) - {"count"} - _PROFILING_HINTS)
            if "count" not in value or extra:
                raise ValueError(
                    f"--limit-mm-per-prompt: {name}'s object takes a count "
                    f'({{"count": 2}}), and vLLM\'s width, height, num_frames, length'
                    + (f"; not {extra}" if extra else "")
                )
            value = value["count"]
        counts[name] = value
    _check_counts(counts)
    return counts


def _check_counts(counts: Mapping[str, Any]) -> None:
    for name, count in counts.items():
        if name not in MODALITIES:
            raise ValueError(
                f"--limit-mm-per-prompt: {name!r} is not a modality (image, video, audio)"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(
                f"--limit-mm-per-prompt: {name}'s count must be an integer of 0 or more, "
                f"not {count!r}"
            )


def _pillow_formats() -> frozenset[str]:
    from PIL import Image

    Image.init()
    return frozenset(Image.OPEN)
