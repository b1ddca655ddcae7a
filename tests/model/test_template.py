"""Chat template rendering: exact prompts per family, and the sandbox around them.

The templates under tests/fixtures/templates are rotor's own, written in the
style of each model family; the expected prompts below are written out by hand
from each family's format, so a template or renderer change that alters a
single character fails here.
"""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path

import pytest

from rotor.model.template import ChatTemplate, TemplateError

from support.models import fixture_template

DEEPSEEK_BOS = "<｜begin▁of▁sentence｜>"


def load(name: str, **tokens: str) -> ChatTemplate:
    return ChatTemplate(fixture_template(name), **tokens)


@pytest.fixture
def qwen() -> ChatTemplate:
    return load("chatml_qwen", eos_token="<|im_end|>")


@pytest.fixture
def llama() -> ChatTemplate:
    return load("llama31", bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")


@pytest.fixture
def mistral() -> ChatTemplate:
    return load("mistral", bos_token="<s>", eos_token="</s>")


@pytest.fixture
def harmony() -> ChatTemplate:
    return load("harmony")


@pytest.fixture
def deepseek() -> ChatTemplate:
    return load("deepseek", bos_token=DEEPSEEK_BOS, eos_token="<｜end▁of▁sentence｜>")


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"],
                    "default": "celsius",
                },
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the current time",
        "parameters": {"type": "object", "properties": {}},
    },
}
WEATHER_FUNCTION_JSON = (
    '{"name": "get_weather", "description": "Get the current weather", "parameters": '
    '{"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, '
    '"unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}}, '
    '"required": ["city"]}}'
)
WEATHER_TOOL_JSON = '{"type": "function", "function": ' + WEATHER_FUNCTION_JSON + "}"

SYSTEM_USER = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
]
MULTI_TURN = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "Tell me a joke."},
]
# arguments arrive as a compact JSON string, as OpenAI clients send them; the
# templates must see an object (re-serialised by tojson with its own spacing).
TOOL_CONVERSATION = [
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_abc123",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_abc123", "content": '{"temp": 21, "sky": "clear"}'},
    {"role": "assistant", "content": "It is 21 °C and clear in Paris."},
    {"role": "user", "content": "And in Tokyo?"},
]


def parallel_calls(content: str | None = None) -> list[dict]:
    """A user turn answered by two calls, then both results (second one first)."""
    return [
        {"role": "user", "content": "Compare Paris and the time."},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
        {"role": "tool", "tool_call_id": "call_1", "content": "21"},
    ]


# --- ChatML / Qwen ---------------------------------------------------------------------


def test_qwen_system_user(qwen: ChatTemplate) -> None:
    assert qwen.render(SYSTEM_USER) == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen_without_generation_prompt(qwen: ChatTemplate) -> None:
    assert qwen.render(SYSTEM_USER, add_generation_prompt=False) == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
    )


def test_qwen_tools_calls_and_results(qwen: ChatTemplate) -> None:
    assert qwen.render(TOOL_CONVERSATION, tools=[WEATHER_TOOL]) == (
        "<|im_start|>system\nYou are a weather bot.\n\n"
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n" + WEATHER_TOOL_JSON + "\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        "<|im_end|>\n"
        '<|im_start|>user\n<tool_response>\n{"temp": 21, "sky": "clear"}\n</tool_response>'
        "<|im_end|>\n"
        "<|im_start|>assistant\nIt is 21 °C and clear in Paris.<|im_end|>\n"
        "<|im_start|>user\nAnd in Tokyo?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen_tools_without_system_message(qwen: ChatTemplate) -> None:
    prompt = qwen.render([{"role": "user", "content": "Hi"}], tools=[WEATHER_TOOL])
    assert prompt.startswith("<|im_start|>system\n# Tools\n\nYou may call one or more functions")
    assert prompt.endswith(
        "</tool_call><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_qwen_parallel_calls_with_content_and_grouped_results(qwen: ChatTemplate) -> None:
    assert qwen.render(parallel_calls("Checking both.")) == (
        "<|im_start|>user\nCompare Paris and the time.<|im_end|>\n"
        "<|im_start|>assistant\nChecking both.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n"
        "<tool_response>\n12:00\n</tool_response>\n"
        "<tool_response>\n21\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen_multi_turn_replays_only_current_reasoning(qwen: ChatTemplate) -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "\nNeed the weather tool.\n",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "content": "21"},
    ]
    assert qwen.render(messages) == (
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nNeed the weather tool.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n21\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_chat_template_kwargs_enable_thinking(qwen: ChatTemplate) -> None:
    base = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    messages = [{"role": "user", "content": "Hi"}]
    assert qwen.render(messages) == base
    assert qwen.render(messages, enable_thinking=True) == base
    assert qwen.render(messages, enable_thinking=False) == base + "<think>\n\n</think>\n\n"
    assert qwen.render(messages, **{"enable_thinking": False}) == base + "<think>\n\n</think>\n\n"


def test_part_list_content(qwen: ChatTemplate) -> None:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "First line."},
                {"type": "image_url", "image_url": {"url": "data:,"}},
                {"type": "text", "text": "Second line."},
            ],
        },
    ]
    assert qwen.render(messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nFirst line.\nSecond line.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_bare_function_tools_render_like_openai_tools(qwen: ChatTemplate) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    wrapped = qwen.render(messages, tools=[WEATHER_TOOL])
    assert qwen.render(messages, tools=[WEATHER_TOOL["function"]]) == wrapped


def test_arguments_that_are_not_a_json_object_stay_strings(qwen: ChatTemplate) -> None:
    def call(arguments: str) -> dict:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": arguments}}],
        }

    prompt = qwen.render([call("not json {"), call("[1, 2]")], add_generation_prompt=False)
    assert '{"name": "f", "arguments": not json {}' in prompt
    assert '{"name": "f", "arguments": [1, 2]}' in prompt


