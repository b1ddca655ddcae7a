"""Images through `rotor run out=vllm` against vLLM's own OpenAI server, on
the tiny random Idefics3 of support/vllm_vlm.py (each server started once for
the module, one after the other): chat `image_url` parts as data: URLs, with
the official OpenAI client and raw HTTP, streamed and not, one image and two,
get the same greedy answers and the same `usage.prompt_tokens` (image tokens
counted as vLLM counts them) from both; a repeated image reports cached
tokens and a different one only the text before it, on both; an Anthropic
`image` block through rotor answers as vLLM's chat does."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from support.sse import data_events
from support.vllm_setup import vllm_openai_server, vllm_server
from support.vllm_vlm import TOKENS_PER_IMAGE, data_url, png

NAME = "tiny-vlm"
MAX = 12
LIMIT = ("--limit-mm-per-prompt", '{"image": 2}')
# a text block (32 tokens) before the image, so a different image still finds it cached
QUESTION = "Please look at the picture below and tell me what it shows."
A, B = png(1), png(2)


def image_part(data: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(data)}}


def ask(*images: bytes, text: str = "And what else?") -> list[dict[str, Any]]:
    parts = [{"type": "text", "text": QUESTION}, *map(image_part, images)]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def probe(url: str) -> dict[str, Any]:
    """The same image requests, whichever server is at `url`."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)

    def chat(messages: list[dict[str, Any]]) -> dict[str, Any]:
        r = client.chat.completions.create(
            model=NAME,
            messages=messages,
            temperature=0,
            max_tokens=MAX,  # type: ignore[arg-type]
        )
        assert r.usage is not None
        details = r.usage.prompt_tokens_details
        return {
            "text": r.choices[0].message.content,
            "finish": r.choices[0].finish_reason,
            "prompt_tokens": r.usage.prompt_tokens,
            "completion_tokens": r.usage.completion_tokens,
            "cached": details.cached_tokens if details is not None else None,
        }

    def streamed(messages: list[dict[str, Any]]) -> str:
        body = {"model": NAME, "messages": messages, "temperature": 0, "max_tokens": MAX}
        with httpx.stream(
            "POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=120
        ) as r:
            assert r.status_code == 200, r.read()
            chunks = data_events(r)
        return "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
        )

    return {
        "a": chat(ask(A)),
        "a_again": chat(ask(A)),
        "b": chat(ask(B)),
        "a_stream": streamed(ask(A, text="Once more?")),
        "two": chat(ask(A, B)),
        "two_swapped": chat(ask(B, A)),
        "text_only": chat([{"role": "user", "content": QUESTION}]),
    }


@pytest.fixture(scope="module")
def rotor(vlm_dir: Path) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    with vllm_server(vlm_dir, "--served-model-name", NAME, vllm=LIMIT) as server:
        seen = probe(server.url)
        # an Anthropic image block: base64, as the Messages API takes it
        source = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(A).decode()}
        content = [
            {"type": "text", "text": QUESTION},
            {"type": "image", "source": source},
            {"type": "text", "text": "And what else?"},
        ]
        message = server.anthropic().messages.create(
            model=NAME,
            max_tokens=MAX,
            extra_body={"temperature": 0},  # (this SDK's create takes no temperature)
            messages=[{"role": "user", "content": content}],  # type: ignore[list-item, misc]
        )
        anthropic = {
            "text": "".join(b.text for b in message.content if b.type == "text"),
            "input_tokens": message.usage.input_tokens,
            "cached": message.usage.cache_read_input_tokens,
        }
        yield seen, anthropic


@pytest.fixture(scope="module")
def vllm(rotor: Any, vlm_dir: Path) -> Iterator[dict[str, Any]]:
    """(After rotor's: never two engines starting at once on two cores.)"""
    with vllm_openai_server(vlm_dir, NAME, *LIMIT, "--enable-prompt-tokens-details") as url:
        yield probe(url)


def test_greedy_answers_and_prompt_tokens_equal_vllms(rotor: Any, vllm: dict[str, Any]) -> None:
    ours, _ = rotor
    for key in ("a", "b", "two", "two_swapped", "text_only"):
        assert ours[key]["text"] == vllm[key]["text"], key
        assert ours[key]["prompt_tokens"] == vllm[key]["prompt_tokens"], key
        assert ours[key]["completion_tokens"] == vllm[key]["completion_tokens"] == MAX, key
        assert ours[key]["finish"] == vllm[key]["finish"] == "length", key
    # an image counts as its TOKENS_PER_IMAGE tokens
    assert ours["two"]["prompt_tokens"] == ours["a"]["prompt_tokens"] + TOKENS_PER_IMAGE
    # the answers depend on the images (and their order), as vLLM's do
    assert len({ours[k]["text"] for k in ("a", "b", "two", "two_swapped")}) == 4


def test_a_stream_equals_vllms_stream(rotor: Any, vllm: dict[str, Any]) -> None:
    ours, _ = rotor
    assert ours["a_stream"] == vllm["a_stream"]
    assert ours["a_stream"]


def test_a_repeated_image_is_cached_and_a_different_one_is_not(
    rotor: Any, vllm: dict[str, Any]
) -> None:
    ours, _ = rotor
    full = (ours["a"]["prompt_tokens"] - 1) // 32 * 32
    assert ours["a"]["cached"] in (0, None)
    assert ours["a_again"]["cached"] == vllm["a_again"]["cached"] == full
    assert ours["a_again"]["text"] == ours["a"]["text"]
    # the text before the image only: B's image blocks are B's
    assert ours["b"]["cached"] == vllm["b"]["cached"] == 32


def test_an_anthropic_image_block_answers_as_vllms_chat(rotor: Any, vllm: dict[str, Any]) -> None:
    _, anthropic = rotor
    assert anthropic["text"] == vllm["a"]["text"]
    # (Anthropic's input_tokens leaves out the cache reads: A was asked before)
    assert anthropic["input_tokens"] + anthropic["cached"] == vllm["a"]["prompt_tokens"]
    assert anthropic["cached"] == (vllm["a"]["prompt_tokens"] - 1) // 32 * 32
