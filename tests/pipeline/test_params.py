"""The engine limits preprocess decides: `max_tokens` when the request sets none."""

from __future__ import annotations

from pathlib import Path

import pytest

from rotor.model.loader import load_model
from rotor.pipeline.errors import RequestError
from rotor.pipeline.preprocess import prepare_chat
from rotor.pipeline.served import ServedModel
from rotor.protocol.openai import ChatCompletionRequest

from support.models import write_model_dir

HELLO = [{"role": "user", "content": "hello"}]
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def served(tmp: Path, context: int, defaults: dict | None) -> ServedModel:
    root = write_model_dir(
        tmp / "m",
        special_tokens=["<eos>"],
        chat_template=TEMPLATE,
        eos_token="<eos>",
        context_length=context,
        sampling_defaults=defaults,
    )
    card, tok = load_model(root)
    return ServedModel.build(card, tok)


def limit(model: ServedModel, **fields: object) -> int:
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": HELLO, **fields})
    return prepare_chat(model, req, "r").requests[0].stop.max_tokens


def test_without_max_tokens_the_limit_is_the_room_left_in_the_context(tmp_path: Path) -> None:
    model = served(tmp_path, 64, None)
    prompt = len(model.tokenizer.encode("hello"))
    assert limit(model) == 64 - prompt


def test_generation_config_max_new_tokens_caps_the_default(tmp_path: Path) -> None:
    model = served(tmp_path, 4096, {"max_new_tokens": 7})
    assert limit(model) == 7
    # the client's own max_tokens wins, above or below the model's default
    assert limit(model, max_tokens=100) == 100
    assert limit(model, max_tokens=3) == 3


def test_the_context_still_bounds_a_default_larger_than_the_room(tmp_path: Path) -> None:
    model = served(tmp_path, 64, {"max_new_tokens": 1000})
    prompt = len(model.tokenizer.encode("hello"))
    assert limit(model) == 64 - prompt
    with pytest.raises(RequestError):
        limit(model, max_tokens=1000)
