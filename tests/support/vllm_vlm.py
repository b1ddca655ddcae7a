"""A tiny random Idefics3 (a vision-language model) that vLLM's CPU build
serves: the model directory the vLLM image tests and benchmarks run.

Idefics3 is the family chosen because vLLM's file for it imports no
torchvision (which has no CPU build here). The text model is a Llama with
head_dim 64 (what vLLM's CPU attention takes), the vision tower has 2 layers,
images are 56 × 56 in 14-pixel patches merged 2 × 2: 4 image tokens each, so
one image becomes `<fake_token_around_image><global-img><image>×4
<fake_token_around_image>` (7 tokens) in vLLM's prompt. The processor files
(preprocessor_config.json, processor_config.json) are written as
transformers writes them, with image splitting off, and the chat template
renders an image part as `<image>` the way Idefics3's does. Weights are
random but seeded, and the output rows of special tokens and of byte tokens
that are part of a character are zero, so greedy answers run to max_tokens
in whole characters (whose text every server names alike).

Built with `transformers` and `tokenizers` alone; no hub, no network.
`vlm_model(dir)` builds once per directory (a marker file says it is whole).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from support.models import write_model_dir

IMAGE_SIZE = 56
PATCH = 14
SCALE = 2
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH) ** 2 // SCALE**2  # 4
TOKENS_PER_IMAGE = IMAGE_SEQ_LEN + 3  # <fake><global-img><image>×4<fake>

BOS = "<|begin_of_text|>"
EOS = "<end_of_utterance>"
IMAGE = "<image>"
FAKE = "<fake_token_around_image>"
GLOBAL = "<global-img>"
SPECIAL = (BOS, "<|endoftext|>", EOS, FAKE, IMAGE, GLOBAL) + tuple(
    f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)
)

# Idefics3's template, which also takes a message whose content is a string
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}"
    "{% else %}{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}"
    "{% endif %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

HIDDEN = 128
VISION_HIDDEN = 64
DONE = ".vlm-complete"
# the init of the weights whose names end so (the rest keep transformers' init)
_STD = {
    "self_attn.q_proj.weight": 0.2,
    "self_attn.k_proj.weight": 0.2,
    "self_attn.v_proj.weight": 0.2,
    "self_attn.o_proj.weight": 0.1,
    "patch_embedding.weight": 0.1,
    "modality_projection.proj.weight": 0.3,
}


def vlm_model(root: Path, name: str = "tiny-vlm", seed: int = 0) -> Path:
    """The model directory `root/name`, built unless it already is."""
    model_dir = root / name
    if (model_dir / DONE).exists():
        return model_dir
    write_model_dir(
        model_dir,
        special_tokens=SPECIAL,
        chat_template=TEMPLATE,
        bos_token=BOS,
        eos_token=EOS,
        pad_token="<|endoftext|>",
        generation_eos=[EOS],
        context_length=2048,
    )
    _write_processor(model_dir)
    _write_weights(model_dir, seed)
    (model_dir / DONE).write_text("ok\n", encoding="utf-8")
    return model_dir


def _write_processor(model_dir: Path) -> None:
    image = {
        "image_processor_type": "Idefics3ImageProcessor",
        "processor_class": "Idefics3Processor",
        "do_convert_rgb": True,
        "do_resize": True,
        "size": {"longest_edge": IMAGE_SIZE},
        "resample": 1,
        "do_image_splitting": False,
        "max_image_size": {"longest_edge": IMAGE_SIZE},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_pad": True,
    }
    processor = {"processor_class": "Idefics3Processor", "image_seq_len": IMAGE_SEQ_LEN}
    for file, value in (("preprocessor_config.json", image), ("processor_config.json", processor)):
        (model_dir / file).write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def _write_weights(model_dir: Path, seed: int) -> None:
    """config.json and model.safetensors of a seeded random Idefics3."""
    import torch
    from tokenizers import Tokenizer
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    image_id = tok.token_to_id(IMAGE)
    eos_id = tok.token_to_id(EOS)
    pad_id = tok.token_to_id("<|endoftext|>")
    config = Idefics3Config(
        image_token_id=image_id,
        scale_factor=SCALE,
        pad_token_id=pad_id,
        tie_word_embeddings=False,
        vision_config={
            "hidden_size": VISION_HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH,
            "num_channels": 3,
        },
        text_config={
            "model_type": "llama",
            "hidden_size": HIDDEN,
            "intermediate_size": 256,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 64,
            "num_hidden_layers": 2,
            "vocab_size": vocab,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "pad_token_id": pad_id,
            "bos_token_id": tok.token_to_id(BOS),
            "eos_token_id": eos_id,
            "tie_word_embeddings": False,
        },
    )
    config.eos_token_id = eos_id
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config).to(torch.float32).eval()
    with torch.no_grad():
        # embeddings wide enough that the tiny model's answers depend on the prompt
        model.get_input_embeddings().weight.normal_(0.0, 1.0)
        head = model.lm_head.weight
        head.normal_(0.0, 0.3)
        # greedy never picks a special token, nor one that is part of a character
        # (a byte of one: servers may name such a token's text differently)
        partial = [i for i in range(vocab) if "\ufffd" in tok.decode([i])]
        head[[tok.token_to_id(t) for t in SPECIAL] + partial] = 0.0
        # attention loud enough that the answer depends on the whole prompt, and
        # an image's tokens as loud as text's, so that it depends on the image
        for name, weight in model.named_parameters():
            std = next((v for k, v in _STD.items() if name.endswith(k)), None)
            if std is not None:
                weight.normal_(0.0, std)
    model.save_pretrained(str(model_dir), safe_serialization=True)
    # transformers writes its own generation config; the EOS is ours
    (model_dir / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [eos_id]}) + "\n", encoding="utf-8"
    )


def png(seed: int, size: int = IMAGE_SIZE) -> bytes:
    """A deterministic noisy RGB PNG (different seeds give different images)."""
    import random

    from PIL import Image

    rng = random.Random(seed)
    pixels = bytes(rng.randrange(256) for _ in range(size * size * 3))
    buf = io.BytesIO()
    Image.frombytes("RGB", (size, size), pixels).save(buf, format="PNG")
    return buf.getvalue()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()
