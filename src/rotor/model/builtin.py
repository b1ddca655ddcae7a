"""Tokenizers and models that rotor builds itself: no hub, no network.

`build_tokenizer` trains a small byte-level BPE (so any text, any script,
round-trips exactly) and adds the special tokens a test model needs. The
built-in test model is ChatML-shaped, like Qwen: the mocker serves it when no
`--model-path` is given, and tests build their own models (Beam, Harmony, ...)
with the same function.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from rotor.model.card import Capabilities, ModelCard
from rotor.model.tokenizer import Tokenizer

_CORPUS = (
    "The quick brown fox jumps over the lazy dog. Hello, world! How are you today?",
    "I am fine, thank you. What is the weather like in Paris? It is sunny and warm.",
    'Tool calls look like {"name": "get_weather", "arguments": {"city": "Paris"}}.',
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024. Symbols: [ ] { } ( ) < > / = : ; , . ! ?",
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n",
    "Let me think about this step by step. First, the answer is yes. Therefore, done.",
    "Montréal, Zürich, São Paulo, 東京, Москва, emoji 🙂 and more text here.",
)

# The byte-level alphabet guarantees every UTF-8 byte has a token.
_BPE_VOCAB = 600


def build_tokenizer(
    special_tokens: Sequence[str],
    added_tokens: Sequence[str] = (),
    corpus: Iterable[str] = _CORPUS,
    vocab_size: int = _BPE_VOCAB,
) -> tokenizers.Tokenizer:
    """A byte-level BPE tokenizer with `special_tokens` (special=True) and
    `added_tokens` (whole tokens that still decode with skip_special_tokens)."""
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    if added_tokens:
        tok.add_tokens(
            [tokenizers.AddedToken(t, special=False, normalized=False) for t in added_tokens]
        )
    return tok


CHATML_TEMPLATE = """\
{%- if tools %}
<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}{% if not loop.first %}<|im_start|>system
{{ message.content }}<|im_end|>
{% endif %}
{%- elif message.role == 'tool' %}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' %}
<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
{% if message.content or not loop.first %}
{% endif %}<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}
<|im_start|>{{ message.role }}
{% if message.content is string %}{{ message.content }}{% else %}{% for part in message.content %}{% if part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% endif %}
{%- endif %}
"""

CHATML_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML_ADDED = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
BUILTIN_MODEL_NAME = "mock-model"


@functools.lru_cache(maxsize=1)
def _chatml_tokenizer() -> tokenizers.Tokenizer:
    return build_tokenizer(CHATML_SPECIAL, CHATML_ADDED)


def builtin_test_model(name: str = BUILTIN_MODEL_NAME) -> tuple[ModelCard, Tokenizer]:
    """The mocker's default model: ChatML tokens, a Qwen-like template, hermes tool calls."""
    tok = Tokenizer(_chatml_tokenizer())
    eos = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    card = ModelCard(
        name=name,
        context_length=32768,
        eos_token_ids=[i for i in eos if i is not None],
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_templates={"default": CHATML_TEMPLATE},
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
        capabilities=Capabilities(logprobs=True, mock_scripts=True, structural_tags=True),
    )
    return card, tok
