"""Where an image's bytes come from: a media part's URL, by its scheme, to the
bytes as sent — `data:` (data_url.py), `http:` and `https:` (fetch.py),
`file:` (local.py, only under allowed_local_path). Any other scheme is
refused. Decoding a data URL's base64 and reading a file run off the event
loop; a fetch is async. Every failure is a MediaError naming the part."""

from __future__ import annotations

import asyncio

import httpcore

from rotor.media.addresses import Resolver, system_resolver
from rotor.media.data_url import read_data_url
from rotor.media.errors import MediaError
from rotor.media.fetch import Fetcher
from rotor.media.limits import MediaLimits
from rotor.media.local import read_file_url


class MediaSource:
    """A media URL's bytes under `limits`. `resolver` and `network` are the
    fetcher's, for tests (fetch.Fetcher)."""

    def __init__(
        self,
        limits: MediaLimits,
        resolver: Resolver = system_resolver,
        network: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.limits = limits
        self._fetcher = Fetcher(limits, resolver, network)

    async def load(self, url: str, where: str) -> bytes:
        """The bytes `url` names, or MediaError saying `where` and why."""
        scheme, colon, _ = url[:16].partition(":")  # never a copy of a data: URL's megabytes
        scheme = scheme.strip().lower() if colon else ""
        if scheme == "data":
            return await asyncio.to_thread(read_data_url, url, self.limits.max_media_bytes, where)
        if scheme in ("http", "https"):
            return await self._fetcher.fetch(url, where)
        if scheme == "file":
            return await asyncio.to_thread(read_file_url, url, self.limits, where)
        shown = (
            f"the image URL's scheme is {scheme}:" if scheme.isalnum() else "the image is not a URL"
        )
        raise MediaError(
            where,
            "bad_url",
            f"{shown}; rotor takes data:, http(s): and (under "
            "--allowed-local-media-path) file: URLs",
        )

    async def aclose(self) -> None:
        await self._fetcher.aclose()
