"""Media parts' bytes, loaded and checked safely: from a `data:`, `http(s):`
or `file:` URL (source.py: data_url.py, fetch.py over transport.py and
addresses.py, local.py) to a decoded, measured, hashed image (decode.py),
under one value of limits (limits.py), every failure one MediaError naming the
part (errors.py). A server that fetches URLs is an attack surface: the caps,
timeouts and address checks are here, in one place.

The request path does not use it yet (media parts are still a 400,
protocol/parts.py); it will, through MediaSource and ImageDecoder."""
