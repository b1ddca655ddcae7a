"""The served model in Anthropic's `/v1/models` shape."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from rotor.frontend import Frontend


def anthropic_model(frontend: Frontend) -> dict[str, Any]:
    """The served model as Anthropic's `/v1/models/{id}` describes one."""
    card = frontend.model.card
    created = datetime.fromtimestamp(card.created, tz=timezone.utc)
    return {
        "type": "model",
        "id": card.name,
        "display_name": card.name,
        "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "max_input_tokens": card.context_length,
    }


def anthropic_models(frontend: Frontend) -> dict[str, Any]:
    data = [anthropic_model(frontend)]
    return {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
