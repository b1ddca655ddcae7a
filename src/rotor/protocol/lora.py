"""The bodies of `/v1/loras` and vLLM's adapter routes (api/lora.py), validated
strictly like every request body (an unknown field is a 400 naming it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LoadLoraRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    lora_name: str = Field(min_length=1, description="the model name its requests use")
    lora_path: str = Field(
        min_length=1, description="the adapter's directory (PEFT's files) on the server"
    )


class UnloadLoraRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    lora_name: str = Field(min_length=1)
