"""Images on the chat page, in a real headless chromium against a mocker that
serves a vision-language model: a picked or pasted image is shown before it
is sent and in the conversation, travels as an `image_url` part with its
data: URL, and reaches the engine byte for byte (the mocker's `{images}`
names what it saw). A failed turn gives the images back; later turns carry
them in the history."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image
from playwright.sync_api import BrowserContext, expect

from support.browser import ChatPage, chromium
from support.server import Server, rotor_server
from support.vlm import write_qwen2_vl_dir

pytestmark = pytest.mark.browser  # drives chromium: `-m "not browser"` leaves it out

SAW = {"mock": {"output": "{images}", "end": "eos"}}  # the answer: the images the engine got


def png(color: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


RED, BLUE = png((200, 30, 30)), png((20, 40, 210), (24, 24))


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = tmp_path_factory.mktemp("vlm") / "qwen2-vl"
    write_qwen2_vl_dir(model)
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--model-path", str(model)) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with chromium() as context:
        yield context


@pytest.fixture
def chat(server: Server, browser: BrowserContext) -> Iterator[ChatPage]:
    page = ChatPage(browser, server.url)
    yield page
    page.close()


def pick(chat: ChatPage, *files: tuple[str, bytes, str]) -> None:
    """Choose files in the picker the + button opens."""
    with chat.page.expect_file_chooser() as chooser:
        chat.page.click("#attach")
    chooser.value.set_files(
        [{"name": name, "mimeType": mime, "buffer": data} for name, data, mime in files]
    )


def paste(chat: ChatPage, data: bytes) -> None:
    """A clipboard paste of one PNG into the message box."""
    chat.page.evaluate(
        """(b64) => {
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const dt = new DataTransfer();
            dt.items.add(new File([bytes], "pasted.png", { type: "image/png" }));
            const ev = new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true });
            document.getElementById("input").dispatchEvent(ev);
        }""",
        base64.b64encode(data).decode(),
    )


def seen(answer: Any) -> list[dict[str, Any]]:
    """What the engine said it got: one entry per image, in prompt order."""
    images: list[dict[str, Any]] = json.loads(answer.locator(".content").text_content())
    return images


def test_a_picked_image_is_shown_and_sent_as_an_image_url_part(chat: ChatPage) -> None:
    chat.advanced(SAW)
    pick(chat, ("red.png", RED, "image/png"))
    pending = chat.page.locator("#attachments img.thumb")
    expect(pending).to_have_count(1)
    assert pending.get_attribute("src") == data_url(RED)
    answer = chat.send("What is in this picture?")
    [body] = chat.chat_bodies()
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": data_url(RED)}},
                {"type": "text", "text": "What is in this picture?"},
            ],
        }
    ]
    # the engine got the very bytes, as the one image of the prompt
    [image] = seen(answer)
    assert (image["hash"], image["bytes"]) == (sha(RED), len(RED))
    assert image["tokens"] > 0
    # the conversation shows it, decoded at its size; the composer is empty again
    shown = chat.page.locator(".msg.user img.thumb")
    expect(shown).to_have_count(1)
    assert shown.get_attribute("src") == data_url(RED)
    assert shown.evaluate("img => [img.complete, img.naturalWidth, img.naturalHeight]") == [
        True,
        40,
        30,
    ]
    assert shown.is_visible()
    assert chat.page.locator(".msg.user .text").text_content() == "What is in this picture?"
    expect(pending).to_have_count(0)
    assert chat.console == [] and chat.foreign_requests() == []


def test_a_pasted_image_is_sent_and_later_turns_carry_it(chat: ChatPage) -> None:
    chat.advanced(SAW)
    paste(chat, BLUE)
    expect(chat.page.locator("#attachments img.thumb")).to_have_count(1)
    assert chat.page.input_value("#input") == ""  # an image pastes as an image, not as text
    first = chat.send("Describe it.")
    [image] = seen(first)
    assert image["hash"] == sha(BLUE)
    pick(chat, ("red.png", RED, "image/png"))
    second = chat.send("And this one?")
    one, two = chat.chat_bodies()
    assert two["messages"][0] == one["messages"][0]  # the first turn, its image and all
    assert two["messages"][2]["content"][0] == {
        "type": "image_url",
        "image_url": {"url": data_url(RED)},
    }
    assert [i["hash"] for i in seen(second)] == [sha(BLUE), sha(RED)]
    assert chat.page.locator(".msg.user img.thumb").count() == 2


def test_several_images_an_image_alone_and_removing_one(chat: ChatPage) -> None:
    chat.advanced(SAW)
    pick(chat, ("red.png", RED, "image/png"), ("blue.png", BLUE, "image/png"))
    expect(chat.page.locator("#attachments img.thumb")).to_have_count(2)
    chat.page.click("#attachments button >> nth=0")  # remove the red one
    thumbs = chat.page.locator("#attachments img.thumb")
    expect(thumbs).to_have_count(1)
    assert thumbs.get_attribute("src") == data_url(BLUE)
    pick(chat, ("red.png", RED, "image/png"))
    chat.page.click("#send")  # no text: the images are the message
    chat.wait_idle()
    [body] = chat.chat_bodies()
    assert body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": data_url(BLUE)}},
        {"type": "image_url", "image_url": {"url": data_url(RED)}},
    ]
    answer = chat.page.locator(".msg.assistant").first
    assert [i["hash"] for i in seen(answer)] == [sha(BLUE), sha(RED)]


def test_a_file_that_is_no_image_is_not_attached(chat: ChatPage) -> None:
    pick(chat, ("notes.txt", b"hello", "text/plain"))
    expect(chat.page.locator("#notice")).to_have_text("only images can be attached")
    assert chat.page.locator("#attachments img.thumb").count() == 0


def test_a_refused_image_comes_back_to_send_again(server: Server, chat: ChatPage) -> None:
    broken = ("broken.png", b"\x89PNG\r\n\x1a\nnot really", "image/png")
    pick(chat, broken)
    answer = chat.send("Look.")
    error = answer.locator(".error")
    expect(error).to_be_visible()
    assert error.text_content().startswith("400: ")
    assert "messages[0].content[0]" in error.text_content()  # the server names the part
    thumbs = chat.page.locator("#attachments img.thumb")
    expect(thumbs).to_have_count(1)  # given back with the text, to fix or resend
    assert (
        thumbs.get_attribute("src")
        == "data:image/png;base64," + base64.b64encode(broken[1]).decode()
    )
    assert chat.page.input_value("#input") == "Look."


def test_new_chat_drops_images_not_sent(chat: ChatPage) -> None:
    pick(chat, ("red.png", RED, "image/png"))
    expect(chat.page.locator("#attachments img.thumb")).to_have_count(1)
    chat.page.click("#new-chat")
    expect(chat.page.locator("#attachments img.thumb")).to_have_count(0)
