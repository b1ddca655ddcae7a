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

from rotor.pipeline.parse.base import ToolCall, Tools, skip_space
from rotor.pipeline.parse.families._leading import LeadingParser
from rotor.pipeline.parse.jsonutil import dumps_args

END = "<|python_end|>"
_CLOSE = {"(": ")", "[": "]", "{": "}"}


class PythonicParser(LeadingParser):
    name = "pythonic"
    # `<|python_start|>` / `<|python_end|>` are special tokens of Llama 4.
    needs_special_tokens = True
    lead = "["
    marker = "<|python_start|>"

    def __init__(self, tools: Tools) -> None:
        super().__init__(tools)
        self._list = _ListEnd()

    def section_end(self, body: str, final: bool) -> tuple[int, int] | None:
        found = self._section_end(body, final)
        if found is not None or final:
            self._list.reset()  # the section ends: the next one is read afresh
        return found

    def _section_end(self, body: str, final: bool) -> tuple[int, int] | None:
        scan = self._list
        if scan.pos < 0:  # the list is not known to be a call list yet
            i = skip_space(body)
            if i == len(body):
                return None
            opens = body[i] == "[" and _call_list_head(body, i)
            if opens is None:
                return None
            if not opens:
                return 0, 0
            scan.start(i)
        end = scan.find(body)
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
        return call_list(body)


def call_list(body: str) -> list[ToolCall] | None:
    """`[f(a=1), g()]` → its calls; None unless the text is exactly such a list
    (also used by lfm2, which wraps the same list in markers)."""
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


def _call_list_head(text: str, i: int) -> bool | None:
    """Whether the list at `i` opens as a call list does (`[name(`, or `[]`,
    which its parse turns down); None while that is still unknown. Prose such
    as `[1]` or `[see below]` is told apart without waiting for its end."""
    n = len(text)
    k = skip_space(text, i + 1)
    if k == n:
        return None
    if text[k] == "]":
        return True
    if not (text[k].isalpha() or text[k] == "_"):
        return False
    while k < n and (text[k].isalnum() or text[k] == "_"):
        k += 1
    k = skip_space(text, k)
    return None if k == n else text[k] == "("


class _ListEnd:
    """Where the Python list that opens a section ends. Strings (quotes of
    either kind, triple-quoted, escapes) are skipped.

    Like `jsonutil.JsonValueEnd`, it resumes where the last call stopped (the
    position, the brackets still open, the open string's quote) instead of
    reading the body again from `[`, so a long argument costs one pass, not
    one pass per token. `reset` before a new body."""

    __slots__ = ("pos", "_stack", "_quote", "_end")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.pos = -1  # next character to read; -1 before `start`
        self._stack: list[str] = []  # closers still owed
        self._quote = ""  # the open string's quote (', ", ''' or """); "" outside strings
        self._end: int | None = None  # once found

    def start(self, i: int) -> None:
        """The list opens at `i`."""
        self.pos = i

    def find(self, text: str) -> int | None:
        """Index just past the list; None while it is incomplete, -1 when its
        brackets do not match."""
        if self._end is not None:
            return self._end
        i, n = self.pos, len(text)
        stack, quote = self._stack, self._quote
        while i < n:
            c = text[i]
            if quote:
                if c == "\\":
                    if i + 1 == n:
                        break  # what it escapes has not arrived
                    i += 2
                    continue
                if c == quote[0]:
                    if text.startswith(quote, i):
                        i += len(quote)
                        quote = ""
                        continue
                    if n - i < len(quote) and text[i:] == c * (n - i):
                        break  # may still become the closing triple quote
                i += 1
                continue
            if c in "'\"":
                if n - i < 3 and text[i:] == c * (n - i):
                    break  # may still become a triple quote
                quote = c * 3 if text.startswith(c * 3, i) else c
                i += len(quote)
                continue
            i += 1
            if c in _CLOSE:
                stack.append(_CLOSE[c])
            elif c in ")]}":
                if not stack or stack.pop() != c:
                    self._end = -1
                    return -1
                if not stack:
                    self._end = i
                    return i
        self.pos, self._quote = i, quote
        return None
