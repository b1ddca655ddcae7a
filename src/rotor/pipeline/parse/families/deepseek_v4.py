"""deepseek_v4 — DeepSeek V4: V3.2's DSML calls, in a `<｜DSML｜tool_calls>`
section (see `_dsml.py`)."""

from __future__ import annotations

from rotor.pipeline.parse.families._dsml import DsmlParser


class DeepSeekV4Parser(DsmlParser):
    name = "deepseek_v4"
    start_markers = ("<｜DSML｜tool_calls>",)
    end_markers = ("</｜DSML｜tool_calls>",)