# --- Llama 3.1 -------------------------------------------------------------------------

WEATHER_TOOL_JSON_INDENT4 = """{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {
                    "type": "string",
                    "description": "City name"
                },
                "unit": {
                    "type": "string",
                    "enum": [
                        "celsius",
                        "fahrenheit"
                    ],
                    "default": "celsius"
                }
            },
            "required": [
                "city"
            ]
        }
    }
}"""


def test_llama_system_user(llama: ChatTemplate) -> None:
    assert llama.render(SYSTEM_USER) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "You are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_llama_multi_turn_without_system_and_date_string(llama: ChatTemplate) -> None:
    assert llama.render(MULTI_TURN, date_string="01 Jan 2025") == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 01 Jan 2025\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_llama_tools_calls_and_ipython_results(llama: ChatTemplate) -> None:
    assert llama.render(TOOL_CONVERSATION, tools=[WEATHER_TOOL]) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Environment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "You are a weather bot.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n"
        "Given the following functions, please respond with a JSON for a function call with "
        "its proper arguments that best answers the given prompt.\n\n"
        'Respond in the format {"name": function name, "parameters": dictionary of argument '
        "name and its value}.Do not use variables.\n\n"
        + WEATHER_TOOL_JSON_INDENT4
        + "\n\nWeather in Paris?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
        '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'
        "<|start_header_id|>ipython<|end_header_id|>\n\n"
        '{"temp": 21, "sky": "clear"}<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
        "It is 21 °C and clear in Paris.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnd in Tokyo?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_llama_rejects_parallel_calls_with_its_own_message(llama: ChatTemplate) -> None:
    with pytest.raises(TemplateError) as info:
        llama.render(parallel_calls())
    assert str(info.value) == "This model only supports one tool call per assistant message"


# --- Mistral ---------------------------------------------------------------------------


def test_mistral_system_user(mistral: ChatTemplate) -> None:
    assert mistral.render(SYSTEM_USER) == "<s>[INST] You are terse.\n\nWhat is 2+2?[/INST]"


def test_mistral_multi_turn(mistral: ChatTemplate) -> None:
    assert mistral.render(MULTI_TURN) == (
        "<s>[INST] Hi[/INST] Hello! How can I help?</s>[INST] Tell me a joke.[/INST]"
    )


def test_mistral_tools_calls_and_results(mistral: ChatTemplate) -> None:
    assert mistral.render(TOOL_CONVERSATION, tools=[WEATHER_TOOL]) == (
        "<s>[INST] Weather in Paris?[/INST]"
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, '
        '"id": "call_abc123"}]</s>'
        '[TOOL_RESULTS] {"content": {"temp": 21, "sky": "clear"}, "call_id": "call_abc123"}'
        "[/TOOL_RESULTS]"
        " It is 21 °C and clear in Paris.</s>"
        "[AVAILABLE_TOOLS] [" + WEATHER_TOOL_JSON + "][/AVAILABLE_TOOLS]"
        "[INST] You are a weather bot.\n\nAnd in Tokyo?[/INST]"
    )


