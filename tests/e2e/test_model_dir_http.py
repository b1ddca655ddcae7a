"""`rotor run --model-path DIR` end to end: the model's own template, the
overrides (`--chat-template`, `--model-name`, `--max-model-len`), template
errors and kwargs, and startup failures that name what is wrong.

The echo engine with a model directory echoes the rendered prompt's tokens, so
its answer is the exact prompt the template produced (special tokens removed by
the default skip_special_tokens).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from support.models import chatml_model
from support.server import Server, free_port, rotor_server

MODEL_CONTEXT = 32768  # chatml_model's max_position_embeddings
SMALL_CONTEXT = 128
SYSTEM_MESSAGE = "System messages are not supported by this template"
OVERRIDE_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'system' %}{{ raise_exception('" + SYSTEM_MESSAGE + "') }}{% endif %}"
    "[{{ m.role }}] {{ m.content }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chatml_model(tmp_path_factory.mktemp("modeldir"), name="qwenish")


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[Server]:
    """The model as it is: its own template, its own name, its own context."""
    with rotor_server("out=echo", "--model-path", str(model_dir)) as srv:
        yield srv


@pytest.fixture(scope="module")
def custom(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Every override at once: template file, served name, a smaller context."""
    template = tmp_path_factory.mktemp("template") / "override.jinja"
    template.write_text(OVERRIDE_TEMPLATE, encoding="utf-8")
    with rotor_server(
        "out=echo",
        "--model-path",
        str(model_dir),
        "--chat-template",
        str(template),
        "--model-name",
        "custom-name",
        "--max-model-len",
        str(SMALL_CONTEXT),
    ) as srv:
        yield srv


def answer(server: Server, model: str, messages: list[dict], stream: bool, **kw: object) -> str:
    client = server.openai()
    if not stream:
        resp = client.chat.completions.create(model=model, messages=messages, **kw)
        assert resp.choices[0].finish_reason == "stop"
        return resp.choices[0].message.content
    chunks = list(client.chat.completions.create(model=model, messages=messages, stream=True, **kw))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert finishes == ["stop"]
    return "".join(c.choices[0].delta.content or "" for c in chunks)


# -- the model's own template -------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_chat_answers_with_the_rendered_prompt(server: Server, stream: bool) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Grüße aus 東京 🙂"},
    ]
    text = answer(server, "qwenish", messages, stream)
    # <|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n...: ChatML
    # with the special tokens dropped from the echo.
    assert text == "system\nbe brief\nuser\nGrüße aus 東京 🙂\nassistant\n"


def test_rendered_prompt_matches_tokenize_and_usage(server: Server) -> None:
    messages = [{"role": "user", "content": "count me"}]
    rendered = server.tokenize(messages=messages)
    prompt = server.detokenize(rendered)
    assert prompt == "<|im_start|>user\ncount me<|im_end|>\n<|im_start|>assistant\n"
    resp = server.openai().chat.completions.create(model="qwenish", messages=messages)
    assert resp.usage.prompt_tokens == len(rendered)
    # The echo is the prompt less its EOS-id tokens (an EOS would end the
    # answer), then one EOS.
    (eos,) = server.tokenize("<|im_end|>")
    assert resp.usage.completion_tokens == len(rendered) - rendered.count(eos) + 1


def test_skip_special_tokens_false_shows_the_template_markers(server: Server) -> None:
    resp = server.openai().chat.completions.create(
        model="qwenish",
        messages=[{"role": "user", "content": "x"}],
        extra_body={"skip_special_tokens": False},
    )
    # Every special token but the EOS ids (which the echo leaves out).
    assert resp.choices[0].message.content == "<|im_start|>user\nx\n<|im_start|>assistant\n"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_template_kwargs_reach_the_template(server: Server, stream: bool) -> None:
    messages = [{"role": "user", "content": "think?"}]
    plain = answer(server, "qwenish", messages, stream)
    assert plain == "user\nthink?\nassistant\n"
    off = answer(
        server,
        "qwenish",
        messages,
        stream,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert off == "user\nthink?\nassistant\n<think>\n\n</think>\n\n"


def test_models_lists_the_directory_name_and_its_context(server: Server) -> None:
    (entry,) = server.openai().models.list().data
    assert entry.id == "qwenish"
    assert entry.model_extra["max_model_len"] == MODEL_CONTEXT


def test_context_length_check_names_both_numbers(server: Server) -> None:
    messages = [{"role": "user", "content": "hello"}]
    count = len(server.tokenize(messages=messages))
    with pytest.raises(openai.BadRequestError) as info:
        server.openai().chat.completions.create(
            model="qwenish", messages=messages, max_tokens=MODEL_CONTEXT
        )
    message = info.value.body["message"]
    assert str(MODEL_CONTEXT) in message
    assert str(count + MODEL_CONTEXT) in message
    assert info.value.body["param"] == "max_tokens"


# -- overrides --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_chat_template_file_overrides_the_models(custom: Server, stream: bool) -> None:
    messages = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    text = answer(custom, "custom-name", messages, stream)
    assert text == "[user] one\n[assistant] two\n[user] three\n[assistant] "


def test_model_name_is_the_served_name(custom: Server) -> None:
    client = custom.openai()
    (entry,) = client.models.list().data
    assert entry.id == "custom-name"
    assert entry.model_extra["max_model_len"] == SMALL_CONTEXT
    assert client.models.retrieve("custom-name").id == "custom-name"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="qwenish", messages=[{"role": "user", "content": "x"}])


