"""The frontend's model registry: a model under its own name and its aliases
(`--served-model-name`), one engine behind them all."""

from __future__ import annotations

import pytest

from rotor.engines.echo import EchoEngine
from rotor.frontend import ModelNotFound, ModelRegistry
from rotor.model.card import ModelCard
from rotor.pipeline.served import ServedModel


def served(name: str, *aliases: str) -> ServedModel:
    return ServedModel(ModelCard(name, aliases=list(aliases)))


def test_an_alias_finds_the_model_under_the_name_it_used() -> None:
    registry = ModelRegistry()
    model, engine = served("m", "a", "b"), EchoEngine(ModelCard("e"))
    registry.add(model, engine)
    for name in ("m", "a", "b"):
        entry = registry.get(name)
        assert entry.model is model and entry.engine is engine and entry.name == name
    assert registry.names() == ["m", "a", "b"]
    assert [e.name for e in registry.entries()] == ["m"]  # one per model
    assert [e.name for e in registry.listed()] == ["m", "a", "b"]
    assert registry.get(None).name == "m"  # the only model, aliases or not


def test_removing_a_model_removes_its_aliases_and_nothing_else() -> None:
    registry = ModelRegistry()
    registry.add(served("m", "a"), EchoEngine(ModelCard("e")))
    registry.add(served("n"), EchoEngine(ModelCard("e")))
    registry.remove("a")  # by an alias: the whole model goes
    assert registry.names() == ["n"]
    with pytest.raises(ModelNotFound, match="'a' does not exist; served: n"):
        registry.get("a")


def test_an_alias_never_takes_another_model_s_own_name() -> None:
    registry = ModelRegistry()
    other = served("n")
    registry.add(other, EchoEngine(ModelCard("e")))
    registry.add(served("m", "n", "a"), EchoEngine(ModelCard("e")))
    assert registry.get("n").model is other
    assert registry.get("a").model.name == "m"
    registry.remove("m")
    assert registry.names() == ["n"] and registry.get("n").model is other


def test_no_name_with_two_models_is_an_error_naming_them() -> None:
    registry = ModelRegistry()
    registry.add(served("m", "a"), EchoEngine(ModelCard("e")))
    registry.add(served("n"), EchoEngine(ModelCard("e")))
    with pytest.raises(ModelNotFound, match="names no model; served: m, a, n"):
        registry.get(None)


class _AdapterEngine(EchoEngine):
    """An engine holding LoRA adapters, as the registry sees one."""

    def __init__(self, held: dict[str, str]) -> None:
        super().__init__(ModelCard("e"))
        self.held = held

    def adapters(self) -> dict[str, str]:
        return self.held


def test_an_adapter_is_a_model_of_its_own_with_its_base_as_parent() -> None:
    """A request naming a held adapter finds the base model's entry with the
    adapter set (its engine requests carry it); listed after the models;
    one the engine no longer holds is not found."""
    registry = ModelRegistry()
    engine = _AdapterEngine({"sql": "/adapters/sql"})
    model = served("m", "a")
    registry.add(model, engine)
    entry = registry.get("sql")
    assert (entry.model, entry.engine, entry.name) == (model, engine, "sql")
    assert (entry.lora, entry.lora_path) == ("sql", "/adapters/sql")
    assert registry.get("m").lora is None and registry.get("a").lora is None
    assert [(e.name, e.lora) for e in registry.listed()] == [
        ("m", None),
        ("a", None),
        ("sql", "sql"),
    ]
    assert [e.name for e in registry.entries()] == ["m"]  # metrics: the base model
    engine.held = {}
    with pytest.raises(ModelNotFound, match="'sql' does not exist"):
        registry.get("sql")
