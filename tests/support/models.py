"""Real Hugging Face style model directories, written by the tests themselves.

A test that needs a model writes one into its tmp dir: a trained byte-level
BPE `tokenizer.json`, `tokenizer_config.json`, `config.json` and, when asked,
`generation_config.json` — the files `rotor.model.loader` reads, in the shapes
transformers writes. No hub, no network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rotor.model.builtin import CHATML_ADDED, CHATML_SPECIAL, build_tokenizer

TEMPLATES = Path(__file__).resolve().parent.parent / "fixtures" / "templates"

# A token given by its text (resolved against the tokenizer) or by its id.
TokenRef = int | str

CHATML_EOS = "<|im_end|>"
HARMONY_SPECIAL = (
    "<|startoftext|>",
    "<|endoftext|>",
    "<|start|>",
    "<|channel|>",
    "<|constrain|>",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
)
BEAM_SPECIAL = (
    "<|start|>",
    "<|channel|>",
    "<|constrain|>",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
)


def fixture_template(name: str) -> str:
    """The text of tests/fixtures/templates/NAME.jinja (a missing file is an error)."""
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


def write_model_dir(
    path: str | Path,
    *,
    special_tokens: Sequence[str],
    added_tokens: Sequence[str] = (),
    chat_template: str | None = None,
    eos_token: str | None,
    bos_token: str | None = None,
    pad_token: str | None = None,
    generation_eos: TokenRef | Sequence[TokenRef] | None = None,
    context_length: int | None = 4096,
    extra_tokenizer_config: Mapping[str, Any] | None = None,
    sampling_defaults: Mapping[str, Any] | None = None,
) -> Path:
    """Write a model directory at `path` and return it.

    `generation_eos` keeps its shape (one id or a list) in generation_config.json,
    so both forms the loader accepts can be written; token texts become ids.
    `context_length` goes to config.json's max_position_embeddings (None: no config.json).
    """
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(special_tokens, added_tokens)
    tok.save(str(root / "tokenizer.json"))

    tokenizer_config: dict[str, Any] = {
        "added_tokens_decoder": {
            str(token_id): {
                "content": token.content,
                "lstrip": token.lstrip,
                "normalized": token.normalized,
                "rstrip": token.rstrip,
                "single_word": token.single_word,
                "special": token.special,
            }
            for token_id, token in sorted(tok.get_added_tokens_decoder().items())
        },
        "bos_token": bos_token,
        "eos_token": eos_token,
        "pad_token": pad_token,
        "model_max_length": context_length if context_length is not None else int(1e30),
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if chat_template is not None:
        tokenizer_config["chat_template"] = chat_template
    tokenizer_config.update(extra_tokenizer_config or {})
    _write_json(root / "tokenizer_config.json", tokenizer_config)

    if context_length is not None:
        _write_json(root / "config.json", {"max_position_embeddings": context_length})

    if generation_eos is not None or sampling_defaults:
        generation: dict[str, Any] = {}
        if generation_eos is not None:

            def resolve(ref: TokenRef) -> int:
                if isinstance(ref, int):
                    return ref
                token_id = tok.token_to_id(ref)
                if token_id is None:
                    raise ValueError(f"generation_eos names {ref!r}, which is not a token")
                return token_id

            if isinstance(generation_eos, int | str):
                generation["eos_token_id"] = resolve(generation_eos)
            else:
                generation["eos_token_id"] = [resolve(ref) for ref in generation_eos]
        generation.update(sampling_defaults or {})
        _write_json(root / "generation_config.json", generation)
    return root


def chatml_model(tmp: str | Path, name: str = "chatml-model") -> Path:
    """Qwen-like: ChatML special tokens, think and tool-call tags as added tokens,
    EOS `<|im_end|>` and `<|endoftext|>` (as Qwen's generation_config lists them)."""
    return write_model_dir(
        Path(tmp) / name,
        special_tokens=CHATML_SPECIAL,
        added_tokens=CHATML_ADDED,
        chat_template=fixture_template("chatml_qwen"),
        eos_token=CHATML_EOS,
        pad_token="<|endoftext|>",
        generation_eos=[CHATML_EOS, "<|endoftext|>"],
        context_length=32768,
    )


def beam_model(tmp: str | Path, name: str = "beam-model") -> Path:
    """Beam (docs/beam.md): Harmony-style special tokens, EOS `<|return|>` only."""
    return write_model_dir(
        Path(tmp) / name,
        special_tokens=BEAM_SPECIAL,
        chat_template=fixture_template("beam"),
        eos_token="<|return|>",
        generation_eos=["<|return|>"],
        context_length=32768,
    )


def harmony_model(tmp: str | Path, name: str = "harmony-model") -> Path:
    """gpt-oss-like: Harmony special tokens, EOS ids `<|return|>` and `<|call|>`."""
    return write_model_dir(
        Path(tmp) / name,
        special_tokens=HARMONY_SPECIAL,
        chat_template=fixture_template("harmony"),
        bos_token="<|startoftext|>",
        eos_token="<|return|>",
        pad_token="<|endoftext|>",
        generation_eos=["<|return|>", "<|call|>"],
        context_length=131072,
    )


def family_model(
    tmp: str | Path,
    special_tokens: Sequence[str],
    eos_token: str,
    template: str | Path | None = None,
    *,
    name: str = "family-model",
    added_tokens: Sequence[str] = (),
    bos_token: str | None = None,
    generation_eos: TokenRef | Sequence[TokenRef] | None = None,
) -> Path:
    """Any other family: `template` is template text, or a Path to a template file
    (e.g. `TEMPLATES / "llama31.jinja"`)."""
    if isinstance(template, Path):
        template = template.read_text(encoding="utf-8")
    return write_model_dir(
        Path(tmp) / name,
        special_tokens=special_tokens,
        added_tokens=added_tokens,
        chat_template=template,
        eos_token=eos_token,
        bos_token=bos_token,
        generation_eos=generation_eos,
    )


def _write_json(file: Path, value: Mapping[str, Any]) -> None:
    file.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
