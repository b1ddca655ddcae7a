"""deepseek_v4, from its format (DeepSeek V4 keeps V3.2's DSML inside a
`<｜DSML｜tool_calls>` section, as vLLM's parser reads it): invokes, each
parameter marked raw string or JSON."""

from __future__ import annotations

from support.dsml import dsml_cases
from support.parsing import family_tests

FAMILY = "deepseek_v4"
CASES = dsml_cases("<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>")

globals().update(
    family_tests(FAMILY, CASES, special_tokens=False, fast_path="no markup here, just words")
)
