"""Served models in Anthropic's `/v1/models` shape."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from rotor.pipeline.served import ServedModel


def anthropic_model(model: ServedModel, name: str | None = None) -> dict[str, Any]:
    """One model as Anthropic's `/v1/models/{id}` describes it, under `name`
    (one of its aliases; default its own name)."""
    card = model.card
    created = datetime.fromtimestamp(card.created, tz=timezone.utc)
    return {
        "type": "model",
        "id": name or card.name,
        "display_name": name or card.name,
        "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "max_input_tokens": card.context_length,
    }


def anthropic_models(models: list[tuple[ServedModel, str]]) -> dict[str, Any]:
    """Each (model, the name it is listed under)."""
    data = [anthropic_model(m, name) for m, name in models]
    first = data[0]["id"] if data else None
    last = data[-1]["id"] if data else None
    return {"data": data, "has_more": False, "first_id": first, "last_id": last}
