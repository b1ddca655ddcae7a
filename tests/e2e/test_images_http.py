"""Images end to end: a Qwen2-VL-shaped model served by the mocker under
`rotor run`, asked with the official `openai` and `anthropic` SDKs and raw
HTTP. The mocker's scripted output `{images}` says what its engine request
carried (each image's content hash, span and byte count), so each test sees
what reached the engine; usage, /tokenize and cached tokens are checked
against it. Images come as data: URLs, from a loopback HTTP server (with
`--allow-internal-media`) and from files under `--allowed-local-media-path`;
every way one can fail is a 400 naming the part."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from PIL import Image

from support.server import Server, rotor_server
from support.vlm import write_qwen2_vl_dir

MODEL = "qwen2-vl"
SAY_IMAGES = {"output": "{images}"}
MAX_BYTES = 3_000_000


def png(width: int, height: int, color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, "PNG")
    return buf.getvalue()


RED = png(64, 48, (200, 10, 10))
BLUE = png(64, 48, (10, 10, 200))
TALL = png(56, 112, (10, 200, 10))


def data_url(data: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Images(http.server.BaseHTTPRequestHandler):
    """/red.png, /blue.png; /missing (404); /slow (never answers in time); /moved (302)."""

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path in ("/red.png", "/blue.png"):
            data = RED if self.path == "/red.png" else BLUE
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif self.path == "/slow":
            time.sleep(3)
            self.send_response(200)
            self.end_headers()
        elif self.path == "/moved":
            self.send_response(302)
            self.send_header("location", "/red.png")
            self.send_header("content-length", "0")
            self.end_headers()
        else:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def images_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vlm") / MODEL
    write_qwen2_vl_dir(path)
    return path


@pytest.fixture(scope="module")
def local_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("media")
    (path / "red.png").write_bytes(RED)
    return path


@pytest.fixture(scope="module")
def server(model_dir: Path, local_dir: Path) -> Iterator[Server]:
    with rotor_server(
        "out=mocker",
        "--speedup-ratio",
        "0",
        "--model-path",
        str(model_dir),
        "--allow-internal-media",
        "--allowed-local-media-path",
        str(local_dir),
        "--max-media-bytes",
        str(MAX_BYTES),
        "--media-timeout",
        "1",
        "--limit-mm-per-prompt",
        "image=3",
    ) as srv:
        yield srv


def ask(*parts: dict[str, Any], text: str = "What is in the picture?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": text}, *parts]}]


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def seen(text: str | None) -> list[dict[str, Any]]:
    """What the engine request carried, as the mocker's `{images}` says it."""
    assert text is not None
    found = json.loads(text)
    assert isinstance(found, list)
    return found


def chat(server: Server, messages: list[dict[str, Any]]) -> Any:
    return server.openai().chat.completions.create(
        model=MODEL, messages=messages, max_tokens=4000, extra_body={"mock": SAY_IMAGES}
    )


def error_of(server: Server, messages: list[dict[str, Any]]) -> dict[str, Any]:
    r = httpx.post(
        server.v1 + "/chat/completions",
        json={"model": MODEL, "messages": messages, "max_tokens": 4},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert isinstance(error, dict)
    return error


# -- what reaches the engine --------------------------------------------------------


def test_an_image_reaches_the_engine_with_its_bytes_hash_and_span(server: Server) -> None:
    answer = chat(server, ask(image(data_url(RED))))
    (got,) = seen(answer.choices[0].message.content)
    assert got["hash"] == sha(RED) and got["bytes"] == len(RED)
    assert got["tokens"] > 1 and got["offset"] > 0
    # usage counts the image's tokens: the prompt is the expanded one
    assert answer.usage.prompt_tokens > got["offset"] + got["tokens"]
    assert len(server.tokenize(messages=ask(image(data_url(RED))))) == answer.usage.prompt_tokens


def test_images_keep_their_order_and_their_own_sizes(server: Server) -> None:
    answer = chat(server, ask(image(data_url(RED)), image(data_url(TALL)), image(data_url(BLUE))))
    got = seen(answer.choices[0].message.content)
    assert [g["hash"] for g in got] == [sha(RED), sha(TALL), sha(BLUE)]
    # the model's rule (Qwen2-VL's smart_resize, 28-pixel cells merged 2 × 2):
    # 64 × 48 rounds to 56 × 56, 4 tokens; 56 × 112 is 8
    assert [g["tokens"] for g in got] == [4, 8, 4]
    assert got[0]["offset"] + got[0]["tokens"] <= got[1]["offset"]
    assert got[1]["offset"] + got[1]["tokens"] <= got[2]["offset"]


def test_the_same_image_from_a_url_a_file_and_a_data_url_is_one_image(
    server: Server, images_url: str, local_dir: Path
) -> None:
    urls = [data_url(RED), f"{images_url}/red.png", (local_dir / "red.png").as_uri()]
    found = [seen(chat(server, ask(image(u))).choices[0].message.content)[0] for u in urls]
    assert found[0] == found[1] == found[2]


def test_a_repeated_image_is_cached_and_a_different_one_is_not(server: Server) -> None:
    text = "Describe this one carefully, please, in a few words."
    first = chat(server, ask(image(data_url(TALL)), text=text))
    (got,) = seen(first.choices[0].message.content)
    end = got["offset"] + got["tokens"]
    again = chat(server, ask(image(data_url(TALL)), text=text))
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached is not None and cached >= end - 16  # every full block of the image hits
    other = chat(server, ask(image(data_url(png(56, 112, (1, 2, 3)))), text=text))
    missed = other.usage.prompt_tokens_details.cached_tokens or 0
    assert missed <= got["offset"]  # it diverges at the first block holding image tokens


def test_a_streamed_answer_carries_what_the_engine_saw(server: Server) -> None:
    stream = server.openai().chat.completions.create(
        model=MODEL,
        messages=ask(image(data_url(BLUE))),
        max_tokens=4000,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"mock": SAY_IMAGES},
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        usage = chunk.usage or usage
    (got,) = seen(text)
    assert got["hash"] == sha(BLUE)
    assert usage is not None and usage.prompt_tokens > got["tokens"]


def test_anthropic_image_blocks_base64_and_url(server: Server, images_url: str) -> None:
    client = server.anthropic()
    blocks: list[dict[str, Any]] = [
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/png",
                "data": base64.b64encode(RED).decode(),
            },
        },
        {"type": "image", "source": {"type": "url", "url": f"{images_url}/blue.png"}},
        {"type": "text", "text": "Compare them."},
    ]
    messages: Any = [{"role": "user", "content": blocks}]
    answer = client.messages.create(
        model=MODEL, max_tokens=4000, messages=messages, extra_body={"mock": SAY_IMAGES}
    )
    got = seen(answer.content[0].text)  # type: ignore[union-attr]
    assert [g["hash"] for g in got] == [sha(RED), sha(BLUE)]
    counted = client.messages.count_tokens(model=MODEL, messages=messages)
    # Anthropic's input_tokens are the ones its cache did not hold
    usage = answer.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)


