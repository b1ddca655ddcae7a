"""`GET /v1/responses/{id}/input_items` pages: OpenAI's list shape, newest
first unless `order` is asc, `after` an item id, `limit` 1 to 100; a bad
parameter is a 400 naming it."""

from __future__ import annotations

import pytest

from rotor.api.errors import APIError
from rotor.api.responses.listing import page, page_query

ITEMS = [{"id": f"i{n}"} for n in range(5)]


def ids(body: dict[str, object]) -> list[str]:
    return [item["id"] for item in body["data"]]  # type: ignore[attr-defined,index]


def test_the_default_is_twenty_newest_first() -> None:
    body = page(ITEMS, page_query(None, None, None))
    assert body == {
        "object": "list",
        "data": ITEMS[::-1],
        "first_id": "i4",
        "last_id": "i0",
        "has_more": False,
    }


def test_pages_follow_each_other() -> None:
    first = page(ITEMS, page_query("2", "asc", None))
    assert (ids(first), first["has_more"], first["last_id"]) == (["i0", "i1"], True, "i1")
    second = page(ITEMS, page_query("2", "asc", "i1"))
    assert (ids(second), second["has_more"]) == (["i2", "i3"], True)
    last = page(ITEMS, page_query("2", "asc", "i3"))
    assert (ids(last), last["has_more"]) == (["i4"], False)
    assert ids(page(ITEMS, page_query("3", "desc", "i3"))) == ["i2", "i1", "i0"]


def test_an_empty_page() -> None:
    body = page(ITEMS, page_query(None, "asc", "i4"))
    assert body["data"] == [] and body["first_id"] is None and body["has_more"] is False


@pytest.mark.parametrize(
    ("limit", "order", "after", "param"),
    [
        ("0", None, None, "limit"),
        ("101", None, None, "limit"),
        ("ten", None, None, "limit"),
        (None, "newest", None, "order"),
        (None, None, "i9", "after"),
    ],
)
def test_bad_parameters_name_themselves(
    limit: str | None, order: str | None, after: str | None, param: str
) -> None:
    with pytest.raises(APIError) as e:
        page(ITEMS, page_query(limit, order, after))
    assert (e.value.status, e.value.param) == (400, param)
