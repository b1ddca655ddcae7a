"""OpenAI request models (chat completions, completions) and their validation.

Unknown fields are rejected (a 400 naming them), never silently ignored.
Responses are not modelled here: the shapers in api/openai/ build them from
an allow-list of fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from rotor.protocol import ignored
from rotor.protocol.mock import MockField
from rotor.protocol.parts import check_chat_content

if TYPE_CHECKING:
    from typing_extensions import TypeIs

MAX_N = 16
# The most alternatives per token a request may ask for (top_logprobs,
# completions' logprobs, prompt_logprobs): vLLM's default --max-logprobs.
MAX_LOGPROBS = 20
MAX_SESSION_ID = 256  # characters of a session id
# A cache_salt as vLLM's OpenAI server takes it (its validate_cache_salt): at
# most 128 characters, none of these; so a salt rotor takes, vLLM takes too.
MAX_CACHE_SALT = 128
CACHE_SALT_FORBIDDEN = frozenset("@/\\\x00")
MAX_STOP = 4
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def stop_list(value: str | list[str] | None, noun: str = "stop strings") -> list[str] | None:
    """Stop strings as a list: at most MAX_STOP, none empty (`noun` names them in errors)."""
    if value is None:
        return None
    stops = [value] if isinstance(value, str) else list(value)
    if len(stops) > MAX_STOP:
        raise ValueError(f"at most {MAX_STOP} {noun} are allowed, got {len(stops)}")
    if any(s == "" for s in stops):
        raise ValueError(f"{noun} must not be empty")
    return stops


_JSON_TYPES = frozenset({"null", "boolean", "object", "array", "number", "string", "integer"})


def _loose_types_named(node: Any) -> Any:
    """`node` with every `type` name that JSON Schema does not know (`int`,
    `float`, `dict`: real Qwen tool schemas write them, and the families type
    them by prefix) read as "string", for the meta-schema check only."""
    if isinstance(node, list):
        return [_loose_types_named(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _loose_types_named(v) for k, v in node.items()}
    kind = node.get("type")
    if isinstance(kind, str) and kind not in _JSON_TYPES:
        out["type"] = "string"
    elif isinstance(kind, list) and all(isinstance(k, str) for k in kind):
        out["type"] = sorted({k if k in _JSON_TYPES else "string" for k in kind})
    return out


def check_schema(schema: Any, where: str) -> dict[str, Any]:
    """`schema` when it is a valid JSON Schema object (draft 2020-12, which
    accepts the earlier drafts' common keywords; a `type` may be any type
    name, see `_loose_types_named`); ValueError naming `where` and the fault
    otherwise, so a broken tool schema is the client's 400 rather than a
    constraint an engine cannot build."""
    if not isinstance(schema, dict):
        raise ValueError(f"{where} must be a JSON schema object, got {type(schema).__name__}")
    try:
        Draft202012Validator.check_schema(_loose_types_named(schema))
    except SchemaError as e:
        path = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in e.path)
        raise ValueError(f"{where}{path} is not valid JSON Schema: {e.message}") from None
    return schema


def check_tools(
    tools: list[dict[str, Any]] | None, field: str = "tools"
) -> list[dict[str, Any]] | None:
    """Function tools, each with a name and a valid parameters schema (ValueError naming it)."""
    for i, t in enumerate(tools or []):
        fn = t.get("function")
        if t.get("type", "function") != "function" or not isinstance(fn, dict):
            raise ValueError(f"{field}[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"{field}[{i}].function.name is required")
        parameters = fn.get("parameters")
        if parameters is not None:
            check_schema(parameters, f"{field}[{i}].function.parameters")
    return tools


def field_error(field: str, message: str, value: Any) -> ValidationError:
    """A validation error located at `field`, for a check that spans fields:
    its 400 names `field` as `param`."""
    error = PydanticCustomError("value_error", message)
    return ValidationError.from_exception_data(
        "request", [InitErrorDetails(type=error, loc=(field,), input=value)]
    )


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False
    continuous_usage_stats: bool = False


SO_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs` (its StructuredOutputsParams): exactly one
    kind of constraint plus options; clients of vLLM >= 0.12 send this
    instead of the removed guided_* fields."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    json_: dict[str, Any] | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = Field(default=None, min_length=1)
    json_object: bool | None = None
    structural_tag: str | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None

    @field_validator("json_")
    @classmethod
    def _json(cls, v: dict[str, Any] | str | None) -> dict[str, Any] | str | None:
        return check_json_schema(v, "structured_outputs.json")

    @field_validator("json_object")
    @classmethod
    def _json_object(cls, v: bool | None) -> bool | None:
        if v is False:  # vLLM counts False as a kind; it would constrain nothing
            raise ValueError("json_object must be true when given")
        return v

    @field_validator("structural_tag")
    @classmethod
    def _structural_tag(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                tag = orjson.loads(v)
            except orjson.JSONDecodeError:
                raise ValueError("structural_tag must be a JSON object as a string") from None
            if not isinstance(tag, dict):
                raise ValueError("structural_tag must be a JSON object as a string")
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> StructuredOutputs:
        given = self.kinds()
        if len(given) != 1:
            raise ValueError(
                f"exactly one of {', '.join(SO_KINDS)} must be given, got "
                f"{', '.join(given) if given else 'none'}"
            )
        return self

    def kinds(self) -> list[str]:
        """The constraint kinds given (validation leaves exactly one)."""
        values: list[Any] = [self.json_, self.regex, self.choice, self.grammar]
        values += [self.json_object, self.structural_tag]
        return [k for k, v in zip(SO_KINDS, values, strict=True) if v is not None]

    def constraint(self) -> dict[str, Any]:
        """rotor's internal constraint: a kind with a guided_* or
        response_format twin maps to exactly what the twin maps to, so the
        engines see one constraint however it was spelled."""
        if self.json_ is not None:
            guided: dict[str, Any] = {"type": "json_schema", "json_schema": self.json_}
        elif self.regex is not None:
            guided = {"type": "regex", "regex": self.regex}
        elif self.choice is not None:
            guided = {"type": "choice", "choice": self.choice}
        elif self.json_object:
            guided = {"type": "json_schema", "json_schema": {"type": "object"}}
        elif self.grammar is not None:
            guided = {"type": "grammar", "grammar": self.grammar}
        else:  # the client's own tag, not Beam's turn grammar (type "structural_tag")
            guided = {"type": "client_structural_tag", "structural_tag": self.structural_tag}
        options: dict[str, Any] = {}
        if self.disable_any_whitespace:
            options["disable_any_whitespace"] = True
        if self.disable_additional_properties:
            options["disable_additional_properties"] = True
        if self.whitespace_pattern is not None:
            options["whitespace_pattern"] = self.whitespace_pattern
        if options:
            guided["options"] = options
        return guided


def check_json_schema(v: dict[str, Any] | str | None, where: str) -> dict[str, Any] | str | None:
    """`v` when it is a JSON schema, as an object or as JSON text (ValueError naming `where`)."""
    if isinstance(v, dict):
        check_schema(v, where)
    elif isinstance(v, str):
        try:
            parsed = orjson.loads(v)
        except orjson.JSONDecodeError:
            raise ValueError(f"{where} as a string must hold a JSON schema") from None
        check_schema(parsed, where)
    return v


def _ignored_fields(name: str, names: dict[str, str]) -> type[BaseModel]:
    """A base declaring `names` as optional fields of any value: accepted, never used."""
    fields: dict[str, Any] = {n: (Any, None) for n in names}
    return create_model(name, __base__=BaseModel, **fields)


if TYPE_CHECKING:
    # Made at run time from the ignored.py tables, so the checker cannot see their fields:
    # to it they are bare models, and code that reads an ignored field is an error.
    _CommonIgnored = BaseModel
    _ChatIgnored = BaseModel
else:
    _CommonIgnored = _ignored_fields("_CommonIgnored", ignored.COMMON)
    _ChatIgnored = _ignored_fields("_ChatIgnored", ignored.CHAT)

LOGIT_BIAS_LIMIT = 100.0


class SamplingFields(_CommonIgnored):
    """Fields shared by chat and completions (OpenAI + vLLM extensions); the
    accepted-and-ignored ones come from protocol/ignored.py."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    user: str | None = None
    logit_bias: dict[str, float] | None = None
    # vLLM-style extensions
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    top_k: int | None = None
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool | None = None
    # vLLM: the prompt's and each choice's token ids, as the engine took and made them
    return_token_ids: bool | None = None
    # vLLM: each prompt token's logprob (and this many alternatives), not streamed
    prompt_logprobs: int | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    # vLLM >= 0.12: the same constraints (and more) in one object
    structured_outputs: StructuredOutputs | None = None
    # vLLM: lower is scheduled earlier (0 by default); nonzero only to an
    # engine started with --scheduling-policy priority (pipeline/params.py)
    priority: int = Field(default=0, ge=-(2**63), le=2**63 - 1)
    # rotor extensions
    mock: MockField | None = None
    # the conversation this turn belongs to (as the x-rotor-session-id header):
    # a frontend keeps its turns on one worker
    session_id: str | None = Field(default=None, min_length=1, max_length=MAX_SESSION_ID)
    # vLLM's: the tenant's prefix-cache salt; requests with different salts
    # share no cached prefix (EngineRequest.cache_salt)
    cache_salt: str | None = None

    @field_validator("cache_salt")
    @classmethod
    def _cache_salt(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must be a non-empty string if given")
        if len(v) > MAX_CACHE_SALT:
            raise ValueError(f"must be at most {MAX_CACHE_SALT} characters, got {len(v)}")
        if any(c in CACHE_SALT_FORBIDDEN for c in v):
            raise ValueError("must not contain '@', '/', '\\' or NUL")
        return v

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> list[str] | None:
        return stop_list(v)

    @field_validator("prompt_logprobs")
    @classmethod
    def _prompt_logprobs(cls, v: int | None) -> int | None:
        if v is not None and not 0 <= v <= MAX_LOGPROBS:
            raise ValueError(
                f"must be between 0 and {MAX_LOGPROBS} (the alternatives given per prompt "
                f"token; -1, the whole vocabulary, is not served), got {v}"
            )
        return v

    @model_validator(mode="after")
    def _prompt_logprobs_not_streamed(self) -> SamplingFields:
        if self.stream and self.prompt_logprobs:  # (as vLLM: 0 passes, and nothing is sent)
            raise field_error(
                "prompt_logprobs",
                "prompt_logprobs are not available when stream is true",
                self.prompt_logprobs,
            )
        return self

    @property
    def stop_strings(self) -> list[str] | None:
        """`stop` as its validator leaves it: a list (the field's type is what a client sends)."""
        stop = self.stop
        return [stop] if isinstance(stop, str) else stop

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (v or {}).items():
            if not key.isdigit():
                raise ValueError(f"keys must be token ids as strings, got {key!r}")
            if not -LOGIT_BIAS_LIMIT <= bias <= LOGIT_BIAS_LIMIT:
                raise ValueError(f"bias of token {key} must be in [-100, 100], got {bias}")
        return v

    def bias_map(self) -> dict[int, float] | None:
        """`logit_bias` as the engine takes it: token id -> bias."""
        if not self.logit_bias:
            return None
        return {int(k): float(b) for k, b in self.logit_bias.items()}

    @field_validator("stream_options")
    @classmethod
    def _stream_options(cls, v: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        if v is not None and info.data.get("stream") is False:
            raise ValueError("allowed only when stream is true")
        return v

    @field_validator("guided_json")
    @classmethod
    def _guided_json(cls, v: dict[str, Any] | str | None) -> dict[str, Any] | str | None:
        return check_json_schema(v, "guided_json")

    @model_validator(mode="after")
    def _one_guided(self) -> SamplingFields:
        given = [
            name
            for name in ("guided_json", "guided_regex", "guided_choice")
            if getattr(self, name) is not None
        ]
        if len(given) > 1:
            raise field_error(
                "guided_json",
                f"only one of guided_json, guided_regex, guided_choice may be given "
                f"(got {', '.join(given)})",
                self.guided_json,
            )
        if given and self.structured_outputs is not None:
            raise field_error(
                "structured_outputs",
                f"give structured_outputs or {given[0]}, not both (they are two spellings "
                f"of one decoding constraint)",
                None,
            )
        return self

    def prompt_logprobs_wanted(self) -> int | None:
        """How many alternatives per prompt token the engine is asked for
        (None: no prompt logprobs); a stream sends none."""
        return None if self.stream else self.prompt_logprobs

    def error_params(self) -> dict[str, str] | None:
        """How a 400 about the constraint names the field the client sent:
        engines name the guided_* twin, a structured_outputs client gets its own."""
        if self.structured_outputs is None:
            return None
        return {
            "guided_json": "structured_outputs",
            "guided_regex": "structured_outputs.regex",
            "guided_choice": "structured_outputs.choice",
        }

    def guided(self) -> dict[str, Any] | None:
        """The decoding constraint the request asks for (validation allows at most one)."""
        if self.structured_outputs is not None:
            return self.structured_outputs.constraint()
        if self.guided_json is not None:
            return {"type": "json_schema", "json_schema": self.guided_json}
        if self.guided_regex is not None:
            return {"type": "regex", "regex": self.guided_regex}
        if self.guided_choice is not None:
            return {"type": "choice", "choice": self.guided_choice}
        return None


class ChatCompletionRequest(SamplingFields, _ChatIgnored):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    # the legacy form of tools (mapped to tools / tool_choice)
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    # vLLM: a template for this request (sandboxed as any), documents for RAG templates
    chat_template: str | None = None
    documents: list[dict[str, Any]] | None = None
    # Beam: a request can opt out of the turn grammar.
    turn_grammar: bool = True

    @field_validator("messages")
    @classmethod
    def _messages(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not v:
            raise ValueError("messages must not be empty")
        for i, m in enumerate(v):
            role = m.get("role")
            if not isinstance(role, str) or role not in ROLES:
                raise ValueError(f"messages[{i}].role {role!r} is not one of {sorted(ROLES)}")
            content = m.get("content")
            if content is not None and not isinstance(content, (str, list)):
                raise ValueError(f"messages[{i}].content must be a string or a list of parts")
        check_chat_content(v)
        return v

    @field_validator("tools")
    @classmethod
    def _tools(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        return check_tools(v)

    @field_validator("modalities")
    @classmethod
    def _modalities(cls, v: Any) -> Any:
        if v is not None and v != ["text"]:
            raise ValueError(f"only ['text'] can be served, got {v!r}")
        return v

    @model_validator(mode="after")
    def _legacy_functions(self) -> ChatCompletionRequest:
        """`functions` / `function_call` become `tools` / `tool_choice` (the
        answer carries `tool_calls`, as it does for tools)."""
        if self.functions is not None:
            if self.tools is not None:
                raise field_error("functions", "give tools or functions, not both", None)
            tools = [{"type": "function", "function": f} for f in self.functions]
            try:
                self.tools = check_tools(tools, "functions")
            except ValueError as e:
                raise field_error("functions", str(e), None) from None
        call = self.function_call
        if call is not None:
            if self.tool_choice is not None:
                raise field_error(
                    "function_call", "give tool_choice or function_call, not both", call
                )
            if call in ("none", "auto"):
                self.tool_choice = call
            elif isinstance(call, dict) and isinstance(call.get("name"), str) and len(call) == 1:
                self.tool_choice = {"type": "function", "function": {"name": call["name"]}}
            else:
                raise field_error("function_call", "must be 'none', 'auto' or {'name': ...}", call)
        ignored.log_ignored(self, {**ignored.COMMON, **ignored.CHAT})
        return self

    @field_validator("response_format")
    @classmethod
    def _response_format(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None and v.get("type") == "json_schema":
            spec = v.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise ValueError("json_schema must be an object with a 'schema'")
            check_schema(spec["schema"], "response_format.json_schema.schema")
        return v

    @model_validator(mode="after")
    def _one_format(self) -> ChatCompletionRequest:
        fmt = self.response_format
        if self.structured_outputs is not None and fmt is not None and fmt.get("type") != "text":
            raise field_error(
                "structured_outputs",
                f"give structured_outputs or response_format {fmt.get('type')!r}, not both "
                f"(they are two spellings of one decoding constraint)",
                None,
            )
        return self

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v and info.data.get("logprobs") is False:
            raise ValueError("needs logprobs to be true")
        return v

    def output_limit(self) -> int | None:
        """`max_completion_tokens` wins over `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens


def _token_ids(prompt: list[str] | list[int] | list[list[int]]) -> TypeIs[list[int]]:
    """Token ids are one prompt; a validated list holds one type of item."""
    return all(isinstance(x, int) for x in prompt)


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    # 0 only with echo: the prompt alone (scored, with logprobs)
    max_tokens: int | None = Field(default=None, ge=0)
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("prompt must not be empty")
        return v

    @model_validator(mode="after")
    def _max_tokens_zero(self) -> CompletionRequest:
        if self.max_tokens == 0 and not self.echo:
            raise field_error(
                "max_tokens",
                "max_tokens 0 is allowed only with echo (the prompt alone); "
                "otherwise it must be at least 1",
                0,
            )
        return self

    def prompt_logprobs_wanted(self) -> int | None:
        """How many alternatives per prompt token the engine is asked for
        (None: no prompt logprobs): `prompt_logprobs`, and with echo the
        prompt's share of `logprobs`; a stream sends only the latter."""
        wanted = [self.logprobs] if self.echo and self.logprobs is not None else []
        if self.prompt_logprobs is not None and not self.stream:
            wanted.append(self.prompt_logprobs)
        return max(wanted) if wanted else None

    @model_validator(mode="after")
    def _log_ignored(self) -> CompletionRequest:
        ignored.log_ignored(self, {**ignored.COMMON, **ignored.COMPLETIONS})
        return self

    @field_validator("suffix")
    @classmethod
    def _suffix(cls, v: str | None) -> str | None:
        if v:
            raise ValueError("not supported")
        return v

    @field_validator("best_of")
    @classmethod
    def _best_of(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and "n" in info.data and v != info.data["n"]:
            raise ValueError("not supported (it must equal n)")
        return v

    def output_limit(self) -> int | None:
        return self.max_tokens

    def prompts(self) -> list[str | list[int]]:
        """The prompt as a list of prompts, each text or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if _token_ids(p):
            return [list(p)]
        return list(p)
