"""deepseek_v32 — DeepSeek V3.2: DSML calls in a `<｜DSML｜function_calls>`
section (see `_dsml.py`)."""

from __future__ import annotations

from rotor.pipeline.parse.families._dsml import DsmlParser


class DeepSeekV32Parser(DsmlParser):
    name = "deepseek_v32"
    start_markers = ("<｜DSML｜function_calls>",)
    end_markers = ("</｜DSML｜function_calls>",)