def test_mistral_parallel_calls(mistral: ChatTemplate) -> None:
    assert mistral.render(parallel_calls()) == (
        "<s>[INST] Compare Paris and the time.[/INST]"
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}, '
        '{"name": "get_time", "arguments": {}, "id": "call_2"}]</s>'
        '[TOOL_RESULTS] {"content": 12:00, "call_id": "call_2"}[/TOOL_RESULTS]'
        '[TOOL_RESULTS] {"content": 21, "call_id": "call_1"}[/TOOL_RESULTS]'
    )


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        [{"role": "assistant", "content": "a"}],
        [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}],
    ],
)
def test_mistral_raises_when_roles_do_not_alternate(
    mistral: ChatTemplate, messages: list[dict]
) -> None:
    with pytest.raises(TemplateError) as info:
        mistral.render(messages)
    assert str(info.value) == (
        "After the optional system message, conversation roles must alternate "
        "user/assistant/user/assistant/..."
    )


# --- Harmony (gpt-oss) -----------------------------------------------------------------

HARMONY_SYSTEM = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
)


def test_harmony_system_user(harmony: ChatTemplate) -> None:
    assert harmony.render(SYSTEM_USER, conversation_start_date="2025-06-28") == (
        HARMONY_SYSTEM + "<|end|>"
        "<|start|>developer<|message|># Instructions\n\nYou are terse.<|end|>"
        "<|start|>user<|message|>What is 2+2?<|end|>"
        "<|start|>assistant"
    )


def test_harmony_multi_turn_with_reasoning_effort(harmony: ChatTemplate) -> None:
    prompt = harmony.render(
        MULTI_TURN, conversation_start_date="2025-06-28", reasoning_effort="high"
    )
    assert prompt == (
        HARMONY_SYSTEM.replace("Reasoning: medium", "Reasoning: high") + "<|end|>"
        "<|start|>user<|message|>Hi<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|end|>"
        "<|start|>user<|message|>Tell me a joke.<|end|>"
        "<|start|>assistant"
    )


def test_harmony_tools_calls_and_results(harmony: ChatTemplate) -> None:
    prompt = harmony.render(
        TOOL_CONVERSATION, tools=[WEATHER_TOOL, TIME_TOOL], conversation_start_date="2025-06-28"
    )
    assert prompt == (
        HARMONY_SYSTEM + "\nCalls to these tools must go to the commentary channel: 'functions'."
        "<|end|>"
        "<|start|>developer<|message|># Instructions\n\nYou are a weather bot.\n\n"
        "# Tools\n\n## functions\n\nnamespace functions {\n\n"
        "// Get the current weather\n"
        "type get_weather = (_: {\n"
        "// City name\n"
        "city: string,\n"
        'unit?: "celsius" | "fahrenheit", // default: celsius\n'
        "}) => any;\n\n"
        "// Get the current time\n"
        "type get_time = () => any;\n\n"
        "} // namespace functions<|end|>"
        "<|start|>user<|message|>Weather in Paris?<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>'
        "<|start|>functions.get_weather to=assistant<|channel|>commentary"
        '<|message|>{"temp": 21, "sky": "clear"}<|end|>'
        "<|start|>assistant<|channel|>final<|message|>It is 21 °C and clear in Paris.<|end|>"
        "<|start|>user<|message|>And in Tokyo?<|end|>"
        "<|start|>assistant"
    )


def test_harmony_results_are_named_by_their_call_id(harmony: ChatTemplate) -> None:
    messages = parallel_calls()
    messages[1]["reasoning_content"] = "Two lookups."
    prompt = harmony.render(messages, conversation_start_date="2025-06-28")
    assert prompt == (
        HARMONY_SYSTEM + "<|end|>"
        "<|start|>user<|message|>Compare Paris and the time.<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Two lookups.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>'
        "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json"
        "<|message|>{}<|call|>"
        "<|start|>functions.get_time to=assistant<|channel|>commentary<|message|>12:00<|end|>"
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>21<|end|>"
        "<|start|>assistant"
    )


def test_strftime_now_dates_the_harmony_prompt(harmony: ChatTemplate) -> None:
    before = datetime.now().strftime("%Y-%m-%d")
    prompt = harmony.render([{"role": "user", "content": "Hi"}])
    after = datetime.now().strftime("%Y-%m-%d")
    assert f"\nCurrent date: {before}\n" in prompt or f"\nCurrent date: {after}\n" in prompt


