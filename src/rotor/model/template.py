"""HF-compatible chat templates, rendered in a sandbox.

A model's chat template is Jinja code shipped with its weights. The model was
trained on exactly the text `transformers.apply_chat_template` produces, so
rotor renders with the same environment options, globals and filters. The
template is also untrusted code, so it runs in jinja2's immutable sandbox, and
every way it can fail becomes one `TemplateError` the API turns into a 400.
"""

from __future__ import annotations

import functools
import json
import re
import string
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.filters
import jinja2.nodes
import jinja2.utils
import markupsafe
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.parser import Parser
from jinja2.runtime import Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Variables rotor sets itself (and render's own parameters): `chat_template_kwargs`
# cannot replace them. Callers that pass such kwargs through filter with this set.
RESERVED = frozenset(
    {
        "messages",
        "tools",
        "documents",
        "add_generation_prompt",
        "continue_final_message",
        "bos_token",
        "eos_token",
        "unk_token",
        "pad_token",
    }
)


class TemplateError(ValueError):
    """A template failed to render; str(e) is a message fit for a 400 response
    (for raise_exception, exactly the template's own message)."""


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: renders its body unchanged.

    transformers uses the tag to mask assistant tokens for training; serving
    needs none of that, but templates that use it must still compile. The body
    is a call block, as in transformers, so `set` inside it stays local.
    """

    tags = {"generation"}

    def parse(self, parser: Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _body(self, caller: Macro) -> str:
        return str(caller())


class _CodeGenerator(CodeGenerator):
    """Compiles `~` to a call of the environment's `checked_concat`, as the
    sandbox compiles intercepted binary operators to `call_binop`."""

    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            join = "markup_join"
        else:
            join = "str_join"
        self.write(f"environment.checked_concat({join}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _Sandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, but unsafe attribute access fails at once, and
    the operations that build a large value from a small template are capped.

    jinja2's own sandbox answers `''.__class__` with an undefined value that
    prints as ''; a template probing for an escape should fail loudly instead
    of rendering a prompt that silently lacks text.

    Capped (a SecurityError before the value is built): what one `*`, `+`,
    `~` or `**` makes, the widths of `%` formatting and of the `format`,
    `center` and `indent` filters, of the str methods `center`, `ljust`,
    `rjust`, `zfill` and `expandtabs`, and of `str.format` fields, and
    `lipsum`'s paragraphs. The total output is capped by `render(max_chars=)`;
    the run time by the time budget of the preparer's threads the frontend
    renders in (pipeline/preparer.py).
    """

    code_generator_class = _CodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and abs(right) > _MAX_EXPONENT:
            raise SecurityError(f"exponent {right} is too large for a template")
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if _sized(seq) and isinstance(times, int):
                    _check_size(len(seq) * times)
        elif operator == "+" and _sized(left) and _sized(right):
            _check_size(len(left) + len(right))
        elif operator == "%" and isinstance(left, str):
            _check_printf(left, right)
        return super().call_binop(context, operator, left, right)

    def checked_concat(self, join: Any, parts: tuple[Any, ...]) -> Any:
        _check_size(sum(len(p) for p in parts if isinstance(p, str)))
        return join(parts)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            name = getattr(__obj, "__name__", None)
            if name in _PADDING_METHODS:
                _check_padding(owner, name, args, kwargs)
            elif name in ("format", "format_map"):
                _check_format_fields(owner)
        return super().call(__context, __obj, *args, **kwargs)


_MAX_SIZE = 1_000_000  # characters or items one operation may produce
_MAX_EXPONENT = 1_000
_PADDING_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
# A printf conversion's width and precision (`%-10.3f`, `%*d`, `%(name)5s`).
_PRINTF_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _sized(value: Any) -> bool:
    return isinstance(value, (str, list, tuple))


def _check_size(size: int) -> None:
    if size > _MAX_SIZE:
        raise SecurityError("a template may not build a value that large")


def _check_width(width: Any) -> None:
    if isinstance(width, int) and width > _MAX_SIZE:
        raise SecurityError(f"width {width} is too large for a template")


def _check_printf(fmt: str, values: Any) -> None:
    """`fmt % values` stays small: no width or precision over the cap, `*` included."""
    starred = False
    for match in _PRINTF_SPEC.finditer(fmt):
        for number in match.groups():
            if number == "*":
                starred = True
            elif number is not None:
                _check_width(int(number))
    if starred:
        for value in values if isinstance(values, tuple) else (values,):
            _check_width(value)


def _check_padding(text: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    width = args[0] if args else kwargs.get("tabsize", 8)
    if method == "expandtabs" and isinstance(width, int):
        _check_size(len(text) + text.count("\t") * width)
    else:
        _check_width(width)


_FORMAT_WIDTH = re.compile(r"(\d+)")


def _check_format_fields(fmt: str) -> None:
    """`fmt.format(...)` stays small: no field width or precision over the cap."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format will raise the same error itself
    for _, _, spec, _ in fields:
        if spec:
            for number in _FORMAT_WIDTH.findall(spec):
                _check_width(int(number))


def _lipsum(n: object = 5, html: bool = True, min: int = 20, max: object = 100) -> str:  # noqa: A002
    """jinja2's `lipsum`, with at most a few paragraphs of a bounded length (the
    template's arguments are whatever it passes: the bounds are checked)."""
    if not isinstance(n, int) or n > _MAX_LIPSUM or not isinstance(max, int) or max > 1000:
        raise SecurityError("lipsum: too much text for a template")
    return str(jinja2.utils.generate_lorem_ipsum(n, html, min, max))


_MAX_LIPSUM = 100


def _center(value: Any, width: int = 80) -> str:
    _check_width(width)
    return jinja2.filters.do_center(value, width)


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    _check_printf(markupsafe.soft_str(value), kwargs or args)
    return jinja2.filters.do_format(value, *args, **kwargs)


def _indent(value: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    text = markupsafe.soft_str(value)
    size = len(width) if isinstance(width, str) else width
    if isinstance(size, int):
        _check_size(len(text) + size * (text.count("\n") + 1))
    return jinja2.filters.do_indent(text, width, first, blank)


def _raise_exception(message: str) -> NoReturn:
    """The `raise_exception` global: the template's message becomes the 400 message."""
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    """The `strftime_now` global (Llama 3.2, gpt-oss put today's date in the prompt)."""
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    indent: int | None = None,
    separators: Sequence[str] | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = False,
) -> str:
    """transformers' `tojson`: no HTML escaping, key order kept, non-ASCII kept.

    jinja2's built-in filter escapes `<>&'` and sorts keys, which would change
    the prompt the model was trained on.
    """
    pair = None
    if separators is not None:
        item, key = separators  # two of them, else a ValueError (as json.dumps raises)
        pair = (item, key)
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=pair, sort_keys=sort_keys
    )


_ENV = _Sandbox(
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=[_GenerationTag, jinja2.ext.loopcontrols],
)
_ENV.filters["tojson"] = _tojson
_ENV.filters["center"] = _center
_ENV.filters["format"] = _format
_ENV.filters["indent"] = _indent
_ENV.globals["raise_exception"] = _raise_exception
_ENV.globals["strftime_now"] = _strftime_now
_ENV.globals["lipsum"] = _lipsum


@functools.lru_cache(maxsize=64)
def _compile(source: str) -> jinja2.Template:
    """Compile once per distinct source: every request of a model shares it."""
    try:
        return _ENV.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"chat template does not compile: {e.message} (line {e.lineno})") from e


