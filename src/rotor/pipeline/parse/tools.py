"""The tool-call family registry: one line per family, imported on first use."""

from __future__ import annotations

import importlib

from rotor.pipeline.parse.base import ToolParser

_FAMILIES = "rotor.pipeline.parse.families"

# name → "module:Class" under pipeline/parse/families/
TOOL_PARSERS: dict[str, str] = {
    "hermes": "hermes:HermesParser",
    "llama3_json": "llama3_json:Llama3JsonParser",
    "mistral": "mistral:MistralParser",
    "pythonic": "pythonic:PythonicParser",
    "harmony": "harmony:HarmonyParser",
    "beam": "beam:BeamParser",
    "deepseek_v3": "deepseek_v3:DeepSeekV3Parser",
    "deepseek_v31": "deepseek_v31:DeepSeekV31Parser",
    "qwen3_coder": "qwen3_coder:Qwen3CoderParser",
    "kimi_k2": "kimi_k2:KimiK2Parser",
    "glm45": "glm45:Glm45Parser",
    "minimax_m2": "minimax_m2:MiniMaxM2Parser",
    "phi4": "phi4:Phi4Parser",
    "nemotron_deci": "nemotron_deci:NemotronDeciParser",
    "jamba": "jamba:JambaParser",
    "granite": "granite:GraniteParser",
    "internlm": "internlm:InternLMParser",
    "deepseek_v32": "deepseek_v32:DeepSeekV32Parser",
    "deepseek_v4": "deepseek_v4:DeepSeekV4Parser",
    "seed_oss": "seed_oss:SeedOssParser",
    "step3": "step3:Step3Parser",
    "lfm2": "lfm2:Lfm2Parser",
    "gigachat3": "gigachat3:GigaChat3Parser",
}


def tool_parser(name: str) -> type[ToolParser]:
    """The parser class of a family; ValueError listing the valid names otherwise."""
    try:
        target = TOOL_PARSERS[name]
    except KeyError:
        valid = ", ".join(sorted(TOOL_PARSERS))
        raise ValueError(f"unknown tool-call parser {name!r}; valid: {valid}") from None
    module, name = target.split(":")
    cls = getattr(importlib.import_module(f"{_FAMILIES}.{module}"), name)
    if not (isinstance(cls, type) and issubclass(cls, ToolParser)):
        raise TypeError(f"{target} is not a tool-call parser")
    return cls