# --- DeepSeek V3 -----------------------------------------------------------------------


def test_deepseek_system_user(deepseek: ChatTemplate) -> None:
    assert deepseek.render(SYSTEM_USER) == (
        "<｜begin▁of▁sentence｜>You are terse.<｜User｜>What is 2+2?<｜Assistant｜>"
    )


def test_deepseek_multi_turn_drops_earlier_thinking(deepseek: ChatTemplate) -> None:
    messages = copy.deepcopy(MULTI_TURN)
    messages[1]["content"] = "<think>Be nice.</think>Hello! How can I help?"
    assert deepseek.render(messages) == (
        "<｜begin▁of▁sentence｜><｜User｜>Hi"
        "<｜Assistant｜>Hello! How can I help?<｜end▁of▁sentence｜>"
        "<｜User｜>Tell me a joke.<｜Assistant｜>"
    )


def test_deepseek_tools_calls_and_results(deepseek: ChatTemplate) -> None:
    assert deepseek.render(TOOL_CONVERSATION, tools=[WEATHER_TOOL]) == (
        "<｜begin▁of▁sentence｜>You are a weather bot.\n\n"
        "## Tools\n\n### Function\n\nYou have the following functions available:\n\n"
        "- `get_weather`:\n```json\n" + WEATHER_FUNCTION_JSON + "\n```"
        "<｜User｜>Weather in Paris?"
        "<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>'
        '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{"temp": 21, "sky": "clear"}'
        "<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
        "It is 21 °C and clear in Paris.<｜end▁of▁sentence｜>"
        "<｜User｜>And in Tokyo?<｜Assistant｜>"
    )


def test_deepseek_parallel_calls_end_in_tool_outputs(deepseek: ChatTemplate) -> None:
    assert deepseek.render(parallel_calls("Let me check.")) == (
        "<｜begin▁of▁sentence｜><｜User｜>Compare Paris and the time."
        "<｜Assistant｜>Let me check.<｜tool▁calls▁begin｜>"
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>\n'
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
        "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>12:00<｜tool▁output▁end｜>\n"
        "<｜tool▁output▁begin｜>21<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
    )


# --- environment: globals, filters, tags -----------------------------------------------

USER_HI = [{"role": "user", "content": "Hi"}]


def test_raise_exception_message_is_the_error_message() -> None:
    template = ChatTemplate("{{ raise_exception('System role not supported') }}")
    with pytest.raises(TemplateError) as info:
        template.render(USER_HI)
    assert str(info.value) == "System role not supported"
    assert isinstance(info.value, ValueError)


def test_strftime_now() -> None:
    template = ChatTemplate("{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%d %b %Y') }}")
    before = datetime.now()
    rendered = template.render(USER_HI)
    after = datetime.now()
    assert rendered in {
        f"{d.strftime('%Y-%m-%d')}|{d.strftime('%d %b %Y')}" for d in (before, after)
    }


def test_tojson_keeps_html_order_and_non_ascii() -> None:
    template = ChatTemplate("{{ messages[0] | tojson }}")
    message = {"role": "user", "content": "<b>&'café' 日本</b>", "a": 1}
    assert template.render([message]) == (
        '{"role": "user", "content": "<b>&\'café\' 日本</b>", "a": 1}'
    )


def test_tojson_arguments() -> None:
    template = ChatTemplate(
        "{{ messages[0] | tojson(indent=2) }}\n"
        "{{ messages[0] | tojson(separators=[',', ':']) }}\n"
        "{{ messages[0] | tojson(sort_keys=true) }}\n"
        "{{ messages[0] | tojson(ensure_ascii=true) }}"
    )
    rendered = template.render([{"role": "user", "content": "é"}])
    assert rendered == (
        '{\n  "role": "user",\n  "content": "é"\n}\n'
        '{"role":"user","content":"é"}\n'
        '{"content": "é", "role": "user"}\n'
        '{"role": "user", "content": "\\u00e9"}'
    )


def test_generation_block_renders_its_body() -> None:
    template = ChatTemplate(
        "{% for m in messages %}"
        "[{% generation %}{% set inner = 'x' %}{{ m.content }}{{ inner }}{% endgeneration %}]"
        "{% endfor %}{{ inner is defined }}"
    )
    assert template.render(USER_HI + [{"role": "assistant", "content": "Yo"}]) == (
        "[Hix][Yox]False"
    )


