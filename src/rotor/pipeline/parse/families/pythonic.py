"""pythonic — Llama 3.2 / Llama 4 and others: the output is a Python list of
calls, `[f(a=1, b="x"), g()]`; Llama 4 may wrap it in `<|python_start|>` …
`<|python_end|>` (special tokens).

There is no start marker of its own: a `[` at the head of the output is held
until it is known to be a call list or not (`[1] See …` is prose at once); a
`[` in the middle of prose is content. Arguments are keyword arguments whose
values are Python literals: the list is parsed with `ast` and each value read
with `ast.literal_eval` — model output is data, never evaluated. Positional
arguments, non-literal values, or values with no JSON meaning (sets, bytes,
non-string keys, infinities) make the list malformed, released as content."""

from __future__ import annotations

import ast
import math
import warnings
from typing import Any

from rotor.pipeline.parse.base import ToolCall
from rotor.pipeline.parse.families._leading import LeadingParser, skip_space
from rotor.pipeline.parse.jsonutil import dumps_args

END = "<|python_end|>"
_CLOSE = {"(": ")", "[": "]", "{": "}"}


class PythonicParser(LeadingParser):
    name = "pythonic"
    # `<|python_start|>` / `<|python_end|>` are special tokens of Llama 4.
    needs_special_tokens = True
    lead = "["
    marker = "<|python_start|>"

    def section_end(self, body: str, opener: str, final: bool) -> tuple[int, int] | None:
        i = skip_space(body)
        if i == len(body):
            return None
        if body[i] != "[" or _not_a_call_list(body, i):
            return 0, 0
        end = _list_end(body, i)
        if end is None:
            return None
        if end < 0:
            return 0, 0
        # The end marker may follow: it is swallowed with the list, and so is a
        # piece of it the stream stopped in.
        j = skip_space(body, end)
        if body.startswith(END, j):
            return end, j + len(END)
        if END.startswith(body[j:]):
            return (end, len(body)) if final else None
        return end, end

    def parse_section(self, body: str) -> list[ToolCall] | None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. invalid escapes in a string
                tree = ast.parse(body.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if not isinstance(tree.body, ast.List) or not tree.body.elts:
            return None
        calls: list[ToolCall] = []
        for node in tree.body.elts:
            call = _call(node)
            if call is None:
                return None
            calls.append(call)
        return calls


def _call(node: ast.expr) -> ToolCall | None:
    """`f(a=1, b="x")` → call f; None for anything else."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        return None
    args: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:  # **kwargs
            return None
        try:
            args[kw.arg] = _json_value(ast.literal_eval(kw.value))
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
    return ToolCall(name=node.func.id, arguments=dumps_args(args))


def _json_value(value: Any) -> Any:
    """A literal as JSON data (tuples become arrays); ValueError when it has no
    JSON meaning."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("not a JSON number")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("JSON object keys are strings")
        return {k: _json_value(v) for k, v in value.items()}
    raise ValueError(f"no JSON meaning: {type(value).__name__}")


def _not_a_call_list(text: str, i: int) -> bool:
    """True as soon as the list at `i` cannot open with `name(`: prose such as
    `[1]` or `[see below]` is released without waiting for its end."""
    n = len(text)
    k = skip_space(text, i + 1)
    if k == n or text[k] == "]":
        return False  # undecided, or `[]` (its parse says no)
    if not (text[k].isalpha() or text[k] == "_"):
        return True
    while k < n and (text[k].isalnum() or text[k] == "_"):
        k += 1
    k = skip_space(text, k)
    return k < n and text[k] != "("


def _list_end(text: str, start: int) -> int | None:
    """Index just past the Python list that opens at `start`; None while it is
    incomplete, -1 when its brackets do not match. Strings (quotes of either
    kind, triple-quoted, escapes) are skipped."""
    stack: list[str] = []
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            if n - i < 3 and text[i:] == c * (n - i):
                return None  # may still become a triple quote
            quote = c * 3 if text.startswith(c * 3, i) else c
            i = _string_end(text, i + len(quote), quote)
            if i < 0:
                return None
            continue
        if c in _CLOSE:
            stack.append(_CLOSE[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return i + 1
        i += 1
    return None


def _string_end(text: str, i: int, quote: str) -> int:
    """Index just past the closing `quote` of a string whose text starts at `i`;
    -1 when it has not arrived yet."""
    n = len(text)
    while i < n:
        if text[i] == "\\":
            i += 2
        elif text.startswith(quote, i):
            return i + len(quote)
        else:
            i += 1
    return -1
