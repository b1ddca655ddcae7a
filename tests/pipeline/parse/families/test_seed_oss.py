"""seed_oss, from its format (Seed-OSS's chat template and vLLM's reference
parser): Qwen3-Coder's `<function=f><parameter=a>` inside `<seed:tool_call>`;
a closed `<seed:think>` block is content, calls in it included."""

from __future__ import annotations

from support.parsing import Case, call_cases, family_tests

FAMILY = "seed_oss"

WEATHER = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "int"}},
    }
}


def call(name: str, *params: tuple[str, str]) -> str:
    """One call the way Seed-OSS writes it."""
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params)
    return f"<seed:tool_call>\n<function={name}>\n{body}</function>\n</seed:tool_call>"


BARCELONA = call("get_weather", ("location", "Barcelona, Spain"), ("unit", "celsius"))
THOUGHT_WITH_CALL = (
    "<seed:think>\nGot it, the user asked for the weather in Barcelona, Spain. Let me format "
    "the function call correctly. The format is " + BARCELONA + ". Let me go with that. Then "
    "wait for the result to come back.</seed:think>"
)
BUDGET_512 = (
    "<seed:think>The user's current thinking budget is 512.</seed:cot_budget_reflect>\nLet me "
    "analyze the question.\n<seed:cot_budget_reflect>I have used 131 tokens, and there are 381 "
    "tokens remaining for use.</seed:cot_budget_reflect>\n The unit can be omitted.</seed:think>"
)

CASES = call_cases(call, WEATHER) + [
    Case(
        "empty_args",
        "<seed:tool_call>\n<function=ping>\n</function>\n</seed:tool_call>",
        None,
        [("ping", {})],
    ),
    Case(
        "value_newlines_belong_to_the_markup",
        "<seed:tool_call>\n<function=w>\n<parameter=code>\nx = 1\n</parameter>\n</function>\n"
        "</seed:tool_call>",
        None,
        [("w", {"code": "x = 1"})],
    ),
    Case(
        "malformed_missing_function_end_is_content",
        "<seed:tool_call>\n<function=f>\n<parameter=a>1</parameter>\n</seed:tool_call> after",
        "<seed:tool_call>\n<function=f>\n<parameter=a>1</parameter>\n</seed:tool_call> after",
    ),
    Case(
        "qwen_markers_are_plain_text_here",
        "<tool_call>\n<function=f>\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n</function>\n</tool_call>",
    ),
    Case(
        "cut_off_incomplete_is_content",
        "Sure <seed:tool_call>\n<function=f>\n<parameter=a>1",
        "Sure <seed:tool_call>\n<function=f>\n<parameter=a>1",
    ),
    Case(
        "cut_off_complete_body_recovered",
        "<seed:tool_call>\n<function=f>\n<parameter=a>b</parameter>\n</function>\n</seed:to",
        None,
        [("f", {"a": "b"})],
    ),
    # Seed-OSS thinks in `<seed:think>` … `</seed:think>`, and with an
    # unlimited thinking budget it writes the call it plans inside its
    # thought before writing it for real: vLLM's reference parser reads calls
    # after a closed think block only, and returns the block as content
    # (tests/tool_parsers/test_seed_oss_tool_parser.py).
    Case(
        "unlimited_thinking_budget_the_call_comes_back_once",
        THOUGHT_WITH_CALL + BARCELONA,
        THOUGHT_WITH_CALL,
        [("get_weather", {"location": "Barcelona, Spain", "unit": "celsius"})],
    ),
    Case(
        "thinking_budget_reflections",
        BUDGET_512 + "\n" + BARCELONA,
        BUDGET_512 + "\n",
        [("get_weather", {"location": "Barcelona, Spain", "unit": "celsius"})],
    ),
    Case(
        "zero_thinking_budget",
        "<seed:think>\n</seed:cot_budget_reflect>\n</seed:cot_budget_reflect>\nThe current "
        "thinking budget is 0, so I will directly start answering the question.\n</seed:think>\n"
        + call("f", ("q", "x")),
        "<seed:think>\n</seed:cot_budget_reflect>\n</seed:cot_budget_reflect>\nThe current "
        "thinking budget is 0, so I will directly start answering the question.\n</seed:think>\n",
        [("f", {"q": "x"})],
    ),
    Case(
        "a_thought_that_is_only_a_call_is_content",
        "<seed:think>" + call("f", ("q", "x")) + "</seed:think>Sure.",
        "<seed:think>" + call("f", ("q", "x")) + "</seed:think>Sure.",
    ),
    Case(
        "two_thoughts",
        "<seed:think>a</seed:think>b<seed:think>c " + call("f") + "</seed:think>" + call("g"),
        "<seed:think>a</seed:think>b<seed:think>c " + call("f") + "</seed:think>",
        [("g", {})],
    ),
    # A think block the model never closes: its call is read (vLLM too).
    Case(
        "call_in_a_thought_never_closed_is_read",
        "<seed:think>I will call it.\n" + call("f", ("q", "x")) + "\nthen done",
        "<seed:think>I will call it.\n\nthen done",
        [("f", {"q": "x"})],
    ),
    Case(
        "broken_call_in_a_thought_never_closed_is_content",
        "<seed:think>hmm <seed:tool_call>\n<function=f>\n<parameter=q>x",
        "<seed:think>hmm <seed:tool_call>\n<function=f>\n<parameter=q>x",
    ),
    Case(
        "cut_off_in_a_thought_is_content",
        "<seed:think>partial thought </seed:thi",
        "<seed:think>partial thought </seed:thi",
    ),
    Case(
        "think_tag_inside_a_value_is_the_value",
        call("f", ("q", "a <seed:think> b")) + " and </seed:think> after",
        " and </seed:think> after",
        [("f", {"q": "a <seed:think> b"})],
    ),
    Case("plain_text", "a < b and <seed: and <function=x>", "a < b and <seed: and <function=x>"),
]


globals().update(
    family_tests(FAMILY, CASES, special_tokens=True, fast_path="no markup here, just words")
)
