"""`rotor run --api-key A --api-key B` (and `ROTOR_API_KEY="A B"`): a real
server lets either key in, with the official client, and refuses any other;
the KServe gRPC API takes the same keys; each key is a tenant of the
stored responses."""

from __future__ import annotations

import openai
import pytest

from support.server import rotor_server

CHAT = {"model": "echo", "messages": [{"role": "user", "content": "ok"}]}


def answers(client: openai.OpenAI) -> str | None:
    return client.chat.completions.create(**CHAT).choices[0].message.content  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--api-key", "key-a", "--api-key", "key-b"), {}),
        ((), {"ROTOR_API_KEY": "key-a key-b"}),
    ],
)
def test_either_key_is_let_in_and_no_other(args: tuple[str, ...], env: dict[str, str]) -> None:
    with rotor_server(*args, env=env) as srv:
        assert answers(srv.openai(api_key="key-a")) == "ok"
        assert answers(srv.openai(api_key="key-b")) == "ok"
        for wrong in ("key-c", "key-a key-b"):
            with pytest.raises(openai.AuthenticationError):
                answers(srv.openai(api_key=wrong))


def test_the_flag_wins_over_the_variable() -> None:
    with rotor_server("--api-key", "key-a", env={"ROTOR_API_KEY": "key-b"}) as srv:
        assert answers(srv.openai(api_key="key-a")) == "ok"
        with pytest.raises(openai.AuthenticationError):
            answers(srv.openai(api_key="key-b"))


def test_a_response_stored_under_one_key_is_not_found_under_another() -> None:
    """Each key is a tenant: the stored response and its chain are the
    storing key's alone (a 404 naming the id under the other key)."""
    with rotor_server("--api-key", "key-a", "--api-key", "key-b") as srv:
        a, b = srv.openai(api_key="key-a"), srv.openai(api_key="key-b")
        made = a.responses.create(model="echo", input="ok")
        assert a.responses.retrieve(made.id).id == made.id
        with pytest.raises(openai.NotFoundError, match=made.id):
            b.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError, match=made.id):
            b.responses.create(model="echo", input="more", previous_response_id=made.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.delete(made.id)
        chained = a.responses.create(model="echo", input="more", previous_response_id=made.id)
        assert chained.previous_response_id == made.id
