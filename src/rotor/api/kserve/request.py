"""A ModelInferRequest as the completions request it stands for.

`text_input` (BYTES) is the prompt; several elements are several prompts,
one choice each (n per prompt). Every other field of `/v1/completions`'s
request that a text answer can carry (max_tokens, temperature, top_p, seed,
stop, ignore_eos, …) may come as an input tensor of that name or as a
request parameter; given both ways, the two must agree. `streaming` (BOOL)
asks for one response per piece of text (ModelStreamInfer). The fields are
then validated by the completions request model itself, so a bad value is
refused with the very message HTTP's 400 gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rotor.api.body import validated
from rotor.api.kserve import kserve_pb2 as pb
from rotor.api.kserve.model import OUTPUTS, STREAMING, TEXT_INPUT
from rotor.api.kserve.tensors import Tensor, Value, bad, input_tensors, parameter_value
from rotor.protocol.openai import CompletionRequest

# Fields the KServe request sets itself, or whose answer has no output tensor.
_FIXED = frozenset({"prompt", "model", "stream", "stream_options", "echo", "logprobs"})
# Fields that are lists even when their tensor has one element.
_LISTS = frozenset({"stop_token_ids", "guided_choice"})
# Triton's own: every stream answer's last response carries
# triton_final_response, so an empty final response is never needed.
_TRITON = frozenset({"triton_enable_empty_final_response"})


@dataclass(frozen=True)
class InferCall:
    completion: CompletionRequest
    streaming: bool
    model: str  # as the request names it ("": the only model)
    id: str  # the client's request id, said back in every response
    outputs: tuple[str, ...]  # the output tensors to return, in order


def read_infer(request: pb.ModelInferRequest) -> InferCall:
    """The request's completion, or the 400 (INVALID_ARGUMENT) naming what is wrong."""
    tensors = input_tensors(request)
    prompt = _prompt(tensors.pop(TEXT_INPUT, None))
    fields = {name: _tensor_value(t) for name, t in tensors.items()}
    for name, param in request.parameters.items():
        if name in _TRITON:
            continue
        value = parameter_value(name, param)
        if name in fields and fields[name] != value:
            raise bad(
                f"{name!r} is given as an input tensor ({fields[name]!r}) and as a parameter "
                f"({value!r}): send one"
            )
        fields[name] = value
    streaming = fields.pop(STREAMING, False)
    if type(streaming) is not bool:
        raise bad(f"{STREAMING!r} must be a BOOL, got {streaming!r}")
    fixed = sorted(_FIXED & fields.keys())
    if fixed:
        raise bad(
            f"{fixed[0]!r} cannot be given over KServe: the prompt is {TEXT_INPUT!r}, the model "
            f"model_name, streaming {STREAMING!r}, and the outputs {', '.join(OUTPUTS)}"
        )
    data = {**fields, "prompt": prompt, "model": request.model_name or None, "stream": streaming}
    completion = validated(CompletionRequest, data)
    return InferCall(completion, streaming, request.model_name, request.id, _outputs(request))


def _prompt(tensor: Tensor | None) -> str | list[str]:
    if tensor is None:
        raise bad(f"missing required input {TEXT_INPUT!r} (BYTES: the prompt)")
    if tensor.datatype != "BYTES":
        raise bad(f"input {TEXT_INPUT!r} must be BYTES, got {tensor.datatype}")
    if not tensor.values:
        raise bad(f"input {TEXT_INPUT!r} holds no prompt")
    texts = [_text(tensor.name, v) for v in tensor.values]
    return texts[0] if len(texts) == 1 else texts


def _tensor_value(tensor: Tensor) -> Any:
    """A field's value from its tensor: the element, or the list of them."""
    values: Sequence[Value] = tensor.values
    if tensor.datatype == "BYTES":
        values = [_text(tensor.name, v) for v in values]
    if len(values) == 1 and tensor.name not in _LISTS:
        return values[0]
    return values


def _text(name: str, value: Value) -> str:
    assert isinstance(value, bytes)
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise bad(f"input {name!r} is not UTF-8 text") from None


def _outputs(request: pb.ModelInferRequest) -> tuple[str, ...]:
    """The requested outputs in their order (none named: all of them)."""
    names = tuple(dict.fromkeys(o.name for o in request.outputs)) or OUTPUTS
    for name in names:
        if name not in OUTPUTS:
            raise bad(f"unknown output {name!r}; the outputs are {', '.join(OUTPUTS)}")
    return names
