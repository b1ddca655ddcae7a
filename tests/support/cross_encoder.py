"""A tiny cross-encoder (a reranker): its tokenizer alone for the mocker
(`reranker_dir`), with random weights for vLLM on CPU (`cross_encoder`).

`BertForSequenceClassification` with one label, as rerankers are
(ms-marco-MiniLM and the like): 2 layers, hidden size 128, 2 heads (head_dim
64, which vLLM's CPU attention takes), random weights with a wide
initialisation so that different pairs get clearly different scores. Its
tokenizer is rotor's test BPE (model/builtin.build_tokenizer) with BERT's
special tokens and BERT's pair template as the post-processor —
`[CLS] A [SEP] B [SEP]`, token type 1 from B on — so the pair is tokenized
the way a BERT tokenizer does it; `model_input_names` says the tokenizer
gives token type ids, as BERT's does, so transformers and vLLM pass them to
the model (and rotor's card says so). No hub, no network.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import processors

from rotor.model.builtin import build_tokenizer

BERT_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
HIDDEN = 128
HEADS = 2  # head_dim 64
LAYERS = 2
INTERMEDIATE = 256


def bert_tokenizer_files(root: Path, context_length: int) -> int:
    """Write tokenizer.json and tokenizer_config.json; the vocabulary's size."""
    tok = build_tokenizer(BERT_SPECIAL)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.save(str(root / "tokenizer.json"))
    config = {
        "added_tokens_decoder": {
            str(i): {
                "content": t.content,
                "lstrip": t.lstrip,
                "normalized": t.normalized,
                "rstrip": t.rstrip,
                "single_word": t.single_word,
                "special": t.special,
            }
            for i, t in sorted(tok.get_added_tokens_decoder().items())
        },
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "mask_token": "[MASK]",
        "model_max_length": context_length,
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (root / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    return int(tok.get_vocab_size(with_added_tokens=True))


def reranker_dir(tmp: str | Path, name: str = "tiny-reranker", context_length: int = 512) -> Path:
    """The tokenizer files and a config.json naming the context: what the mocker reads."""
    root = Path(tmp) / name
    root.mkdir(parents=True, exist_ok=True)
    bert_tokenizer_files(root, context_length)
    config = {"architectures": ["BertForSequenceClassification"], "num_labels": 1}
    config["max_position_embeddings"] = context_length
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    return root


def cross_encoder(
    tmp: str | Path, name: str = "tiny-reranker", context_length: int = 512, seed: int = 0
) -> Path:
    """A model directory: config.json, model.safetensors and the tokenizer."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    root = Path(tmp) / name
    root.mkdir(parents=True, exist_ok=True)
    vocab = bert_tokenizer_files(root, context_length)
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=context_length,
        type_vocab_size=2,
        num_labels=1,
        pad_token_id=0,
        initializer_range=0.2,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(str(root), safe_serialization=True)
    return root
