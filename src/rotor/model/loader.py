"""A Hugging Face style model directory → (ModelCard, Tokenizer).

The frontend needs the prompt side of a model: the tokenizer, the chat
templates, the EOS ids, the context length, the sampling defaults and, for a
vision-language model, how its images become tokens (model/vision.py). They are
spread over up to six files, each optional but `tokenizer.json`; every way one
of them can be wrong becomes a `ModelLoadError` that names the file, so a user
with a broken directory learns which file to fix before the server starts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import tokenizers

from rotor.model.card import ModelCard
from rotor.model.tokenizer import Tokenizer
from rotor.model.vision import VisionConfigError, read_vision

DEFAULT_CONTEXT_LENGTH = 4096

# config.json keys that hold the context length, most specific first (as vLLM reads them).
_CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "model_max_length",
)
# transformers writes int(1e30) (and friends) when a tokenizer has no real limit.
_NO_LIMIT = 10**9
# tokenizer classes whose `model_input_names` include token_type_ids (transformers')
_TOKEN_TYPE_CLASSES = frozenset(
    ("BertTokenizer", "ElectraTokenizer", "MobileBertTokenizer", "ConvBertTokenizer")
)
_FLOAT_DEFAULTS = ("temperature", "top_p", "min_p", "repetition_penalty")
_INT_DEFAULTS = ("top_k", "max_new_tokens")


class ModelLoadError(Exception):
    """A model directory cannot be served; the message names the file and the problem."""


def load_model(
    path: str | Path,
    *,
    model_name: str | None = None,
    max_model_len: int | None = None,
    chat_template_file: str | Path | None = None,
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> tuple[ModelCard, Tokenizer]:
    """Read a model directory; the arguments are the CLI's overrides."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise ModelLoadError(f"model path {root} {what}")

    raw = _read_tokenizer(root / "tokenizer.json")
    tokenizer_config = _read_json(root / "tokenizer_config.json")
    generation_config = _read_json(root / "generation_config.json")
    config = _read_json(root / "config.json")

    _add_declared_tokens(raw, tokenizer_config, root / "tokenizer_config.json")
    tokenizer = Tokenizer(raw)

    config_file = root / "tokenizer_config.json"
    bos_token = _token_text(tokenizer_config, "bos_token", config_file)
    eos_token = _token_text(tokenizer_config, "eos_token", config_file)
    unk_token = _token_text(tokenizer_config, "unk_token", config_file)
    pad_token = _token_text(tokenizer_config, "pad_token", config_file)
    context_length, context_source = _context_length(root, config, tokenizer_config)
    card = ModelCard(
        name=model_name or root.name,
        path=str(root),
        context_length=context_length,
        eos_token_ids=_eos_token_ids(root, generation_config, tokenizer, eos_token),
        # The user's --chat-template replaces them all: the model's are not even read.
        chat_templates={}
        if chat_template_file is not None
        else _chat_templates(root, tokenizer_config),
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
        generation_defaults=_generation_defaults(
            generation_config, root / "generation_config.json"
        ),
        created=int(time.time()),
        bos_token=bos_token,
        eos_token=eos_token,
        unk_token=unk_token,
        pad_token=pad_token,
        token_type_ids=_gives_token_types(tokenizer_config),
        vision=_vision(root, config),
    )
    apply_overrides(card, max_model_len, chat_template_file, context_source)
    return card, tokenizer


def apply_overrides(
    card: ModelCard,
    max_model_len: int | None = None,
    chat_template_file: str | Path | None = None,
    context_source: str | None = None,
) -> None:
    """The CLI's `--max-model-len` and `--chat-template` on a card, checked the
    same way whether the card came from a model directory or is a built-in:
    the length must be a positive integer no larger than the card's context
    length (`context_source` says where that came from); the template file is
    read as UTF-8 and then serves every request, tools or not."""
    if max_model_len is not None:
        if not _is_int(max_model_len) or max_model_len <= 0:
            raise ModelLoadError(f"max_model_len must be a positive integer, got {max_model_len!r}")
        if max_model_len > card.context_length:
            where = f" ({context_source})" if context_source else ""
            raise ModelLoadError(
                f"max_model_len {max_model_len} is larger than the model's context length "
                f"{card.context_length}{where}"
            )
        card.context_length = max_model_len
    if chat_template_file is not None:
        override = Path(chat_template_file).expanduser()
        if not override.is_file():
            raise ModelLoadError(f"chat template file {override} does not exist")
        # No named variant (tool_use, ...) may bypass the user's template.
        card.chat_templates = {"default": _read_text(override)}


