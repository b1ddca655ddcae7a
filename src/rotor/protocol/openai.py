"""OpenAI request models (chat completions, completions) and their validation.

Unknown fields are rejected (a 400 naming them), never silently ignored.
Responses are not modelled here: the serializers in pipeline/stream.py build
them from an allow-list of fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from rotor.protocol.mock import MockField

MAX_N = 16
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


def field_error(field: str, message: str, value: Any) -> ValidationError:
    """A validation error located at `field`, for a check that spans fields:
    its 400 names `field` as `param`."""
    error = PydanticCustomError("value_error", message)
    return ValidationError.from_exception_data(
        "request", [InitErrorDetails(type=error, loc=(field,), input=value)]
    )


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    continuous_usage_stats: bool = False


class SamplingFields(BaseModel):
    """Fields shared by chat and completions (OpenAI + vLLM extensions)."""

    model_config = ConfigDict(extra="forbid")

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
    # vLLM-style extensions
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    top_k: int | None = None
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    # rotor extensions
    mock: MockField | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> list[str] | None:
        return stop_list(v)

    @field_validator("stream_options")
    @classmethod
    def _stream_options(cls, v: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        if v is not None and info.data.get("stream") is False:
            raise ValueError("allowed only when stream is true")
        return v

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
        return self

    def guided(self) -> dict[str, Any] | None:
        """The decoding constraint the request asks for (validation allows at most one)."""
        if self.guided_json is not None:
            return {"type": "json_schema", "json_schema": self.guided_json}
        if self.guided_regex is not None:
            return {"type": "regex", "regex": self.guided_regex}
        if self.guided_choice is not None:
            return {"type": "choice", "choice": self.guided_choice}
        return None


class ChatCompletionRequest(SamplingFields):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
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
        return v

    @field_validator("tools")
    @classmethod
    def _tools(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, t in enumerate(v or []):
            fn = t.get("function")
            if t.get("type", "function") != "function" or not isinstance(fn, dict):
                raise ValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
            if not isinstance(fn.get("name"), str) or not fn["name"]:
                raise ValueError(f"tools[{i}].function.name is required")
            parameters = fn.get("parameters")
            if parameters is not None and not isinstance(parameters, dict):
                raise ValueError(
                    f"tools[{i}].function.parameters must be a JSON schema object, "
                    f"got {type(parameters).__name__}"
                )
        return v

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v and info.data.get("logprobs") is False:
            raise ValueError("needs logprobs to be true")
        return v

    def output_limit(self) -> int | None:
        """`max_completion_tokens` wins over `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("prompt must not be empty")
        return v

    @field_validator("echo")
    @classmethod
    def _echo(cls, v: bool) -> bool:
        if v:
            raise ValueError("not supported")
        return v

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
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]
