"""The chat page at `/` in a real headless chromium against a real mocker
server: what the page shows is compared with what the API returns for the
same request (content, reasoning, tool calls, usage), Stop is seen by the
server as a disconnect, and later turns carry the conversation."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from support.browser import ChatPage, chromium
from support.server import Server, rotor_server
from support.wait import wait_for

pytestmark = pytest.mark.browser  # drives chromium: `-m "not browser"` leaves it out

MODEL = "mock-model"
# 10 ms per decode step: fast enough for short answers, slow enough for Stop to land mid-stream
MOCKER = ("out=mocker", "--speedup-ratio", "1")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with rotor_server(*MOCKER) as srv:
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


def script(output: str) -> dict[str, Any]:
    return {"mock": {"output": output, "end": "eos"}}


def api_message(srv: Server, body: dict[str, Any]) -> dict[str, Any]:
    """The non-streaming answer to the body the page sent: message and usage."""
    plain = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    resp = httpx.post(srv.v1 + "/chat/completions", json=plain, timeout=30)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    return {**data["choices"][0]["message"], "usage": data["usage"]}


def engine_active(srv: Server) -> int:
    return httpx.get(srv.url + "/health", timeout=5).json()["engines"][MODEL]["active_requests"]


# -- the page itself -------------------------------------------------------------------------


def test_the_page_is_one_self_contained_file(server: Server) -> None:
    resp = httpx.get(server.url + "/", timeout=5)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    csp = resp.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert "'sha256-" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    # nothing fetched from elsewhere: no URL of another host, no external script or sheet
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", resp.text)
    assert "<script src" not in resp.text and 'rel="stylesheet"' not in resp.text
    assert httpx.head(server.url + "/", timeout=5).status_code == 200


def test_page_loads_cleanly_and_lists_the_served_models(server: Server, chat: ChatPage) -> None:
    served = [m.id for m in server.openai().models.list().data]
    assert chat.models() == served == [MODEL]
    assert chat.console == []
    assert chat.foreign_requests() == []
    assert chat.page.locator("#notice").inner_text() == ""


# -- answers ---------------------------------------------------------------------------------


def test_streamed_answer_equals_the_api_content_and_shows_speed(
    server: Server, chat: ChatPage
) -> None:
    chat.advanced({"seed": 7, "max_tokens": 24})
    answer = chat.send("Tell me something.")
    [body] = chat.chat_bodies()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "Tell me something."}]
    expected = api_message(server, body)
    assert expected["content"]
    assert answer.locator(".content").text_content() == expected["content"]
    assert (answer.locator("details.reasoning").count() == 0) == (
        not expected.get("reasoning_content")
    )
    stats = answer.locator(".stats")
    completion = expected["usage"]["completion_tokens"]
    assert int(stats.get_attribute("data-completion-tokens")) == completion
    assert float(stats.get_attribute("data-tps")) > 0
    assert int(stats.get_attribute("data-ttft-ms")) >= 0
    text = stats.inner_text()
    assert "tok/s" in text and "TTFT" in text, text
    assert chat.console == [] and chat.foreign_requests() == []


def test_model_output_is_shown_as_text_never_as_html(server: Server, chat: ChatPage) -> None:
    hostile = '<img src=x onerror="document.title=1"><b>bold</b> & <script>1</script>'
    chat.advanced(script(hostile))
    answer = chat.send("Say something odd.")
    expected = api_message(server, chat.chat_bodies()[0])
    assert answer.locator(".content").text_content() == expected["content"] == hostile
    assert answer.locator(".content *").count() == 0  # no element was made from the text
    assert chat.page.title() == "rotor chat"


def test_reasoning_is_shown_folded(server: Server, chat: ChatPage) -> None:
    chat.advanced(script("<think>Two and two make four.</think>It is 4."))
    answer = chat.send("What is 2+2?")
    expected = api_message(server, chat.chat_bodies()[0])
    assert expected["reasoning_content"] and expected["content"]
    details = answer.locator("details.reasoning")
    assert details.evaluate("d => d.open") is False
    expect(details.locator("summary")).to_have_text(re.compile(r"^Reasoning · \d+\.\d s$"))
    reasoning = details.locator(".reasoning-text")
    assert reasoning.is_hidden()
    assert reasoning.text_content() == expected["reasoning_content"]
    assert answer.locator(".content").text_content() == expected["content"]
    details.locator("summary").click()
    assert reasoning.is_visible()


def test_a_tool_call_is_shown_with_its_name_and_arguments(server: Server, chat: ChatPage) -> None:
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    chat.advanced({"tools": TOOLS, **script(call)})
    answer = chat.send("Weather in Paris?")
    expected = api_message(server, chat.chat_bodies()[0])
    [api_call] = expected["tool_calls"]
    [shown] = answer.locator(".tool-call").all()
    assert shown.locator(".tool-name").text_content() == api_call["function"]["name"]
    assert shown.locator(".tool-name").text_content() == "get_weather"
    arguments = json.loads(shown.locator(".tool-args").text_content())
    assert arguments == json.loads(api_call["function"]["arguments"]) == {"city": "Paris"}
    assert answer.locator(".stats").get_attribute("data-finish") == "tool_calls"


def test_the_servers_error_is_shown_and_the_turn_is_not_kept(
    server: Server, chat: ChatPage
) -> None:
    chat.advanced({"no_such_field": 1})
    answer = chat.send("Hello?")
    body = chat.chat_bodies()[0]
    resp = httpx.post(server.v1 + "/chat/completions", json=body, timeout=30)
    assert resp.status_code == 400
    error = answer.locator(".error")
    assert error.is_visible()
    assert error.text_content() == "400: " + resp.json()["error"]["message"]
    assert "no_such_field" in error.text_content()
    assert chat.page.input_value("#input") == "Hello?"  # given back to edit and resend
    chat.advanced(None)
    chat.send("Hello again.")
    assert chat.chat_bodies()[1]["messages"] == [{"role": "user", "content": "Hello again."}]


def test_bad_advanced_json_is_refused_before_any_request(chat: ChatPage) -> None:
    chat.settings(advanced="{not json")
    chat.page.fill("#input", "Hi")
    chat.page.press("#input", "Enter")
    expect(chat.page.locator("#notice")).to_contain_text("Advanced JSON")
    assert chat.chat_bodies() == []
    assert chat.page.locator(".msg").count() == 0


# -- Stop ------------------------------------------------------------------------------------


def test_stop_aborts_the_request_and_the_server_lets_go(server: Server, chat: ChatPage) -> None:
    disconnects = server.metric("rotor_disconnected_clients_total")
    chat.advanced({"max_tokens": 20000, "ignore_eos": True})  # 200 s at 10 ms a token
    answer = chat.send("Talk for a long time.", wait=False)
    expect(answer.locator(".content")).not_to_have_text("")  # the stream has begun
    assert chat.page.get_attribute("body", "data-state") == "streaming"
    assert engine_active(server) == 1
    chat.page.click("#stop")
    chat.wait_idle()
    stats = answer.locator(".stats")
    assert stats.get_attribute("data-finish") == "stopped"
    assert "stopped after" in stats.inner_text()
    assert chat.page.locator("#stop").is_disabled()
    assert chat.page.locator("#send").is_enabled()
    wait_for(
        "the server to let go of the stopped request",
        lambda: not (engine_active(server) or server.metric("rotor_requests_in_flight")),
    )
    wait_for(
        "the server to see the disconnect",
        lambda: server.metric("rotor_disconnected_clients_total") >= disconnects + 1,
    )
    # what was said before Stop stays in the conversation
    partial = answer.locator(".content").text_content()
    assert partial
    chat.advanced({"max_tokens": 2})
    chat.send("Enough.")
    assert chat.chat_bodies()[1]["messages"][1] == {"role": "assistant", "content": partial}


# -- conversation ----------------------------------------------------------------------------


def test_the_second_turn_sends_the_history(server: Server, chat: ChatPage) -> None:
    chat.settings(system="Be brief.")
    chat.advanced({"seed": 3, "max_tokens": 8})
    first = chat.send("First question.")
    first_text = first.locator(".content").text_content()
    second = chat.send("Second question.")
    one, two = chat.chat_bodies()
    assert one["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "First question."},
    ]
    assert two["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "First question."},
        {"role": "assistant", "content": first_text},
        {"role": "user", "content": "Second question."},
    ]
    # the server saw the whole conversation: the prompt it counted is the history's
    expected = api_message(server, two)
    shown = int(second.locator(".stats").get_attribute("data-prompt-tokens"))
    assert shown == expected["usage"]["prompt_tokens"]
    assert shown > int(first.locator(".stats").get_attribute("data-prompt-tokens"))
    assert second.locator(".content").text_content() == expected["content"]
    chat.page.click("#new-chat")
    chat.send("Fresh start.")
    assert chat.chat_bodies()[2]["messages"][1:] == [{"role": "user", "content": "Fresh start."}]
