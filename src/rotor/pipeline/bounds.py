"""How much text a prompt may have before any work is spent on it.

A token is at most `max_token_chars` characters of text (the longest entry of
the vocabulary), so a prompt of more than `context_length × max_token_chars`
characters cannot fit the context whatever the template does with it. The
count is cheap (one walk over the request's strings, stopping at the limit)
and runs before rendering and tokenizing, which cost far more. A rendered
prompt over the same bound is refused before it is tokenized.
"""

from __future__ import annotations

from typing import Any

from rotor.pipeline.errors import RequestError
from rotor.pipeline.served import ServedModel


def prompt_char_limit(model: ServedModel) -> int | None:
    """The most characters a prompt of this model can have; None: no tokenizer."""
    tok = model.tokenizer
    if tok is None:
        return None
    return model.card.context_length * tok.max_token_chars


def text_size(value: Any, limit: int) -> int:
    """Characters of every string in `value` (keys included) plus one per
    item, counted without recursion; stops once over `limit`."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            total += len(item)
            stack.extend(item)
        else:
            total += 1
    return total


def check_prompt_size(model: ServedModel, what: str, param: str, *parts: Any) -> None:
    """RequestError (400 naming `param`) when `parts` cannot fit the context."""
    limit = prompt_char_limit(model)
    if limit is None:
        return
    size = 0
    for part in parts:
        size += text_size(part, limit - size)
        if size > limit:
            raise RequestError(
                f"the {what} has more than {limit} characters, more than the model's context "
                f"of {model.card.context_length} tokens can hold (a token is at most "
                f"{limit // model.card.context_length} characters)",
                param,
            )