@pytest.mark.parametrize("stream", [False, True])
def test_template_raise_exception_is_400_with_its_message(custom: Server, stream: bool) -> None:
    resp = httpx.post(
        custom.v1 + "/chat/completions",
        json={
            "model": "custom-name",
            "stream": stream,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
            ],
        },
        timeout=10,
    )
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert SYSTEM_MESSAGE in error["message"]
    assert error["type"] == "invalid_request_error"


def test_smaller_max_model_len_is_enforced(custom: Server) -> None:
    messages = [{"role": "user", "content": "hello"}]
    count = len(custom.tokenize(messages=messages))
    asked = SMALL_CONTEXT - count + 1
    with pytest.raises(openai.BadRequestError) as info:
        custom.openai().chat.completions.create(
            model="custom-name", messages=messages, max_tokens=asked
        )
    message = info.value.body["message"]
    assert str(SMALL_CONTEXT) in message and str(count + asked) in message
    # One token less fits: the echo answers with the whole prompt.
    ok = custom.openai().chat.completions.create(
        model="custom-name", messages=messages, max_tokens=asked - 1
    )
    assert ok.choices[0].message.content == "[user] hello\n[assistant] "
    # A prompt that leaves no room at all, with no max_tokens, is refused too.
    long = [{"role": "user", "content": "word " * SMALL_CONTEXT}]
    with pytest.raises(openai.BadRequestError) as info:
        custom.openai().chat.completions.create(model="custom-name", messages=long)
    assert str(SMALL_CONTEXT) in info.value.body["message"]


# -- startup failures ---------------------------------------------------------------------


def rotor_command() -> list[str]:
    script = Path(sys.executable).parent / "rotor"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "rotor.cli"]


def broken_dirs(tmp: Path) -> dict[str, tuple[Path, list[str]]]:
    """name → (model dir, extra flags) for each way startup must fail."""
    missing_tokenizer = chatml_model(tmp, name="no-tokenizer")
    (missing_tokenizer / "tokenizer.json").unlink()
    bad_config = chatml_model(tmp, name="bad-config")
    (bad_config / "config.json").write_text('{"max_position_embeddings": 4096,', encoding="utf-8")
    good = chatml_model(tmp, name="good")
    return {
        "missing tokenizer.json": (missing_tokenizer, []),
        "broken config.json": (bad_config, []),
        "max-model-len too large": (good, ["--max-model-len", str(MODEL_CONTEXT * 2)]),
    }


@pytest.fixture(scope="module")
def startup_failures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """Run `rotor run` on each broken setup at once; name → (exit code, stderr)."""
    tmp = tmp_path_factory.mktemp("broken")
    procs = {
        name: subprocess.Popen(
            [
                *rotor_command(),
                "run",
                "out=echo",
                "--model-path",
                str(path),
                *flags,
                "--port",
                str(free_port()),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (path, flags) in broken_dirs(tmp).items()
    }
    results = {}
    try:
        for name, proc in procs.items():
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail(f"rotor started although the setup is broken: {name}")
            results[name] = (proc.returncode, err)
    finally:  # none is left running, whichever failed
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return results


def test_startup_fails_when_max_model_len_exceeds_the_model(
    startup_failures: dict[str, tuple[int, str]],
) -> None:
    code, err = startup_failures["max-model-len too large"]
    assert code != 0
    assert str(MODEL_CONTEXT * 2) in err and str(MODEL_CONTEXT) in err.replace(
        str(MODEL_CONTEXT * 2), ""
    )
    assert "Traceback" not in err


def test_startup_fails_naming_a_missing_tokenizer(
    startup_failures: dict[str, tuple[int, str]],
) -> None:
    code, err = startup_failures["missing tokenizer.json"]
    assert code != 0
    assert "no-tokenizer" in err and "tokenizer.json" in err
    assert "Traceback" not in err


def test_startup_fails_naming_a_broken_config(startup_failures: dict[str, tuple[int, str]]) -> None:
    code, err = startup_failures["broken config.json"]
    assert code != 0
    assert "bad-config" in err and "config.json" in err
    assert "Traceback" not in err