class ChatTemplate:
    """One model's chat template, compiled, with the model's special tokens."""

    def __init__(
        self,
        source: str,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        unk_token: str | None = None,
        pad_token: str | None = None,
    ) -> None:
        self.source = source
        self._template = _compile(source)
        # Unset tokens stay undefined (render as ''), as in transformers; None would print "None".
        tokens = {
            "bos_token": bos_token,
            "eos_token": eos_token,
            "unk_token": unk_token,
            "pad_token": pad_token,
        }
        self._tokens = {name: value for name, value in tokens.items() if value is not None}

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        documents: list[dict[str, Any]] | None = None,
        max_chars: int | None = None,
        **kwargs: Any,
    ) -> str:
        """Render the prompt; extra kwargs (chat_template_kwargs) become template
        variables. A prompt growing past `max_chars` stops with a TemplateError."""
        final_text = None
        if continue_final_message:
            if add_generation_prompt:
                raise TemplateError(
                    "continue_final_message and add_generation_prompt cannot both be true"
                )
            final_text = _final_text(messages)

        variables = {name: value for name, value in kwargs.items() if name not in RESERVED}
        variables.update(self._tokens)
        variables["messages"] = _prepare_messages(messages)
        variables["tools"] = _prepare_tools(tools)
        variables["documents"] = _prepare_documents(documents)
        variables["add_generation_prompt"] = add_generation_prompt

        try:
            rendered = self._render(variables, max_chars)
        except TemplateError:
            raise
        except Exception as e:  # untrusted code: any failure is the request's 400
            raise TemplateError(_describe(e)) from e

        if final_text is not None:
            rendered = _cut_after(rendered, final_text)
        return rendered

    def _render(self, variables: dict[str, Any], max_chars: int | None) -> str:
        if max_chars is None:
            return self._template.render(variables)
        parts = []
        size = 0
        for part in self._template.generate(variables):
            size += len(part)
            if size > max_chars:
                raise TemplateError(
                    f"the rendered prompt is over {max_chars} characters, more than the "
                    "model's context can hold"
                )
            parts.append(part)
        return "".join(parts)


