"""A real headless browser for end-to-end tests of the chat page: Debian's
chromium (installed by .ci/install), driven by playwright, never a browser
playwright downloads. A missing chromium is a failure, not a skip.

`ChatPage` wraps one tab on the page with what tests observe: console errors,
page errors, every request the tab made, the chat request bodies it sent."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import (
    BrowserContext,
    ConsoleMessage,
    Locator,
    Page,
    Request,
    expect,
    sync_playwright,
)

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000


def chromium_path() -> str:
    path = shutil.which("chromium") or CHROMIUM
    if not os.access(path, os.X_OK):
        raise AssertionError(
            "chromium is missing: the chat page tests need Debian's chromium "
            "(.ci/install runs apt-get install -y chromium)"
        )
    return path


@contextmanager
def chromium() -> Iterator[BrowserContext]:
    """One browser with a fresh profile in a temporary directory."""
    path = chromium_path()
    with (
        tempfile.TemporaryDirectory(prefix="rotor-chromium-") as profile,
        sync_playwright() as pw,
    ):
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=path, headless=True, args=ARGS
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


class ChatPage:
    """One tab on the chat page at `url`, storage cleared, models loaded."""

    def __init__(self, context: BrowserContext, url: str, wait_for_models: bool = True) -> None:
        self.page: Page = context.new_page()
        self.console: list[str] = []  # console errors and warnings, page errors
        self.requests: list[Request] = []
        self.page.on("request", lambda request: self.requests.append(request))
        self.page.on("pageerror", lambda exc: self.console.append(f"pageerror: {exc}"))
        self.page.on("console", self._console)
        self.page.goto(url + "/")
        self.page.evaluate("localStorage.clear()")
        self.page.reload()
        if wait_for_models:
            self.page.locator("#model option").first.wait_for(state="attached")

    def _console(self, msg: ConsoleMessage) -> None:
        if msg.type in ("error", "warning"):
            self.console.append(f"{msg.type}: {msg.text}")

    def close(self) -> None:
        self.page.close()

    def models(self) -> list[str]:
        return self.page.locator("#model option").all_inner_texts()

    def settings(self, **fields: str) -> None:
        """Fill settings by element id (system, api_key, advanced, max_tokens …)."""
        if self.page.locator("#settings").is_hidden():
            self.page.click("#settings-toggle")
        for name, value in fields.items():
            box = self.page.locator("#" + name.replace("_", "-"))
            box.fill(value)
            box.dispatch_event("change")

    def advanced(self, fields: dict[str, Any] | None) -> None:
        self.settings(advanced=json.dumps(fields) if fields else "")

    def send(self, text: str, wait: bool = True) -> Locator:
        """Type `text`, press Enter; the new assistant message (finished when `wait`)."""
        before = self.page.locator(".msg.assistant").count()
        self.page.fill("#input", text)
        self.page.press("#input", "Enter")
        answer = self.page.locator(".msg.assistant").nth(before)
        answer.wait_for(state="attached")
        if wait:
            self.wait_idle()
        return answer

    def wait_idle(self) -> None:
        expect(self.page.locator("body")).to_have_attribute("data-state", "idle")

    def chat_bodies(self) -> list[dict[str, Any]]:
        """The bodies of the chat requests this tab sent, in order."""
        return [
            r.post_data_json
            for r in self.requests
            if r.method == "POST" and urlsplit(r.url).path == "/v1/chat/completions"
        ]

    def foreign_requests(self) -> list[str]:
        """Requests to anything but loopback (data: URLs are not requests to a host)."""
        out = []
        for r in self.requests:
            parts = urlsplit(r.url)
            if parts.scheme == "data":
                continue
            if parts.scheme not in ("http", "https") or parts.hostname not in ("127.0.0.1", "::1"):
                out.append(r.url)
        return out
