"""A request's images as vLLM takes them: the prompt with one placeholder per
image, the decoded images, and their content hashes as `multi_modal_uuids`.

rotor's EngineRequest carries the expanded prompt (each image's placeholder
already replaced by all its tokens, so counts, routing and block hashes are
the engine's own); vLLM 0.32 wants one placeholder per image and expands it
itself (given the expanded form it expands the first placeholder again and
answers wrongly, without an error), so it gets `collapsed_ids`.

The images are decoded by vLLM's own loader (`ImageMediaIO`: EXIF turned,
converted to RGB, as its OpenAI server does), so an answer through rotor is
vLLM's answer to the same image; large images decode in a thread, off the
event loop. Each image's uuid is its content hash (SHA-256 of its bytes):
vLLM keys its processor and encoder caches and its KV block hashes by it, so
it must name the bytes, never a URL or a client's id.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rotor.protocol.engine import EngineError, EngineRequest, collapsed_ids

# images of at most this many bytes in all decode on the event loop (a
# thread's hop costs more than decoding a small PNG)
INLINE_BYTES = 64 * 1024


async def image_prompt(request: EngineRequest) -> dict[str, Any]:
    """vLLM's TokensPrompt (a dict) for a request with images, or EngineError
    naming `messages` for an image that cannot be read."""
    images = request.images
    blobs: list[tuple[str, bytes]] = []
    for i, image in enumerate(images):
        if image.data is None:
            raise EngineError(
                f"messages: image {i}'s bytes did not reach this vLLM worker "
                "(vLLM computes a prompt's image positions from the image itself)",
                "internal",
            )
        blobs.append((image.content_hash, image.data))
    if sum(len(data) for _, data in blobs) <= INLINE_BYTES:
        decoded = _decode_all(blobs)
    else:
        decoded = await asyncio.to_thread(_decode_all, blobs)
    return {
        "prompt_token_ids": collapsed_ids(list(request.token_ids), images),
        "multi_modal_data": {"image": decoded},
        "multi_modal_uuids": {"image": [image.content_hash for image in images]},
    }


def _decode_all(blobs: list[tuple[str, bytes]]) -> list[Any]:
    """Each (content hash, bytes) as a PIL image, as vLLM's own loader reads it
    (one decode per distinct image); EngineError naming the one that fails."""
    from vllm.multimodal.media import ImageMediaIO

    loader = ImageMediaIO()
    seen: dict[str, Any] = {}
    out: list[Any] = []
    for i, (key, data) in enumerate(blobs):
        image = seen.get(key)
        if image is None:
            try:
                image = seen[key] = loader.load_bytes(data).media
            except ValueError as e:
                raise EngineError(
                    f"messages: image {i} cannot be read: {e}", "refused", "messages"
                ) from None
        out.append(image)
    return out