def _prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Shallow copies, with assistant tool-call arguments parsed as transformers expects.

    OpenAI clients send `arguments` as a JSON string; HF templates expect an
    object (they `tojson` it or iterate its items). The caller's dicts are
    never modified.
    """
    prepared = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TemplateError(f"messages[{i}] must be an object")
        copy = dict(message)
        tool_calls = copy.get("tool_calls")
        if copy.get("role") == "assistant" and isinstance(tool_calls, (list, tuple)):
            copy["tool_calls"] = [_prepare_tool_call(call) for call in tool_calls]
        prepared.append(copy)
    return prepared


def _prepare_tool_call(call: Any) -> Any:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    function = dict(call["function"])
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        # Only a JSON object is "arguments"; anything else stays the client's string.
        if isinstance(parsed, dict):
            function["arguments"] = parsed
    return {**call, "function": function}


def _prepare_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]] | None:
    """OpenAI-shaped tools pass through; bare function dicts are wrapped into that shape.

    HF templates read `tool.function.name` (the shape `get_json_schema` makes).
    An empty list is None, so templates testing `tools is not none` do not
    announce an empty tool set.
    """
    if not tools:
        return None
    prepared: list[Mapping[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise TemplateError(f"tools[{i}] must be an object")
        if "type" in tool or "function" in tool:
            prepared.append(tool)
        else:
            prepared.append({"type": "function", "function": tool})
    return prepared


def _prepare_documents(
    documents: Sequence[Mapping[str, Any]] | None,
) -> Sequence[Mapping[str, Any]] | None:
    if documents is None:
        return None
    for i, document in enumerate(documents):
        if not isinstance(document, Mapping):
            raise TemplateError(f"documents[{i}] must be an object")
    return documents


def _final_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text the model is asked to continue: the final assistant message's (last) text."""
    final = messages[-1] if messages else None
    if not isinstance(final, Mapping) or final.get("role") != "assistant":
        raise TemplateError(
            "continue_final_message requires the final message to be an assistant message"
        )
    content = final.get("content")
    text = ""
    if isinstance(content, str):
        text = content
    elif isinstance(content, (list, tuple)):
        for part in reversed(content):
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                text = part["text"]
                break
    if not text.strip():
        raise TemplateError(
            "continue_final_message requires text in the final assistant message to continue"
        )
    return text


def _cut_after(rendered: str, text: str) -> str:
    """Cut the prompt right after the last occurrence of the final message's text.

    Templates often `trim` content, so the text is looked up stripped; its
    trailing whitespace is kept only where the template kept it.
    """
    stripped = text.strip()
    at = rendered.rfind(stripped)
    if at < 0:
        raise TemplateError(
            "continue_final_message: the final message's text does not appear in the "
            "rendered prompt (the chat template changed or dropped it)"
        )
    unled = text.lstrip()
    if rendered.startswith(unled, at):
        return rendered[: at + len(unled)]
    return rendered[: at + len(stripped)]


def _describe(error: Exception) -> str:
    """A 400-worthy message: what went wrong and, when known, on which template line."""
    message = f"chat template error: {str(error) or type(error).__name__}"
    line = _template_line(error)
    return f"{message} (line {line})" if line is not None else message


def _template_line(error: Exception) -> int | None:
    """The deepest template line in the traceback (jinja2 rewrites frames to template lines)."""
    line = None
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