def test_an_anthropic_image_that_fails_names_its_block(server: Server) -> None:
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        server.anthropic().messages.create(
            model=MODEL,
            max_tokens=8,
            messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, bad]}],  # type: ignore[list-item]
        )
    assert "messages[0].content[1]: " in str(caught.value)


def test_responses_input_image(server: Server) -> None:
    client = server.openai()
    answer = client.responses.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is it?"},
                    {"type": "input_image", "image_url": data_url(RED), "detail": "low"},
                ],
            }
        ],
        extra_body={"mock": SAY_IMAGES},
        store=False,
    )
    (got,) = seen(answer.output_text)
    assert got["hash"] == sha(RED)
    with pytest.raises(openai.BadRequestError, match="file_id"):
        client.responses.create(
            model=MODEL,
            input=[{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}],
            store=False,
        )


# -- every failure is a 400 naming the part --------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        (data_url(b"not an image at all"), "not an image"),
        (data_url(RED[: len(RED) // 2]), "corrupt or truncated"),
        (data_url(b"\0" * (MAX_BYTES + 10)), f"over the {MAX_BYTES}-byte cap"),
        ("/slow", "took over 1 s"),
        ("/missing", "HTTP 404"),
        ("/moved", "redirect"),
        ("ftp://example.com/a.png", "scheme"),
        (data_url(png(1, 300, (9, 9, 9))), "the model cannot take this image"),
    ],
    ids=[
        "not-an-image",
        "truncated",
        "too-large",
        "timeout",
        "http-404",
        "redirect",
        "scheme",
        "aspect-ratio",
    ],
)
def test_an_image_that_cannot_be_used_is_a_400_naming_the_part(
    server: Server, images_url: str, url: str, why: str
) -> None:
    if url.startswith("/"):
        url = images_url + url
    error = error_of(server, ask(image(data_url(RED)), image(url)))
    assert error["message"].startswith("messages[0].content[2]: "), error
    assert why in error["message"], error
    assert error["param"] == "messages"


def test_a_file_outside_the_allowed_directory_is_refused(server: Server, tmp_path: Path) -> None:
    outside = tmp_path / "red.png"
    outside.write_bytes(RED)
    error = error_of(server, ask(image(outside.as_uri())))
    assert error["message"].startswith("messages[0].content[1]: ")


def test_more_images_than_the_limit_is_a_400_with_the_count(server: Server) -> None:
    error = error_of(server, ask(*[image(data_url(RED))] * 4))
    assert "4 images" in error["message"] and "at most 3" in error["message"]


def test_a_video_part_is_a_400_naming_it(server: Server) -> None:
    video = {"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}
    error = error_of(server, ask(video))
    assert error["message"].startswith("messages[0].content[1] is a video_url part")


def test_the_metrics_count_loads_and_failures(server: Server) -> None:
    chat(server, ask(image(data_url(RED))))
    error_of(server, ask(image(data_url(b"nope"))))
    assert server.metric("rotor_media_images_total", 'source="data"') >= 1
    assert server.metric("rotor_media_bytes_total", 'source="data"') >= len(RED)
    assert server.metric("rotor_media_failures_total", 'reason="not_an_image"') >= 1


# -- internal addresses are refused unless allowed -------------------------------------


def test_a_loopback_url_is_refused_by_default(model_dir: Path, images_url: str) -> None:
    with rotor_server(
        "out=mocker", "--speedup-ratio", "0", "--model-path", str(model_dir)
    ) as strict:
        error = error_of(strict, ask(image(f"{images_url}/red.png")))
    assert error["message"].startswith("messages[0].content[1]: ")
    assert "127.0.0.1" in error["message"]
