"""The chat page under `--api-key`: `/` itself stays open, the page asks for
the key when /v1/models is a 401, and once given (kept in localStorage) every
request carries it as `Authorization: Bearer`."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from support.browser import ChatPage, chromium
from support.server import Server, rotor_server

pytestmark = pytest.mark.browser  # drives chromium: `-m "not browser"` leaves it out

KEY = "sekret"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server("out=mocker", "--speedup-ratio", "0", "--api-key", KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with chromium() as context:
        yield context


def test_the_page_is_open_while_the_api_needs_the_key(server: Server) -> None:
    assert httpx.get(server.url + "/", timeout=5).status_code == 200
    assert httpx.get(server.v1 + "/models", timeout=5).status_code == 401


def test_the_page_asks_for_the_key_then_sends_it(server: Server, browser: BrowserContext) -> None:
    chat = ChatPage(browser, server.url, wait_for_models=False)
    try:
        notice = chat.page.locator("#notice")
        expect(notice).to_contain_text("401")
        expect(notice).to_contain_text("API key")
        assert chat.page.locator("#settings").is_visible()
        assert chat.models() == []
        assert chat.page.locator("#send").is_disabled()

        chat.settings(api_key=KEY)
        expect(chat.page.locator("#model option")).to_have_count(1)
        assert chat.models() == ["mock-model"]
        expect(notice).to_have_text("")
        # Seeded: an unseeded mocker answer may be EOS at once (2 % a token),
        # and an empty answer would say nothing about the key reaching the API.
        chat.advanced({"seed": 7, "max_tokens": 24})
        answer = chat.send("Hello")
        assert answer.locator(".content").text_content()
        assert answer.locator(".error").is_hidden()
        chat_requests = [r for r in chat.requests if urlsplit(r.url).path == "/v1/chat/completions"]
        assert [r.headers.get("authorization") for r in chat_requests] == [f"Bearer {KEY}"]

        chat.page.reload()  # the key was kept: the models load at once
        expect(chat.page.locator("#model option")).to_have_count(1)
        assert chat.page.input_value("#api-key") == KEY
        assert chat.foreign_requests() == []
    finally:
        chat.close()
