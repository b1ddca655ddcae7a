"""A served model: its card and what the frontend builds from it once —
tokenizer, compiled templates, the parser choice."""

from __future__ import annotations

from dataclasses import dataclass, field

from rotor.model.card import ModelCard
from rotor.model.template import ChatTemplate
from rotor.model.tokenizer import Tokenizer
from rotor.model.vision import Vision
from rotor.pipeline.parse.reasoning import reasoning_parser
from rotor.pipeline.parse.tools import tool_parser


@dataclass
class ServedModel:
    card: ModelCard
    tokenizer: Tokenizer | None = None
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    templates: dict[str, ChatTemplate] = field(default_factory=dict)
    # how the model counts an image's tokens (None: it takes text only)
    vision: Vision | None = None

    @property
    def name(self) -> str:
        return self.card.name

    @classmethod
    def build(
        cls,
        card: ModelCard,
        tokenizer: Tokenizer | None,
        tool_parser_name: str | None = None,
        reasoning_parser_name: str | None = None,
    ) -> ServedModel:
        """Validates parser names (ValueError listing valid ones), compiles
        templates and reads the card's vision (ValueError when it cannot work)."""
        tp = tool_parser_name or card.tool_call_parser
        rp = reasoning_parser_name or card.reasoning_parser
        if tp:
            tool_parser(tp)
        if rp:
            reasoning_parser(rp)
        templates = {
            name: ChatTemplate(
                src,
                bos_token=card.bos_token,
                eos_token=card.eos_token,
                unk_token=card.unk_token,
                pad_token=card.pad_token,
            )
            for name, src in card.chat_templates.items()
        }
        return cls(card, tokenizer, tp, rp, templates, Vision.of(card, tokenizer))

    def template(self, with_tools: bool) -> ChatTemplate | None:
        src = self.card.chat_template(with_tools)
        if src is None:
            return None
        for name, text in self.card.chat_templates.items():
            if text is src:
                return self.templates[name]
        return None

    def token_text(self, token_id: int) -> str:
        """One token's text with specials kept (logprobs name tokens this way)."""
        assert self.tokenizer is not None
        return self.tokenizer.decode([token_id], skip_special_tokens=False)
