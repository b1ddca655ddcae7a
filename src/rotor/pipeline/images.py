"""A chat request's images, loaded before its prompt is prepared: every
image part's bytes fetched or decoded from its URL (media/source.py) and
checked with Pillow (media/decode.py), all of a request's at once, off the
event loop. What can go wrong is a 400 naming the part (`messages[1].content[2]`
or the part's path in the client's own API) and saying why, before any
template runs or any engine is asked: a model that takes text only, more
images than `--limit-mm-per-prompt` allows, and every MediaError (a timeout,
an HTTP status, too many bytes, a refused address, not an image).

`ImageCounts` is what /metrics shows: fetches and bytes by where they came
from, the time they took, and failures by reason."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rotor.histogram import Histogram
from rotor.media.decode import DecodedImage, ImageDecoder
from rotor.media.errors import MediaError
from rotor.media.limits import MediaLimits
from rotor.media.source import MediaSource
from rotor.model.vision import Vision
from rotor.pipeline.errors import RequestError
from rotor.pipeline.served import ServedModel
from rotor.protocol.parts import image_parts

# the seconds buckets of a media load (a data: URL is ~ms, a fetch up to its timeout)
LOAD_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class ImageCounts:
    """Per source ("data", "http", "file"): images loaded and their bytes;
    failures by MediaError reason (and "text_only", "too_many"); load time."""

    loaded: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    seconds: Histogram = field(default_factory=lambda: Histogram(LOAD_BUCKETS))


class ImageLoader:
    """Loads and decodes a request's images under `limits`."""

    def __init__(self, source: MediaSource, decoder: ImageDecoder) -> None:
        self.source = source
        self.decoder = decoder
        self.counts = ImageCounts()

    @classmethod
    def build(cls, limits: MediaLimits) -> ImageLoader:
        return cls(MediaSource(limits), ImageDecoder(limits))

    @property
    def limits(self) -> MediaLimits:
        return self.source.limits

    async def load(self, model: ServedModel, messages: list[dict[str, Any]]) -> list[DecodedImage]:
        """The messages' images in order (none: an empty list, at no cost), or
        RequestError naming the first part at fault."""
        parts = image_parts(messages)
        if not parts:
            return []
        where = parts[0][0]
        reason = _refusal(model)
        if reason is not None:
            self.counts.failures["text_only"] += 1
            raise RequestError(f"{where} is an image: {reason}", "messages")
        limit = self.limits.limit_per_prompt.get("image")
        if limit is not None and len(parts) > limit:
            self.counts.failures["too_many"] += 1
            raise RequestError(
                f"the request holds {len(parts)} images; at most {limit} are allowed per "
                f"prompt (--limit-mm-per-prompt)",
                "messages",
            )
        vision = model.vision
        assert vision is not None  # _refusal said so
        tasks = [asyncio.ensure_future(self._one(w, url, vision)) for w, url in parts]
        try:
            return list(await asyncio.gather(*tasks))
        except MediaError as e:
            self.counts.failures[e.reason] += 1
            raise RequestError(str(e), "messages") from None
        finally:
            for task in tasks:  # the first failure ends the others' work
                task.cancel()

    async def _one(self, where: str, url: str, vision: Vision) -> DecodedImage:
        started = time.perf_counter()
        data = await self.source.load(url, where)
        image = await self.decoder.decode(data, where)
        try:  # a size the model's processor refuses (no area, too narrow) is this part's 400
            vision.expand(image.width, image.height)
        except ValueError as e:
            raise MediaError(
                where, "not_an_image", f"the model cannot take this image: {e}"
            ) from None
        kind = _source_kind(url)
        self.counts.loaded[kind] += 1
        self.counts.bytes[kind] += len(data)
        self.counts.seconds.observe(time.perf_counter() - started)
        return image

    async def aclose(self) -> None:
        await self.source.aclose()
        self.decoder.close()


def _refusal(model: ServedModel) -> str | None:
    """Why the model cannot take an image, or None when it can."""
    vision: Vision | None = model.vision
    if vision is None:
        return f"the model {model.name!r} takes text only"
    if vision.unsupported is not None:
        return vision.unsupported
    if not model.card.capabilities.images:
        return f"the engine serving {model.name!r} takes no images"
    return None


def _source_kind(url: str) -> str:
    scheme = url[:16].partition(":")[0].strip().lower()  # no copy of a data: URL
    return "http" if scheme == "https" else scheme
