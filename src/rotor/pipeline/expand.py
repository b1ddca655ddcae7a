"""A rendered prompt's image placeholders expanded: each image's one
placeholder token (what the chat template renders per image part) replaced by
the tokens the model's processor makes for an image of its size
(model/vision.py). The expanded prompt is the one the engine computes, so its
length is what usage counts (as vLLM's server does), the KV blocks and their
hashes are the engine's, and each image's span is recorded for the engine
(EngineImage: its bytes, its content hash, where its tokens lie)."""

from __future__ import annotations

from rotor.media.decode import DecodedImage
from rotor.model.vision import Vision
from rotor.pipeline.errors import RequestError
from rotor.protocol.engine import EngineImage


def expand_images(
    token_ids: list[int], vision: Vision, images: list[DecodedImage]
) -> tuple[list[int], list[EngineImage]]:
    """The prompt with every placeholder expanded, and its images placed;
    RequestError when the template did not render one placeholder per image."""
    placeholder = vision.placeholder_id
    at = [i for i, t in enumerate(token_ids) if t == placeholder]
    if len(at) != len(images):
        raise RequestError(
            f"the chat template rendered {len(at)} image placeholder(s) "
            f"({vision.placeholder}) for the request's {len(images)} image(s): each image "
            f"part must be rendered once, and message text must not hold the placeholder",
            "messages",
        )
    out: list[int] = []
    placed: list[EngineImage] = []
    start = 0
    for pos, image in zip(at, images, strict=True):
        out.extend(token_ids[start:pos])
        tokens = vision.expand(image.width, image.height)
        placed.append(
            EngineImage(
                content_hash=image.content_hash,
                offset=len(out),
                length=len(tokens),
                placeholder=placeholder,
                data=image.data,
            )
        )
        out.extend(tokens)
        start = pos + 1
    out.extend(token_ids[start:])
    return out, placed
