"""deepseek_v32, from its format (DeepSeek V3.2's DSML, as its encoding and
vLLM's parser write it): a `<｜DSML｜function_calls>` section of invokes, each
parameter marked raw string or JSON."""

from __future__ import annotations

from support.dsml import dsml_cases
from support.parsing import family_tests

FAMILY = "deepseek_v32"
CASES = dsml_cases("<｜DSML｜function_calls>", "</｜DSML｜function_calls>")

globals().update(
    family_tests(FAMILY, CASES, special_tokens=False, fast_path="no markup here, just words")
)
