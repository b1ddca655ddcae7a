"""`--max-model-len` and `--chat-template` are checked the same way with a
model directory and without one (the echo card, the mocker's built-in model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rotor.config import ModelConfig
from rotor.engines.registry import engine_spec
from rotor.model.card import echo_card
from rotor.model.loader import ModelLoadError, apply_overrides
from rotor.serve.build import StartupError, load

ENGINES = ("echo", "mocker")


def flags(max_model_len: int | None = None, chat_template: str | None = None) -> ModelConfig:
    return ModelConfig(max_model_len=max_model_len, chat_template=chat_template)


def context_of(engine: str) -> int:
    card, _ = load(flags(), engine_spec(engine))
    return card.context_length


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("length", [0, -5])
def test_max_model_len_must_be_positive(engine: str, length: int) -> None:
    with pytest.raises(StartupError, match="max_model_len must be a positive integer"):
        load(flags(max_model_len=length), engine_spec(engine))


@pytest.mark.parametrize("engine", ENGINES)
def test_max_model_len_may_not_exceed_the_model(engine: str) -> None:
    context = context_of(engine)
    with pytest.raises(StartupError) as err:
        load(flags(max_model_len=context + 1), engine_spec(engine))
    message = str(err.value)
    assert str(context + 1) in message and str(context) in message.replace(str(context + 1), "")


@pytest.mark.parametrize("engine", ENGINES)
def test_max_model_len_lowers_the_context(engine: str) -> None:
    card, _ = load(flags(max_model_len=100), engine_spec(engine))
    assert card.context_length == 100


@pytest.mark.parametrize("engine", ENGINES)
def test_chat_template_is_read_as_utf8(engine: str, tmp_path: Path) -> None:
    file = tmp_path / "t.jinja"
    file.write_bytes("«{{ messages[0].content }}» — ✓".encode())
    card, _ = load(flags(chat_template=str(file)), engine_spec(engine))
    assert card.chat_templates == {"default": "«{{ messages[0].content }}» — ✓"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_chat_template_that_is_not_utf8_is_a_startup_error(engine: str, tmp_path: Path) -> None:
    file = tmp_path / "latin1.jinja"
    file.write_bytes("caf\xe9 {{ messages }}".encode("latin-1"))
    with pytest.raises(StartupError, match="not UTF-8") as err:
        load(flags(chat_template=str(file)), engine_spec(engine))
    assert str(file) in str(err.value)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_missing_chat_template_is_a_startup_error(engine: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.jinja"
    with pytest.raises(StartupError, match="does not exist") as err:
        load(flags(chat_template=str(missing)), engine_spec(engine))
    assert str(missing) in str(err.value)


def test_apply_overrides_names_where_the_context_came_from() -> None:
    card = echo_card()
    with pytest.raises(ModelLoadError, match=r"\(somewhere\)"):
        apply_overrides(card, card.context_length * 2, context_source="somewhere")
    apply_overrides(card, 10)
    assert card.context_length == 10
