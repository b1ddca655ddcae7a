"""Content parts: what a message may hold besides text. Images are served
(to a model that takes them: pipeline/images.py decides); every other media
part — audio, video, files, embeddings — is a 400 that names the part, never
dropped on the way to the template (which would answer a question the client
did not ask). One walk for every API; each passes its own part types.

Every API's image becomes one internal part, the chat `image_url` form:
`{"type": "image_url", "image_url": {"url": URL}, "where": PATH}`, where
`where` (set by the Anthropic and Responses conversions) is the part's path as
the client wrote it, so a failure to load it names the part the client sent."""

from __future__ import annotations

from typing import Any

IMAGES_ONLY = "rotor takes text and images (image_url parts), not this media"

# Chat: OpenAI's media parts and vLLM's multimodal extensions, images excepted.
CHAT_MEDIA = frozenset(
    {"input_audio", "file", "audio_url", "video_url", "image_embeds", "image_pil"}
)
ANTHROPIC_MEDIA = frozenset({"document", "search_result", "container_upload"})
RESPONSES_MEDIA = frozenset({"input_file", "input_audio"})
DETAILS = ("auto", "low", "high")


def refuse_media(items: Any, path: str, media: frozenset[str], noun: str) -> None:
    """ValueError naming the first part (`path[i]`, or nested in a part's
    `content` / `output`) whose `type` is one of `media`."""
    if not isinstance(items, list):
        return
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if isinstance(kind, str) and kind in media:
            raise ValueError(f"{path}[{i}] is {_article(kind)} {kind} {noun}: {IMAGES_ONLY}")
        for key in ("content", "output"):
            refuse_media(item.get(key), f"{path}[{i}].{key}", media, noun)


def check_chat_content(messages: list[dict[str, Any]]) -> None:
    """Chat message content given as parts: text and image_url parts; another
    media part is refused, any other part names its type."""
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        where = f"messages[{i}].content"
        refuse_media(content, where, CHAT_MEDIA, "part")
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image_url":
                check_image_part(part, f"{where}[{j}]")
                continue
            if kind != "text":
                shown = f"type {kind!r}" if isinstance(kind, str) else "no type"
                raise ValueError(
                    f"{where}[{j}] has {shown}: rotor serves text parts "
                    '({"type": "text", "text": ...}) and image_url parts'
                )
            if not isinstance(part.get("text"), str):
                raise ValueError(f"{where}[{j}].text must be a string")


def check_image_part(part: dict[str, Any], where: str) -> None:
    """An image_url part: `image_url` an object with a string `url` (or, as vLLM
    takes it, the URL itself) and an optional `detail` of auto, low, high."""
    image = part.get("image_url")
    if isinstance(image, str):
        part["image_url"] = image = {"url": image}
    if not isinstance(image, dict) or not isinstance(image.get("url"), str):
        raise ValueError(f'{where}.image_url must be an object with a string url ({{"url": ...}})')
    detail = image.get("detail")
    if detail is not None and detail not in DETAILS:
        raise ValueError(f"{where}.image_url.detail must be one of {', '.join(DETAILS)}")


def image_parts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Every image part of the messages, in order: (where, url)."""
    found: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "image_url":
                where = part.get("where") or f"messages[{i}].content[{j}]"
                found.append((str(where), part["image_url"]["url"]))
    return found


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
