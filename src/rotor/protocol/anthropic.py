"""Anthropic Messages API request models (`/v1/messages`, `/v1/messages/count_tokens`).

Unknown fields are rejected (a 400 naming them), never silently ignored, as in
protocol/openai.py. Responses are not modelled: api/anthropic/ builds them
from an allow-list of fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rotor.protocol.mock import MockField
from rotor.protocol.openai import check_schema, stop_list
from rotor.protocol.parts import ANTHROPIC_MEDIA, refuse_media


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# -- content blocks --------------------------------------------------------------------
# `cache_control` is accepted everywhere Anthropic allows it: prefix caching is
# automatic in rotor's engines, so the hint needs no action.


class TextBlock(_Strict):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[dict[str, Any]] | None = None


class Base64Source(_Strict):
    type: Literal["base64"]
    media_type: str
    data: str


class URLSource(_Strict):
    type: Literal["url"]
    url: str


class ImageBlock(_Strict):
    """An image, inline (base64) or by URL; it becomes the chat image_url part
    (a data: URL for base64). Anthropic's `file` sources name uploaded files,
    which rotor does not keep: a 400."""

    type: Literal["image"]
    source: Annotated[Base64Source | URLSource, Field(discriminator="type")]
    cache_control: dict[str, Any] | None = None

    @field_validator("source", mode="before")
    @classmethod
    def _source(cls, v: Any) -> Any:
        if isinstance(v, dict) and v.get("type") == "file":
            raise ValueError(
                "file sources name uploaded files, which rotor does not keep: send the "
                "image as a base64 or url source"
            )
        return v

    def url(self) -> str:
        """The image as the chat API's image_url takes it."""
        if isinstance(self.source, URLSource):
            return self.source.url
        return f"data:{self.source.media_type};base64,{self.source.data}"


class ToolUseBlock(_Strict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolResultBlock(_Strict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] = ""
    is_error: bool = False
    cache_control: dict[str, Any] | None = None


class ThinkingBlock(_Strict):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Strict):
    type: Literal["redacted_thinking"]
    data: str


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class InputMessage(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


# -- tools and settings ------------------------------------------------------------------


class Tool(_Strict):
    """A client tool. Server tools (web search, code execution) have other types: 400."""

    name: str = Field(min_length=1)
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None

    @field_validator("input_schema")
    @classmethod
    def _schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_schema(v, "input_schema")


class ToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _name(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice of type 'tool' needs a name")
        if self.type != "tool" and self.name is not None:
            raise ValueError(f"tool_choice of type {self.type!r} takes no name")
        return self


class ThinkingConfig(_Strict):
    """`disabled` turns reasoning off for the request; rotor does not enforce a budget."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1)


class Metadata(_Strict):
    user_id: str | None = None


# -- requests ------------------------------------------------------------------------------


class CountTokensRequest(_Strict):
    """What a prompt is made of; `/v1/messages/count_tokens` takes exactly this."""

    model: str | None = None
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _text_only(cls, v: Any) -> Any:
        refuse_media(v, "messages", ANTHROPIC_MEDIA, "block")
        return v


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=1)
    stop_sequences: list[str] | None = None
    metadata: Metadata | None = None
    stream: bool = False
    # rotor extension: the mocker's scripted output
    mock: MockField | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, v: list[str] | None) -> list[str] | None:
        return stop_list(v, "stop sequences")