def _read_json(file: Path) -> dict[str, Any]:
    """The file's top-level object, or {} when the file is absent."""
    if not file.exists():
        return {}
    text = _read_text(file)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelLoadError(
            f"{file}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from e
    if not isinstance(value, dict):
        raise ModelLoadError(f"{file}: expected a JSON object, got {_kind(value)}")
    return value


def _read_text(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ModelLoadError(f"{file}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise ModelLoadError(f"{file}: cannot be read: {e.strerror or e}") from e


def _read_tokenizer(file: Path) -> tokenizers.Tokenizer:
    if not file.is_file():
        raise ModelLoadError(f"{file}: missing; a model directory needs tokenizer.json")
    try:
        return tokenizers.Tokenizer.from_file(str(file))
    except Exception as e:  # the Rust binding raises a bare Exception with serde's message
        raise ModelLoadError(f"{file}: cannot be loaded: {e}") from e


def _add_declared_tokens(
    raw: tokenizers.Tokenizer, tokenizer_config: dict[str, Any], file: Path
) -> None:
    """Register `added_tokens_decoder` entries the tokenizer lacks, then check every id.

    transformers adds these tokens on load, so a model may rely on it. A token
    that ends up under a different id than declared would make rotor decode
    the model's output wrongly, so that is an error, not a warning.
    """
    declared = tokenizer_config.get("added_tokens_decoder")
    if declared is None:
        return
    if not isinstance(declared, dict):
        raise ModelLoadError(
            f"{file}: added_tokens_decoder must be an object, got {_kind(declared)}"
        )
    entries: list[tuple[int, tokenizers.AddedToken]] = []
    for key, spec in declared.items():
        where = f"added_tokens_decoder[{key!r}]"
        try:
            token_id = int(key)
        except ValueError:
            raise ModelLoadError(f"{file}: {where}: the key must be a token id") from None
        if not isinstance(spec, dict) or not isinstance(spec.get("content"), str):
            raise ModelLoadError(f"{file}: {where} must be an object with a string content")
        flags = {
            name: spec[name]
            for name in ("special", "lstrip", "rstrip", "normalized", "single_word")
            if name in spec
        }
        for name, value in flags.items():
            if not isinstance(value, bool):
                raise ModelLoadError(f"{file}: {where}.{name} must be true or false")
        entries.append((token_id, tokenizers.AddedToken(spec["content"], **flags)))

    known = raw.get_added_tokens_decoder()
    for token_id, token in sorted(entries, key=lambda entry: entry[0]):
        present = known.get(token_id)
        if present is not None and present.content == token.content:
            continue
        if token.special:
            raw.add_special_tokens([token])
        else:
            raw.add_tokens([token])
    for token_id, token in entries:
        actual = raw.token_to_id(token.content)
        if actual != token_id:
            raise ModelLoadError(
                f"{file}: added_tokens_decoder declares {token.content!r} as id {token_id}, "
                f"but tokenizer.json gives it id {actual}"
            )


def _token_text(tokenizer_config: dict[str, Any], name: str, file: Path) -> str | None:
    """A special token as a string: either form transformers writes, or none."""
    value = tokenizer_config.get(name)
    if value is None or isinstance(value, str):
        return value
    content = value.get("content") if isinstance(value, dict) else None
    if isinstance(content, str):
        return content
    raise ModelLoadError(
        f"{file}: {name} must be a string or an AddedToken object with a string content, "
        f"got {_kind(value)}"
    )


def _eos_token_ids(
    root: Path, generation_config: dict[str, Any], tokenizer: Tokenizer, eos_token: str | None
) -> list[int]:
    """generation_config's eos_token_id (int or list) ∪ the tokenizer's eos_token, in order."""
    file = root / "generation_config.json"
    value = generation_config.get("eos_token_id")
    ids: list[int] = []
    if value is not None:
        listed = value if isinstance(value, list) else [value]
        if not listed or not all(_is_int(i) and i >= 0 for i in listed):
            raise ModelLoadError(
                f"{file}: eos_token_id must be a token id or a non-empty list of token ids, "
                f"got {value!r}"
            )
        ids.extend(listed)
    if eos_token is not None:
        eos_id = tokenizer.token_to_id(eos_token)
        if eos_id is None:
            raise ModelLoadError(
                f"{root / 'tokenizer_config.json'}: eos_token {eos_token!r} "
                f"is not a token of {root / 'tokenizer.json'}"
            )
        ids.append(eos_id)
    return list(dict.fromkeys(ids))


def _chat_templates(root: Path, tokenizer_config: dict[str, Any]) -> dict[str, str]:
    """Named templates; later sources win: tokenizer_config, chat_template.json,
    chat_template.jinja (the user's --chat-template wins over all: apply_overrides)."""
    templates = _named_templates(
        tokenizer_config.get("chat_template"), root / "tokenizer_config.json"
    )
    json_file = root / "chat_template.json"
    templates.update(_named_templates(_read_json(json_file).get("chat_template"), json_file))
    jinja_file = root / "chat_template.jinja"
    if jinja_file.is_file():
        templates["default"] = _read_text(jinja_file)
    return templates


def _named_templates(value: Any, file: Path) -> dict[str, str]:
    """A template string is the default; a list of {name, template} names each one."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, list):
        named: dict[str, str] = {}
        for i, item in enumerate(value):
            if (
                not isinstance(item, dict)
                or not isinstance(item.get("name"), str)
                or not isinstance(item.get("template"), str)
            ):
                raise ModelLoadError(
                    f"{file}: chat_template[{i}] must be an object with string name and template"
                )
            named[item["name"]] = item["template"]
        return named
    raise ModelLoadError(
        f"{file}: chat_template must be a string or a list of named templates, got {_kind(value)}"
    )


def _vision(root: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The image processing of a vision-language model (model/vision.py); None
    for a text-only model."""
    try:
        return read_vision(root, config)
    except VisionConfigError as e:
        raise ModelLoadError(str(e)) from e


def _gives_token_types(tokenizer_config: dict[str, Any]) -> bool:
    """Whether transformers' tokenizer returns token type ids: the config's
    `model_input_names` when it names them, else its class's default (the
    BERT-style classes return them; the generic fast tokenizer does not)."""
    names = tokenizer_config.get("model_input_names")
    if isinstance(names, list):
        return "token_type_ids" in names
    kind = tokenizer_config.get("tokenizer_class")
    return isinstance(kind, str) and kind.removesuffix("Fast") in _TOKEN_TYPE_CLASSES


def _context_length(
    root: Path, config: dict[str, Any], tokenizer_config: dict[str, Any]
) -> tuple[int, str]:
    """The model's context length, and where it came from."""
    found = _declared_context(config, root / "config.json")
    if found is None:
        found = _declared_context(
            tokenizer_config, root / "tokenizer_config.json", keys=("model_max_length",)
        )
    return found if found is not None else (DEFAULT_CONTEXT_LENGTH, "rotor's default")


def _declared_context(
    config: dict[str, Any], file: Path, keys: tuple[str, ...] = _CONTEXT_KEYS
) -> tuple[int, str] | None:
    """(length, where it came from) from the first key that holds a real limit.

    Multimodal configs keep the language model's numbers under `text_config`.
    """
    sections: list[tuple[str, dict[str, Any]]] = [("", config)]
    text_config = config.get("text_config")
    if isinstance(text_config, dict):
        sections.append(("text_config.", text_config))
    for prefix, section in sections:
        for key in keys:
            value = section.get(key)
            if value is None:
                continue
            field = f"{prefix}{key}"
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not _is_int(value) or value <= 0:
                raise ModelLoadError(f"{file}: {field} must be a positive integer, got {value!r}")
            if value >= _NO_LIMIT:
                continue
            return value, f"{file.name} {field}"
    return None


def _generation_defaults(generation_config: dict[str, Any], file: Path) -> dict[str, Any]:
    """The sampling defaults the model ships with, under generation_config's own names."""
    defaults: dict[str, Any] = {}
    for key in (*_FLOAT_DEFAULTS, *_INT_DEFAULTS):
        value = generation_config.get(key)
        if value is None:
            continue
        wanted_int = key in _INT_DEFAULTS
        ok = _is_int(value) if wanted_int else _is_int(value) or isinstance(value, float)
        if not ok:
            kind = "an integer" if wanted_int else "a number"
            raise ModelLoadError(f"{file}: {key} must be {kind}, got {value!r}")
        defaults[key] = value
    return defaults


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    """A JSON-ish name for a value's type, for messages."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number" if isinstance(value, int | float) else repr(value))
