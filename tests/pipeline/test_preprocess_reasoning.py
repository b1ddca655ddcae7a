"""Where a choice's reasoning parser starts, as preprocess decides it from the
request: the rendered prompt (does it end with the start tag?) and
`chat_template_kwargs` (thinking off: no parser). Driven through `prepare_chat`
with the built-in ChatML model and Nemotron 3's reasoning parser, its choice
fed the model's output as token ids.

Nemotron 3's template ends the prompt with `<think>\\n` when thinking is on and
with `<think></think>` when `enable_thinking` is false; SGLang's nemotron_3
parser is not forced into reasoning (its template detection is), vLLM's
nemotron_v3 turns a plain answer into content when `enable_thinking` is false.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rotor.model.builtin import builtin_test_model
from rotor.pipeline.choice import ChoicePipeline
from rotor.pipeline.parse.base import Piece
from rotor.pipeline.preprocess import prepare_chat
from rotor.pipeline.served import ServedModel
from rotor.protocol.engine import EngineOutput
from rotor.protocol.openai import ChatCompletionRequest

from support.parsing import fold

USER = [{"role": "user", "content": "What is 2+2?"}]

# Nemotron 3's generation prompt, on ChatML (the built-in tokenizer's).
NEMOTRON3_TEMPLATE = """\
{%- for message in messages %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think></think>{% else %}<think>
{% endif %}{% endif %}"""

# A template that closes the block itself whatever the request says (thinking
# off in the template, not in chat_template_kwargs).
CLOSED_TEMPLATE = """\
{%- for message in messages %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
<think></think>{% endif %}"""


def nemotron3() -> ServedModel:
    card, tok = builtin_test_model()
    card = dataclasses.replace(card, reasoning_parser=None, tool_call_parser=None)
    return ServedModel.build(card, tok, reasoning_parser_name="nemotron3")


def answer(model: ServedModel, output: str, **fields: Any) -> tuple[str | None, str | None]:
    """(reasoning, content) of the one choice, its output fed a token at a time."""
    req = ChatCompletionRequest.model_validate({"messages": USER, **fields})
    prepared = prepare_chat(model, req, "req-1")
    choice: ChoicePipeline = prepared.choices[0]
    tok = model.tokenizer
    assert tok is not None
    eos = model.card.eos_token_ids[0]
    ids = [*tok.encode(output), eos]
    pieces: list[Piece] = []
    for at, token in enumerate(ids):
        out = EngineOutput(index=choice.index, token_ids=[token])
        if at == len(ids) - 1:
            out.finish, out.matched = "eos", eos
        pieces.extend(choice.feed(out))
    assert choice.finished is not None
    msg = fold(pieces)
    return msg.reasoning, msg.content


def test_thinking_on_the_prompt_opened_the_block() -> None:
    model = nemotron3()
    assert answer(model, "plan</think>It is 4.", chat_template=NEMOTRON3_TEMPLATE) == (
        "plan",
        "It is 4.",
    )
    # Cut off while thinking: reasoning.
    assert answer(model, "still thinking", chat_template=NEMOTRON3_TEMPLATE) == (
        "still thinking",
        None,
    )


@pytest.mark.parametrize(
    "fields",
    [
        # enable_thinking false: the template closes the block, the parser is off.
        {"chat_template": NEMOTRON3_TEMPLATE, "chat_template_kwargs": {"enable_thinking": False}},
        # The template closes it without being asked.
        {"chat_template": CLOSED_TEMPLATE},
        # The model's own template does not open it (plain ChatML).
        {},
    ],
    ids=["enable_thinking_false", "template_closes_the_block", "template_never_opens_it"],
)
def test_thinking_off_a_plain_answer_is_content(fields: dict[str, Any]) -> None:
    """SGLang's Nemotron3Detector: "Direct answer without thinking." is content."""
    model = nemotron3()
    text = "Direct answer without thinking."
    assert answer(model, text, **fields) == (None, text)


def test_a_prompt_that_leaves_the_block_shut_still_reads_one_the_model_opens() -> None:
    model = nemotron3()
    assert answer(model, "<think>plan</think>It is 4.") == ("plan", "It is 4.")
