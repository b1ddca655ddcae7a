"""The one error of loading media: which part (`where`, as the request spells
it, `messages[1].content[2]`), why in words, and why as a reason a metric can
count. Whatever goes wrong between a part's URL and its decoded image — a
refused address, a timeout, an HTTP status, too many bytes, bytes that are not
an image — is a MediaError, never another exception: the request path turns
it into a 400 naming the part."""

from __future__ import annotations

from typing import Literal

Reason = Literal[
    "bad_url",  # not a URL rotor fetches: its scheme, a malformed data: URL, bad base64
    "too_large",  # over max_media_bytes (data:, a fetch, a local file)
    "timeout",  # the connect or the total timeout of a fetch
    "http_status",  # the server answered 400 or more (or a redirect with no Location)
    "fetch_failed",  # the connection failed: refused, reset, DNS, TLS, HTTP protocol
    "refused_address",  # the host resolves to a loopback, private, link-local... address
    "domain_not_allowed",  # the host is not in allowed_domains
    "redirect_refused",  # a redirect while redirects are off, or too many
    "local_path_not_allowed",  # file:// off, or outside allowed_local_path
    "not_an_image",  # not an image media type, corrupt, truncated, or a format not allowed
    "too_many_pixels",  # width × height over max_pixels (a decompression bomb)
]


class MediaError(ValueError):
    """A media part that cannot be used: `str(error)` is `"{where}: {why}"`."""

    def __init__(self, where: str, reason: Reason, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where
        self.reason: Reason = reason
        self.why = why