def test_generation_block_in_deepseek_template(deepseek: ChatTemplate) -> None:
    assert "{% generation %}" in deepseek.source
    prompt = deepseek.render(MULTI_TURN[:2], add_generation_prompt=False)
    assert prompt == (
        "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hello! How can I help?<｜end▁of▁sentence｜>"
    )


def test_loop_controls() -> None:
    template = ChatTemplate(
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{{ m.content }}{% if m.content == 'B' %}{% break %}{% endif %}{% endfor %}"
    )
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "A"},
        {"role": "user", "content": "B"},
        {"role": "user", "content": "C"},
    ]
    assert template.render(messages) == "AB"


def test_variables_passed_to_the_template() -> None:
    template = ChatTemplate(
        "{{ messages | length }}|{{ tools is none }}|{{ documents is none }}|"
        "{{ add_generation_prompt }}|{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|"
        "{{ pad_token }}|{{ custom }}",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    assert template.render(USER_HI, custom=7) == "1|True|True|True|<s>|</s>|<unk>|<pad>|7"


def test_unset_special_tokens_render_empty_not_none() -> None:
    assert ChatTemplate("[{{ bos_token }}{{ eos_token }}]").render(USER_HI) == "[]"


def test_kwargs_cannot_replace_the_models_special_tokens() -> None:
    template = ChatTemplate("{{ bos_token }}|{{ eos_token }}", bos_token="<s>", eos_token="</s>")
    assert template.render(USER_HI, bos_token="EVIL", eos_token="EVIL") == "<s>|</s>"


def test_empty_tools_are_none_and_documents_pass_through() -> None:
    template = ChatTemplate(
        "{{ tools is none }}|{% for d in documents %}{{ d.title }}: {{ d.text }}{% endfor %}"
    )
    documents = [{"title": "Doc", "text": "Body"}]
    assert template.render(USER_HI, tools=[], documents=documents) == "True|Doc: Body"


def test_non_object_inputs_are_rejected() -> None:
    template = ChatTemplate("x")
    with pytest.raises(TemplateError, match=r"messages\[0\]"):
        template.render(["hi"])  # type: ignore[list-item]
    with pytest.raises(TemplateError, match=r"tools\[0\]"):
        template.render(USER_HI, tools=["f"])  # type: ignore[list-item]
    with pytest.raises(TemplateError, match=r"documents\[0\]"):
        template.render(USER_HI, documents=["d"])  # type: ignore[list-item]


# --- continue_final_message ------------------------------------------------------------


def test_continue_final_message_cuts_after_the_content(qwen: ChatTemplate) -> None:
    messages = [
        {"role": "user", "content": "Complete: Autumn moon"},
        {"role": "assistant", "content": "Autumn moon"},
    ]
    prompt = qwen.render(messages, add_generation_prompt=False, continue_final_message=True)
    assert prompt == (
        "<|im_start|>user\nComplete: Autumn moon<|im_end|>\n<|im_start|>assistant\nAutumn moon"
    )


def test_continue_final_message_keeps_trailing_space_only_if_rendered(
    qwen: ChatTemplate, llama: ChatTemplate
) -> None:
    messages = [
        {"role": "user", "content": "Go on."},
        {"role": "assistant", "content": "Once upon a "},
    ]
    assert qwen.render(messages, add_generation_prompt=False, continue_final_message=True).endswith(
        "<|im_start|>assistant\nOnce upon a "
    )
    # Llama trims message content, so the cut lands right after the trimmed text.
    assert llama.render(
        messages, add_generation_prompt=False, continue_final_message=True
    ).endswith("<|start_header_id|>assistant<|end_header_id|>\n\nOnce upon a")


def test_continue_final_message_with_part_list_uses_last_text(qwen: ChatTemplate) -> None:
    messages = [
        {"role": "user", "content": "Go on."},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "First."}, {"type": "text", "text": "Then"}],
        },
    ]
    prompt = qwen.render(messages, add_generation_prompt=False, continue_final_message=True)
    assert prompt.endswith("<|im_start|>assistant\nFirst.\nThen")


def test_continue_final_message_in_deepseek(deepseek: ChatTemplate) -> None:
    messages = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2,"}]
    prompt = deepseek.render(messages, add_generation_prompt=False, continue_final_message=True)
    assert prompt == "<｜begin▁of▁sentence｜><｜User｜>Count<｜Assistant｜>1, 2,"


