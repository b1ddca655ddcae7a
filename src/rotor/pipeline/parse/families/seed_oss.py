"""seed_oss — ByteDance Seed-OSS: Qwen3-Coder's call layout inside its own
section markers,

    <seed:tool_call>
    <function=f>
    <parameter=a>1</parameter>
    </function>
    </seed:tool_call>

one newline on each side of a value belongs to the markup; values are typed
as Qwen's reference converter types them (Seed-OSS's reference parser is that
converter)."""

from __future__ import annotations

from rotor.pipeline.parse.families.qwen3_coder import Qwen3CoderParser


class SeedOssParser(Qwen3CoderParser):
    name = "seed_oss"
    # `<seed:tool_call>` / `</seed:tool_call>` are single tokens of Seed-OSS's
    # tokenizer (its reference parser looks them up by id).
    needs_special_tokens = True
    start_markers = ("<seed:tool_call>",)
    end_markers = ("</seed:tool_call>",)
    call_starts = None  # the section marker alone starts a call
