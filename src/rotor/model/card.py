"""ModelCard: everything the frontend needs to know about a served model.

A card is built from a Hugging Face style directory (`load_card`) or is one of
rotor's built-ins (the echo card). Workers publish it (`rotor.protocol.codec`
encodes it with its tokenizer); the frontend reads it. Two cards of one model
agree when their `template_hash()` and `tokenizer_hash` are equal.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Capabilities:
    """What the engine behind the card can do."""

    structural_tags: bool = False  # enforces guided / structural-tag constraints
    logprobs: bool = False
    # gives the prompt's logprobs (OutputParams.prompt_logprobs): echo with
    # logprobs, and `prompt_logprobs`, are 400s without it
    prompt_logprobs: bool = False
    mock_scripts: bool = False  # honours the `mock` request extension
    # can continue a decoding constraint from output generated elsewhere (so a
    # constrained request may migrate to it mid-stream)
    resumable_constraints: bool = False
    # the block size of the KV events the engine publishes (0: it publishes none)
    kv_block_size: int = 0
    # embeddings (/v1/embeddings): their dimension (0: the engine cannot embed);
    # `generates` False: an embedding model alone (chat and completions are 400s);
    # `dimensions` below the full one (Matryoshka-style truncation) when allowed
    embedding_dim: int = 0
    generates: bool = True
    shortens_embeddings: bool = False
    # a cross-encoder (a reranker): one relevance score per (query, document)
    # pair, the pair's tokens read together (/v1/score, /v1/rerank); an
    # embedding model scores by its vectors' cosine instead
    scores_pairs: bool = False
    # schedules by a request's `priority` (`--scheduling-policy priority`):
    # without it a nonzero priority is a 400 naming that flag
    priority_scheduling: bool = False
    # takes a prompt's images (EngineRequest.images): their bytes, their spans,
    # their content hashes in its prefix cache; without it an image part is a
    # 400 naming the part
    images: bool = False
    # a decode worker of this engine needs the images' bytes too, though it
    # fetches their KV: it expands their placeholders itself (vLLM). Without
    # it a decode request carries their hashes and spans alone.
    images_at_decode: bool = False


@dataclass(slots=True)
class ModelCard:
    name: str  # the canonical name: responses say it unless the request named an alias
    path: str | None = None  # model directory; None for built-ins without files
    context_length: int = 8192
    eos_token_ids: list[int] = field(default_factory=list)
    bos_token: str | None = None
    eos_token: str | None = None
    unk_token: str | None = None
    pad_token: str | None = None
    # Named chat templates ("default", "tool_use", ...); empty = no template.
    chat_templates: dict[str, str] = field(default_factory=dict)
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    capabilities: Capabilities = field(default_factory=Capabilities)
    created: int = 0
    # content_hash of the tokenizer's JSON (`Tokenizer.raw.to_str()`) the card is
    # served with, once known (a card read from the wire has it), so cards can be
    # compared without their tokenizers.
    tokenizer_hash: str | None = None
    # more names the model is served under (`--served-model-name A B`: B)
    aliases: list[str] = field(default_factory=list)
    # its tokenizer gives token type ids (a BERT-style one): a pair's second
    # text is type 1, which a cross-encoder reads (model/loader.py decides)
    token_type_ids: bool = False
    # A vision-language model's image processing, as rotor counts it
    # (model/vision.py reads it: the family, its placeholder and what the
    # processor files say); None: the model takes text only.
    vision: dict[str, Any] | None = None

    def names(self) -> list[str]:
        """Every name it is served under, the canonical one first."""
        return [self.name, *(a for a in self.aliases if a != self.name)]

    def chat_template(self, with_tools: bool) -> str | None:
        """Pick `tool_use` when tools are present, else `default` (as transformers does)."""
        if with_tools and "tool_use" in self.chat_templates:
            return self.chat_templates["tool_use"]
        if "default" in self.chat_templates:
            return self.chat_templates["default"]
        return next(iter(self.chat_templates.values()), None)

    def template_hash(self) -> str:
        """content_hash of the chat templates, names and sources, in name order."""
        return content_hash(
            json.dumps(
                self.chat_templates, sort_keys=True, ensure_ascii=False, separators=(",", ":")
            )
        )


def content_hash(text: str) -> str:
    """sha256 of the text's UTF-8, in hex: how cards name a tokenizer or templates."""
    return hashlib.sha256(text.encode()).hexdigest()


ECHO_MODEL_NAME = "echo"
# The text-out echo engine has no vocabulary; it names this id when it ends at
# "model EOS", so the decoder can confirm the EOS like any other.
ECHO_EOS_ID = 0


def echo_card(name: str = ECHO_MODEL_NAME) -> ModelCard:
    """The built-in card of the echo engine: no tokenizer, text out."""
    return ModelCard(
        name=name,
        context_length=1 << 20,
        eos_token_ids=[ECHO_EOS_ID],
    )
