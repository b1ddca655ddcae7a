"""load_model: every file of a model directory, every override, every way it can be wrong.

Each test writes a real directory (a trained tokenizer, real JSON files) and
loads it; nothing of rotor's is mocked.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from rotor.model.builtin import CHATML_SPECIAL, build_tokenizer, builtin_test_model
from rotor.model.loader import ModelLoadError, load_model
from rotor.model.template import ChatTemplate
from rotor.model.tokenizer import Tokenizer

from support.models import (
    BEAM_SPECIAL,
    HARMONY_SPECIAL,
    TEMPLATES,
    beam_model,
    chatml_model,
    family_model,
    harmony_model,
    write_model_dir,
)

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def bare_model(tmp_path: Path, name: str = "bare") -> Path:
    """A directory with nothing but tokenizer.json."""
    root = tmp_path / name
    root.mkdir()
    build_tokenizer(SPECIAL).save(str(root / "tokenizer.json"))
    return root


def write_json(file: Path, value: Any) -> None:
    file.write_text(json.dumps(value), encoding="utf-8")


def token_id(tok: Tokenizer, text: str) -> int:
    found = tok.token_to_id(text)
    assert found is not None, text
    return found


# --- defaults and arguments -------------------------------------------------


def test_bare_directory_gets_defaults(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    before = int(time.time())
    card, tok = load_model(root)
    after = int(time.time())

    assert card.name == "bare"
    assert card.path == str(root.resolve())
    assert card.context_length == 4096
    assert card.eos_token_ids == []
    assert card.chat_templates == {}
    assert card.generation_defaults == {}
    assert (card.bos_token, card.eos_token, card.unk_token, card.pad_token) == (None,) * 4
    assert card.tool_call_parser is None and card.reasoning_parser is None
    assert before <= card.created <= after
    assert tok.token_to_id("<|im_end|>") is not None


def test_relative_path_gives_an_absolute_card_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = bare_model(tmp_path, "relative-model")
    monkeypatch.chdir(tmp_path)
    card, _ = load_model("relative-model")
    assert card.path == str(root.resolve())
    assert Path(card.path).is_absolute()
    assert card.name == "relative-model"


def test_arguments_set_name_and_parsers(tmp_path: Path) -> None:
    card, _ = load_model(
        bare_model(tmp_path),
        model_name="served-name",
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
    )
    assert card.name == "served-name"
    assert card.tool_call_parser == "hermes"
    assert card.reasoning_parser == "qwen3"


# --- chat templates ------------------------------------------------------------


def test_string_chat_template_is_the_default(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(root / "tokenizer_config.json", {"chat_template": "{{ messages }}"})
    card, _ = load_model(root)
    assert card.chat_templates == {"default": "{{ messages }}"}
    assert card.chat_template(with_tools=True) == "{{ messages }}"


def test_list_of_named_templates(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(
        root / "tokenizer_config.json",
        {
            "chat_template": [
                {"name": "default", "template": "plain"},
                {"name": "tool_use", "template": "with tools"},
                {"name": "rag", "template": "with documents"},
            ]
        },
    )
    card, _ = load_model(root)
    assert card.chat_templates == {
        "default": "plain",
        "tool_use": "with tools",
        "rag": "with documents",
    }
    assert card.chat_template(with_tools=False) == "plain"
    assert card.chat_template(with_tools=True) == "with tools"


def test_chat_template_jinja_replaces_the_default_and_keeps_named_ones(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(
        root / "tokenizer_config.json",
        {
            "chat_template": [
                {"name": "default", "template": "old"},
                {"name": "tool_use", "template": "tools"},
            ]
        },
    )
    (root / "chat_template.jinja").write_text("from jinja file\n", encoding="utf-8")
    card, _ = load_model(root)
    assert card.chat_templates == {"default": "from jinja file\n", "tool_use": "tools"}


def test_chat_template_jinja_sets_a_template_where_none_was(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    (root / "chat_template.jinja").write_text("only here", encoding="utf-8")
    card, _ = load_model(root)
    assert card.chat_templates == {"default": "only here"}


def test_chat_template_json_replaces_the_default(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(root / "tokenizer_config.json", {"chat_template": "old"})
    write_json(root / "chat_template.json", {"chat_template": "from json file"})
    card, _ = load_model(root)
    assert card.chat_templates == {"default": "from json file"}


def test_chat_template_jinja_wins_over_chat_template_json(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(root / "chat_template.json", {"chat_template": "from json file"})
    (root / "chat_template.jinja").write_text("from jinja file", encoding="utf-8")
    card, _ = load_model(root)
    assert card.chat_templates == {"default": "from jinja file"}


def test_chat_template_file_argument_wins_over_everything(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(
        root / "tokenizer_config.json",
        {
            "chat_template": [
                {"name": "default", "template": "a"},
                {"name": "tool_use", "template": "b"},
            ]
        },
    )
    write_json(root / "chat_template.json", {"chat_template": "c"})
    (root / "chat_template.jinja").write_text("d", encoding="utf-8")
    override = tmp_path / "mine.jinja"
    override.write_text("the user's template", encoding="utf-8")

    card, _ = load_model(root, chat_template_file=override)

    assert card.chat_templates == {"default": "the user's template"}
    assert card.chat_template(with_tools=True) == "the user's template"


def test_missing_chat_template_file_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "template.jinja"
    with pytest.raises(ModelLoadError, match="template.jinja") as err:
        load_model(bare_model(tmp_path), chat_template_file=missing)
    assert str(missing) in str(err.value)


# --- EOS ids and special tokens ---------------------------------------------------


def test_generation_eos_int_joins_the_eos_token(tmp_path: Path) -> None:
    root = write_model_dir(
        tmp_path / "m",
        special_tokens=SPECIAL,
        eos_token="<|im_end|>",
        generation_eos="<|endoftext|>",
    )
    assert json.loads((root / "generation_config.json").read_text())["eos_token_id"] == 0
    card, tok = load_model(root)
    assert card.eos_token_ids == [token_id(tok, "<|endoftext|>"), token_id(tok, "<|im_end|>")]


def test_generation_eos_list_is_kept_in_order_and_deduplicated(tmp_path: Path) -> None:
    root = write_model_dir(
        tmp_path / "m",
        special_tokens=SPECIAL,
        eos_token="<|endoftext|>",
        generation_eos=["<|im_end|>", "<|endoftext|>", "<|im_end|>"],
    )
    card, tok = load_model(root)
    assert card.eos_token_ids == [token_id(tok, "<|im_end|>"), token_id(tok, "<|endoftext|>")]


def test_eos_token_alone_gives_the_eos_id(tmp_path: Path) -> None:
    root = write_model_dir(tmp_path / "m", special_tokens=SPECIAL, eos_token="<|im_end|>")
    assert not (root / "generation_config.json").exists()
    card, tok = load_model(root)
    assert card.eos_token == "<|im_end|>"
    assert card.eos_token_ids == [token_id(tok, "<|im_end|>")]


def test_generation_eos_alone_without_an_eos_token(tmp_path: Path) -> None:
    root = write_model_dir(
        tmp_path / "m", special_tokens=SPECIAL, eos_token=None, generation_eos=[2, 1]
    )
    card, _ = load_model(root)
    assert card.eos_token is None
    assert card.eos_token_ids == [2, 1]


def test_special_tokens_as_added_token_objects(tmp_path: Path) -> None:
    def added(content: str) -> dict[str, Any]:
        return {
            "__type": "AddedToken",
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
        }

    root = write_model_dir(
        tmp_path / "m",
        special_tokens=(*SPECIAL, "<unk>"),
        eos_token=None,
        extra_tokenizer_config={
            "bos_token": added("<|im_start|>"),
            "eos_token": added("<|im_end|>"),
            "unk_token": added("<unk>"),
            "pad_token": "<|endoftext|>",
        },
    )
    card, tok = load_model(root)
    assert card.bos_token == "<|im_start|>"
    assert card.eos_token == "<|im_end|>"
    assert card.unk_token == "<unk>"
    assert card.pad_token == "<|endoftext|>"
    assert card.eos_token_ids == [token_id(tok, "<|im_end|>")]


def test_added_tokens_decoder_adds_missing_tokens_with_their_special_flag(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    size = Tokenizer.from_file(root / "tokenizer.json").vocab_size
    write_json(
        root / "tokenizer_config.json",
        {
            "added_tokens_decoder": {
                "0": {"content": "<|endoftext|>", "special": True},
                str(size): {"content": "<|tool_start|>", "special": True, "normalized": False},
                str(size + 1): {"content": "<note>", "special": False, "normalized": False},
            }
        },
    )
    _, tok = load_model(root)

    assert tok.vocab_size == size + 2
    assert tok.token_to_id("<|tool_start|>") == size
    assert tok.token_to_id("<note>") == size + 1
    assert size in tok.special_ids and size + 1 not in tok.special_ids
    ids = tok.encode("a<|tool_start|>b<note>c")
    assert size in ids and size + 1 in ids
    assert tok.decode(ids, skip_special_tokens=True) == "ab<note>c"
    assert tok.decode(ids, skip_special_tokens=False) == "a<|tool_start|>b<note>c"


def test_added_tokens_already_in_tokenizer_json_are_not_added_twice(tmp_path: Path) -> None:
    root = chatml_model(tmp_path)
    size = Tokenizer.from_file(root / "tokenizer.json").vocab_size
    _, tok = load_model(root)
    assert tok.vocab_size == size


def test_added_token_under_another_id_is_an_error(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    size = Tokenizer.from_file(root / "tokenizer.json").vocab_size
    write_json(
        root / "tokenizer_config.json",
        {"added_tokens_decoder": {str(size + 5): {"content": "<gap>", "special": True}}},
    )
    with pytest.raises(ModelLoadError, match=r"tokenizer_config\.json.*'<gap>'.*id"):
        load_model(root)


# --- context length ------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "max_position_embeddings",
        "n_positions",
        "max_seq_len",
        "seq_length",
        "max_sequence_length",
        "model_max_length",
    ],
)
def test_context_length_from_each_config_key(tmp_path: Path, key: str) -> None:
    root = bare_model(tmp_path)
    write_json(root / "config.json", {"model_type": "x", key: 12288})
    card, _ = load_model(root)
    assert card.context_length == 12288


def test_first_context_key_wins(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(root / "config.json", {"seq_length": 1024, "max_position_embeddings": 2048})
    card, _ = load_model(root)
    assert card.context_length == 2048


def test_context_length_from_text_config(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(
        root / "config.json",
        {"vision_config": {"image_size": 336}, "text_config": {"max_position_embeddings": 8192}},
    )
    card, _ = load_model(root)
    assert card.context_length == 8192


def test_top_level_context_key_wins_over_text_config(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(
        root / "config.json",
        {"n_positions": 1024, "text_config": {"max_position_embeddings": 8192}},
    )
    card, _ = load_model(root)
    assert card.context_length == 1024


def test_context_length_falls_back_to_tokenizer_model_max_length(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(root / "config.json", {"hidden_size": 64})
    write_json(root / "tokenizer_config.json", {"model_max_length": 16384})
    card, _ = load_model(root)
    assert card.context_length == 16384


def test_huge_model_max_length_sentinel_is_ignored(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(
        root / "tokenizer_config.json", {"model_max_length": 1000000000000000019884624838656}
    )
    card, _ = load_model(root)
    assert card.context_length == 4096


def test_max_model_len_lowers_the_context_length(tmp_path: Path) -> None:
    root = write_model_dir(
        tmp_path / "m", special_tokens=SPECIAL, eos_token=None, context_length=8192
    )
    card, _ = load_model(root, max_model_len=2048)
    assert card.context_length == 2048


def test_max_model_len_larger_than_the_model_is_an_error_with_both_numbers(
    tmp_path: Path,
) -> None:
    root = write_model_dir(
        tmp_path / "m", special_tokens=SPECIAL, eos_token=None, context_length=8192
    )
    with pytest.raises(ModelLoadError) as err:
        load_model(root, max_model_len=65536)
    message = str(err.value)
    assert "65536" in message and "8192" in message
    assert "config.json" in message


def test_max_model_len_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="max_model_len"):
        load_model(bare_model(tmp_path), max_model_len=0)


# --- generation defaults ----------------------------------------------------------------


def test_sampling_defaults_from_generation_config(tmp_path: Path) -> None:
    defaults = {
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "min_p": 0.0,
        "repetition_penalty": 1.05,
        "max_new_tokens": 512,
    }
    root = write_model_dir(
        tmp_path / "m",
        special_tokens=SPECIAL,
        eos_token=None,
        sampling_defaults={**defaults, "do_sample": True, "bos_token_id": 1},
    )
    card, _ = load_model(root)
    assert card.generation_defaults == defaults


def test_integral_temperature_is_a_number(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    write_json(root / "generation_config.json", {"temperature": 1, "top_p": None})
    card, _ = load_model(root)
    assert card.generation_defaults == {"temperature": 1}


# --- errors name the file ------------------------------------------------------------------


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist") as err:
        load_model(tmp_path / "absent")
    assert str(tmp_path / "absent") in str(err.value)


def test_path_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "model.bin"
    file.write_bytes(b"\0")
    with pytest.raises(ModelLoadError, match="not a directory"):
        load_model(file)


def test_directory_without_tokenizer_json(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    write_json(root / "config.json", {"max_position_embeddings": 10})
    with pytest.raises(ModelLoadError, match=r"tokenizer\.json.*missing"):
        load_model(root)


def test_broken_tokenizer_json_names_the_file_and_the_parse_error(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    (root / "tokenizer.json").write_text('{"version": "1.0",\n "model": ', encoding="utf-8")
    with pytest.raises(ModelLoadError, match=r"tokenizer\.json.*line 2"):
        load_model(root)


@pytest.mark.parametrize(
    "name",
    ["tokenizer_config.json", "generation_config.json", "config.json", "chat_template.json"],
)
def test_json_that_does_not_parse_names_file_line_and_problem(tmp_path: Path, name: str) -> None:
    root = bare_model(tmp_path)
    (root / name).write_text('{\n  "a": 1,\n  oops\n}\n', encoding="utf-8")
    with pytest.raises(ModelLoadError) as err:
        load_model(root)
    message = str(err.value)
    assert name in message
    assert "line 3" in message
    assert "property name" in message


@pytest.mark.parametrize("name", ["tokenizer_config.json", "config.json"])
def test_json_that_is_not_an_object(tmp_path: Path, name: str) -> None:
    root = bare_model(tmp_path)
    write_json(root / name, [1, 2])
    with pytest.raises(ModelLoadError, match=rf"{name}.*JSON object"):
        load_model(root)


@pytest.mark.parametrize(
    ("name", "content", "field"),
    [
        ("generation_config.json", {"eos_token_id": "abc"}, "eos_token_id"),
        ("generation_config.json", {"eos_token_id": [1, "x"]}, "eos_token_id"),
        ("generation_config.json", {"eos_token_id": True}, "eos_token_id"),
        ("generation_config.json", {"eos_token_id": []}, "eos_token_id"),
        ("generation_config.json", {"temperature": "hot"}, "temperature"),
        ("generation_config.json", {"top_k": 1.5}, "top_k"),
        ("generation_config.json", {"max_new_tokens": "many"}, "max_new_tokens"),
        ("tokenizer_config.json", {"chat_template": 5}, "chat_template"),
        ("tokenizer_config.json", {"chat_template": [{"name": "default"}]}, "chat_template[0]"),
        ("tokenizer_config.json", {"eos_token": 5}, "eos_token"),
        ("tokenizer_config.json", {"bos_token": {"id": 1}}, "bos_token"),
        ("tokenizer_config.json", {"eos_token": "<|not_a_token|>"}, "eos_token"),
        ("tokenizer_config.json", {"added_tokens_decoder": []}, "added_tokens_decoder"),
        (
            "tokenizer_config.json",
            {"added_tokens_decoder": {"x": {"content": "<a>"}}},
            "added_tokens_decoder",
        ),
        (
            "tokenizer_config.json",
            {"added_tokens_decoder": {"1": {"content": 3}}},
            "added_tokens_decoder",
        ),
        (
            "tokenizer_config.json",
            {"added_tokens_decoder": {"1": {"content": "<a>", "special": "yes"}}},
            "special",
        ),
        ("tokenizer_config.json", {"model_max_length": "big"}, "model_max_length"),
        ("config.json", {"max_position_embeddings": "big"}, "max_position_embeddings"),
        ("config.json", {"n_positions": 0}, "n_positions"),
        ("config.json", {"text_config": {"seq_length": -1}}, "text_config.seq_length"),
        ("chat_template.json", {"chat_template": 3}, "chat_template"),
    ],
)
def test_field_of_the_wrong_type_names_file_and_field(
    tmp_path: Path, name: str, content: dict[str, Any], field: str
) -> None:
    root = bare_model(tmp_path)
    write_json(root / name, content)
    with pytest.raises(ModelLoadError) as err:
        load_model(root)
    message = str(err.value)
    assert name in message
    assert field in message


def test_template_file_that_is_not_utf8(tmp_path: Path) -> None:
    root = bare_model(tmp_path)
    (root / "chat_template.jinja").write_bytes(b"caf\xe9")
    with pytest.raises(ModelLoadError, match=r"chat_template\.jinja.*UTF-8"):
        load_model(root)


# --- the test models: load, and text with special tokens round-trips --------------------


def assert_round_trip(tok: Tokenizer, specials: tuple[str, ...], text: str) -> None:
    """Each special token is one id; decoding gives the exact text back, in one go and
    token by token; skipping special tokens removes exactly them."""
    ids = tok.encode(text)
    for special in specials:
        assert token_id(tok, special) in ids
    assert tok.decode(ids, skip_special_tokens=False) == text
    stream = tok.decoder(skip_special_tokens=False)
    assert "".join(stream.step(i) for i in ids) == text
    stripped = text
    for special in specials:
        stripped = stripped.replace(special, "")
    assert tok.decode(ids, skip_special_tokens=True) == stripped


def test_builtin_model_round_trips(tmp_path: Path) -> None:
    card, tok = builtin_test_model()
    assert [tok.id_to_token(i) for i in card.eos_token_ids] == ["<|im_end|>", "<|endoftext|>"]
    assert_round_trip(
        tok,
        CHATML_SPECIAL,
        "<|im_start|>user\nHello, Montréal 🙂 東京<|im_end|>\n<|im_start|>assistant\n<|endoftext|>",
    )


def test_chatml_model_dir(tmp_path: Path) -> None:
    card, tok = load_model(chatml_model(tmp_path))
    assert card.name == "chatml-model"
    assert card.context_length == 32768
    assert [tok.id_to_token(i) for i in card.eos_token_ids] == ["<|im_end|>", "<|endoftext|>"]
    assert card.chat_templates["default"] == (TEMPLATES / "chatml_qwen.jinja").read_text()
    assert_round_trip(
        tok,
        ("<|im_start|>", "<|im_end|>"),
        '<|im_start|>assistant\n<think>hmm</think><tool_call>{"a": 1}</tool_call><|im_end|>',
    )
    # added (non-special) tokens are single ids that survive skip_special_tokens
    ids = tok.encode("<think>x</think>")
    assert token_id(tok, "<think>") in ids and token_id(tok, "</think>") in ids
    assert tok.decode(ids, skip_special_tokens=True) == "<think>x</think>"
    prompt = ChatTemplate(card.chat_template(with_tools=False)).render(
        [{"role": "user", "content": "Hi"}]
    )
    assert prompt.endswith("<|im_start|>assistant\n")


def test_beam_model_dir(tmp_path: Path) -> None:
    card, tok = load_model(beam_model(tmp_path))
    assert card.name == "beam-model"
    assert card.eos_token == "<|return|>"
    assert [tok.id_to_token(i) for i in card.eos_token_ids] == ["<|return|>"]
    assert card.chat_templates["default"] == (TEMPLATES / "beam.jinja").read_text()
    assert_round_trip(
        tok,
        BEAM_SPECIAL,
        "<|start|>assistant<|channel|>analysis<|message|>r<|end|><|start|>assistant to=f"
        '<|channel|>analysis <|constrain|>xml<|message|><rfl:parameter name="city">Zürich'
        "</rfl:parameter><|call|><|return|>",
    )


def test_beam_template_renders_the_wire_format(tmp_path: Path) -> None:
    card, tok = load_model(beam_model(tmp_path))
    template = ChatTemplate(card.chat_template(with_tools=True), eos_token=card.eos_token)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "weather.lookup",
                "description": "Current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Prefer tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Look it up.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "weather.lookup",
                        "arguments": '{"city": "Paris", "days": 2}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    prompt = template.render(messages, tools=tools)

    assert prompt.startswith("<|start|>system<|message|>Be brief.")
    developer = prompt.index("<|start|>developer<|message|>")
    assert prompt.index("Prefer tools.") > developer
    assert prompt.index("### weather.lookup") > developer
    assert (
        "<|start|>assistant<|channel|>analysis<|message|>Look it up.<|end|>"
        "<|start|>assistant to=weather.lookup<|channel|>analysis <|constrain|>xml<|message|>"
        '<rfl:parameter name="city">Paris</rfl:parameter>'
        '<rfl:parameter name="days">2</rfl:parameter><|call|>'
        "<|start|>functions.weather.lookup to=assistant<|channel|>analysis<|message|>sunny<|end|>"
    ) in prompt
    assert prompt.endswith("<|start|>assistant")
    assert "<|return|>" not in prompt
    assert tok.decode(tok.encode(prompt), skip_special_tokens=False) == prompt

    plain = template.render([{"role": "user", "content": "Hi"}])
    assert "<|start|>developer" not in plain
    assert plain.endswith("<|start|>user<|message|>Hi<|end|><|start|>assistant")


def test_harmony_model_dir(tmp_path: Path) -> None:
    card, tok = load_model(harmony_model(tmp_path))
    assert card.name == "harmony-model"
    assert card.bos_token == "<|startoftext|>"
    assert [tok.id_to_token(i) for i in card.eos_token_ids] == ["<|return|>", "<|call|>"]
    assert card.chat_templates["default"] == (TEMPLATES / "harmony.jinja").read_text()
    assert_round_trip(
        tok,
        HARMONY_SPECIAL,
        "<|startoftext|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
        '<|message|>{"city": "São Paulo"}<|call|><|start|>assistant<|channel|>final<|message|>'
        "ok<|return|><|endoftext|><|end|>",
    )


def test_family_model_dir_with_a_template_file(tmp_path: Path) -> None:
    specials = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
    root = family_model(
        tmp_path,
        specials,
        "<|eot_id|>",
        TEMPLATES / "llama31.jinja",
        name="llama",
        bos_token="<|begin_of_text|>",
    )
    card, tok = load_model(root)
    assert card.name == "llama"
    assert card.chat_templates == {"default": (TEMPLATES / "llama31.jinja").read_text()}
    assert card.eos_token_ids == [token_id(tok, "<|eot_id|>")]
    prompt = ChatTemplate(card.chat_template(False), bos_token=card.bos_token).render(
        [{"role": "user", "content": "Hi"}]
    )
    assert prompt.startswith("<|begin_of_text|>")
    assert_round_trip(tok, specials, prompt)


def test_family_model_dir_with_template_text(tmp_path: Path) -> None:
    root = family_model(tmp_path, ("<s>", "</s>"), "</s>", "{{ bos_token }}x")
    card, tok = load_model(root)
    assert card.chat_templates == {"default": "{{ bos_token }}x"}
    assert card.eos_token_ids == [token_id(tok, "</s>")]


@pytest.mark.parametrize(
    ("tokenizer_config", "gives"),
    [
        ({}, False),
        ({"tokenizer_class": "PreTrainedTokenizerFast"}, False),
        ({"tokenizer_class": "BertTokenizerFast"}, True),
        ({"tokenizer_class": "BertTokenizer"}, True),
        ({"tokenizer_class": "BertTokenizerFast", "model_input_names": ["input_ids"]}, False),
        ({"model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}, True),
    ],
)
def test_the_card_says_whether_the_tokenizer_gives_token_types(
    tmp_path: Path, tokenizer_config: dict[str, Any], gives: bool
) -> None:
    """As transformers decides: `model_input_names`, else the class's default."""
    root = bare_model(tmp_path)
    write_json(root / "tokenizer_config.json", tokenizer_config)
    card, _ = load_model(root)
    assert card.token_type_ids is gives