def test_continue_final_message_and_generation_prompt_conflict(qwen: ChatTemplate) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]
    with pytest.raises(TemplateError, match="cannot both be true"):
        qwen.render(messages, continue_final_message=True)


@pytest.mark.parametrize(
    "final",
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": "  "},
        {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
    ],
)
def test_continue_final_message_needs_assistant_text(qwen: ChatTemplate, final: dict) -> None:
    with pytest.raises(TemplateError, match="continue_final_message"):
        qwen.render([final], add_generation_prompt=False, continue_final_message=True)


def test_continue_final_message_content_missing_from_output() -> None:
    template = ChatTemplate("{% for m in messages %}<{{ m.role }}>{% endfor %}")
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]
    with pytest.raises(TemplateError, match="does not appear"):
        template.render(messages, add_generation_prompt=False, continue_final_message=True)


# --- errors and the sandbox ------------------------------------------------------------


def test_template_that_does_not_compile() -> None:
    with pytest.raises(TemplateError) as info:
        ChatTemplate("{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    assert str(info.value).startswith("chat template does not compile: ")
    assert "(line 2)" in str(info.value)


def test_unknown_filter_does_not_compile() -> None:
    with pytest.raises(TemplateError, match="No filter named 'no_such_filter'"):
        ChatTemplate("{{ messages | no_such_filter }}")


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("\n{{ messages[0].content + 1 }}", "can only concatenate str"),
        ("\n{{ messages[0].missing.deeper }}", "'dict object' has no attribute 'missing'"),
        ("\n{{ range(10 ** 9) | list }}", "Range too big"),
        ("\n{{ strftime_now(1) }}", "strftime() argument 1 must be str"),
    ],
)
def test_render_errors_name_the_problem(source: str, problem: str) -> None:
    with pytest.raises(TemplateError) as info:
        ChatTemplate(source).render(USER_HI)
    message = str(info.value)
    assert message.startswith("chat template error: ")
    assert problem in message
    assert message.endswith("(line 2)")


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{% if ''.__class__ %}leak{% endif %}",
        "{{ messages.__class__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ strftime_now.__code__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ lipsum.__globals__['os'] }}",
        "{{ '{0.__class__}'.format('') }}",
        "{{ messages.append({'role': 'user'}) }}",
        "{{ messages[0].update({'role': 'system'}) }}",
        "{{ messages[0].pop('role') }}",
    ],
)
def test_sandbox_escapes_fail(source: str) -> None:
    with pytest.raises(TemplateError, match="unsafe"):
        ChatTemplate(source).render([{"role": "user", "content": "Hi"}])


def test_sandbox_never_executes(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    source = (
        "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}"
        "{{ lipsum.__globals__['os'].system('touch " + str(marker) + "') }}"
    )
    with pytest.raises(TemplateError):
        ChatTemplate(source).render(USER_HI)
    assert not marker.exists()


def test_callers_messages_and_tools_are_not_mutated(
    qwen: ChatTemplate, harmony: ChatTemplate
) -> None:
    messages = copy.deepcopy(TOOL_CONVERSATION)
    tools = [WEATHER_TOOL["function"], TIME_TOOL]
    snapshot = copy.deepcopy((messages, tools))
    qwen.render(messages, tools=tools)
    harmony.render(messages, tools=tools, conversation_start_date="2025-06-28")
    assert (messages, tools) == snapshot
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'


def test_compiled_once_per_source() -> None:
    a = ChatTemplate("{{ messages[0].content }}")
    b = ChatTemplate("{{ messages[0].content }}", bos_token="<s>")
    assert a._template is b._template


def test_a_template_cannot_exhaust_memory_with_repetition() -> None:
    for source in ("{{ 'x' * 10**9 }}", "{{ ['a'] * 100000000 }}", "{{ 2 ** 100000 }}"):
        with pytest.raises(TemplateError, match="too large|that large"):
            ChatTemplate(source).render([{"role": "user", "content": "hi"}])
    # Ordinary arithmetic and short repetition still work.
    out = ChatTemplate("{{ '-' * 3 }}{{ 2 ** 3 }}{{ 4 * 5 }}").render(
        [{"role": "user", "content": "hi"}], add_generation_prompt=False
    )
    assert out == "---820"
