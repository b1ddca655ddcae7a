"""`GET /v1/responses/{id}/input_items`: a page of a stored response's input
items in OpenAI's list shape (`limit` 1 to 100, default 20; `order` `desc`,
the default, or `asc`; `after` an item id: the items past it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rotor.api.errors import APIError

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
ORDERS = ("asc", "desc")


@dataclass(frozen=True)
class PageQuery:
    limit: int = DEFAULT_LIMIT
    order: str = "desc"
    after: str | None = None


def page_query(limit: str | None, order: str | None, after: str | None) -> PageQuery:
    """The query's paging (its parameters as sent, None when absent), or a
    400 naming the one that is wrong."""
    count = DEFAULT_LIMIT
    if limit is not None:
        if not limit.isdigit() or not 1 <= int(limit) <= MAX_LIMIT:
            raise APIError(400, f"limit must be 1 to {MAX_LIMIT}, got {limit!r}", "limit")
        count = int(limit)
    if order is None:
        order = "desc"
    elif order not in ORDERS:
        raise APIError(400, f"order must be 'asc' or 'desc', got {order!r}", "order")
    return PageQuery(count, order, after)


def page(items: list[dict[str, Any]], query: PageQuery) -> dict[str, Any]:
    """The page of `items` (oldest first) that `query` asks for; an `after`
    that names no item is a 400 naming it."""
    ordered = items if query.order == "asc" else items[::-1]
    if query.after is not None:
        ids = [item.get("id") for item in ordered]
        if query.after not in ids:
            raise APIError(400, f"no input item {query.after!r} to list after", "after")
        ordered = ordered[ids.index(query.after) + 1 :]
    data = ordered[: query.limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(ordered) > query.limit,
    }
