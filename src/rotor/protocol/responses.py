"""OpenAI Responses API request model (`POST /v1/responses`).

Unknown fields are rejected (a 400 naming them), as in protocol/openai.py.
As OpenAI's, a response is stored unless `store` is false, a request may
continue a stored one (`previous_response_id`), and `background` runs it
without waiting (it needs `store`, and rotor streams no background response:
both 400s naming `background`). api/responses/ keeps them (store.py, the
record's format in record.py). Responses are not modelled: api/responses/
builds them from an allow-list of fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rotor.protocol.mock import MockField
from rotor.protocol.openai import check_schema
from rotor.protocol.parts import RESPONSES_MEDIA, refuse_media


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# -- content parts -------------------------------------------------------------------------


class InputText(_Strict):
    type: Literal["input_text"]
    text: str


class OutputText(_Strict):
    """Text of an earlier assistant output, sent back as input."""

    type: Literal["output_text"]
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] | None = None


class Refusal(_Strict):
    type: Literal["refusal"]
    refusal: str


class InputImage(_Strict):
    """An image by URL (data: or https:). A `file_id` names an uploaded file,
    which rotor does not keep: a 400 naming it."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high"] = "auto"

    @model_validator(mode="after")
    def _url(self) -> InputImage:
        if self.file_id is not None:
            raise ValueError(
                "file_id names an uploaded file, which rotor does not keep: send the image "
                "as image_url (a data: or https: URL)"
            )
        if self.image_url is None:
            raise ValueError("an input_image needs an image_url")
        return self


class UnsupportedInput(BaseModel):
    """Files and audio: modelled only so that they get a clear 400."""

    model_config = ConfigDict(extra="allow")
    type: Literal["input_file", "input_audio"]

    @model_validator(mode="after")
    def _unsupported(self) -> UnsupportedInput:
        raise ValueError(f"{self.type} is not supported: rotor takes text and images")


Part = Annotated[
    InputText | OutputText | Refusal | InputImage | UnsupportedInput, Field(discriminator="type")
]


# -- input items ---------------------------------------------------------------------------


class MessageItem(_Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]
    id: str | None = None
    status: str | None = None


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[Part]
    id: str | None = None
    status: str | None = None


class ReasoningText(_Strict):
    type: Literal["reasoning_text"]
    text: str


class SummaryText(_Strict):
    type: Literal["summary_text"]
    text: str


class ReasoningItem(_Strict):
    """An earlier reasoning output sent back; it becomes the next assistant turn's reasoning."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


def _item_type(value: Any) -> object:
    """Easy input messages (`{"role", "content"}`) carry no type: they are messages.
    Whatever a client sent as the type is the tag: pydantic refuses one that is no tag."""
    if isinstance(value, dict):
        return value.get("type", "message")
    return getattr(value, "type", "message")


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_type),
]


# -- tools and settings ----------------------------------------------------------------------


class FunctionTool(_Strict):
    """Function tools only; built-in tools (web search, file search, ...) are 400s."""

    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _schema(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return v if v is None else check_schema(v, "parameters")


class FunctionChoice(_Strict):
    type: Literal["function"]
    name: str


class ReasoningConfig(_Strict):
    """`effort` reaches the chat template; rotor writes no summaries (items carry the text)."""

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class FormatText(_Strict):
    type: Literal["text"]


class FormatJSONObject(_Strict):
    type: Literal["json_object"]


class FormatJSONSchema(_Strict):
    type: Literal["json_schema"]
    name: str
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_schema(v, "schema")

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class TextConfig(_Strict):
    format: (
        Annotated[FormatText | FormatJSONObject | FormatJSONSchema, Field(discriminator="type")]
        | None
    ) = None


# `include` values rotor takes: its reasoning items carry their text in the
# clear, so what a client asks encrypted for it already has (nothing is added).
INCLUDABLE = frozenset({"reasoning.encrypted_content"})


# -- the request -------------------------------------------------------------------------------


class ResponsesRequest(_Strict):
    model: str | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = Field(default=None, min_length=1)
    background: bool = False
    include: list[str] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    # rotor extensions: stop strings (validated as chat validates them), the mocker's script
    stop: str | list[str] | None = None
    mock: MockField | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _text_only(cls, v: Any) -> Any:
        refuse_media(v, "input", RESPONSES_MEDIA, "part")
        return v

    @field_validator("input")
    @classmethod
    def _input(cls, v: str | list[Any]) -> str | list[Any]:
        if isinstance(v, list) and not v:
            raise ValueError("input must not be empty")
        return v

    @field_validator("background")
    @classmethod
    def _background(cls, v: bool, info: ValidationInfo) -> bool:
        if v and not info.data.get("store", True):
            raise ValueError("a background response is kept to be fetched: it needs store true")
        if v and info.data.get("stream"):
            raise ValueError(
                "rotor does not stream background responses: poll GET /v1/responses/{id}"
            )
        return v

    @field_validator("include")
    @classmethod
    def _include(cls, v: list[str] | None) -> list[str] | None:
        for value in v or ():
            if value not in INCLUDABLE:
                raise ValueError(f"include {value!r} is not supported: rotor has no such data")
        return v
