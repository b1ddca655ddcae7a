"""Content parts rotor cannot serve. Every engine rotor runs takes text only,
so an image, audio, video or file part is a 400 that names the part — never
dropped on the way to the template (which would answer a question the client
did not ask). One walk for every API; each passes its own part types."""

from __future__ import annotations

from typing import Any

TEXT_ONLY = "rotor cannot serve it, the model takes text only"

# Chat: OpenAI's media parts and vLLM's multimodal extensions.
CHAT_MEDIA = frozenset(
    {"image_url", "input_audio", "file", "audio_url", "video_url", "image_embeds", "image_pil"}
)
ANTHROPIC_MEDIA = frozenset({"image", "document", "search_result", "container_upload"})
RESPONSES_MEDIA = frozenset({"input_image", "input_file", "input_audio"})


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
            raise ValueError(f"{path}[{i}] is {_article(kind)} {kind} {noun}: {TEXT_ONLY}")
        for key in ("content", "output"):
            refuse_media(item.get(key), f"{path}[{i}].{key}", media, noun)


def check_chat_content(messages: list[dict[str, Any]]) -> None:
    """Chat message content given as parts: each a text part; a media part is
    refused as text-only, any other part names its type."""
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        where = f"messages[{i}].content"
        refuse_media(content, where, CHAT_MEDIA, "part")
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text":
                shown = f"type {kind!r}" if isinstance(kind, str) else "no type"
                raise ValueError(
                    f"{where}[{j}] has {shown}: rotor serves text parts "
                    '({"type": "text", "text": ...})'
                )
            if not isinstance(part.get("text"), str):
                raise ValueError(f"{where}[{j}].text must be a string")


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
