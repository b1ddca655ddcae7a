"""An infer request as the completions request (api/kserve/request.py):
text_input is the prompt, the other fields come as tensors or parameters
(given both ways they must agree), and every refusal is the message HTTP's
400 gives for the same field."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from rotor.api.body import validated
from rotor.api.errors import APIError
from rotor.api.kserve import kserve_pb2 as pb
from rotor.api.kserve.request import read_infer
from rotor.api.kserve.tensors import encode_bytes
from rotor.protocol.openai import CompletionRequest

from support.kserve import set_params

Input = pb.ModelInferRequest.InferInputTensor


def infer(
    prompts: list[bytes] | None = (b"hello",),  # type: ignore[assignment]
    params: dict[str, Any] | None = None,
    inputs: list[Input] = (),  # type: ignore[assignment]
    model: str = "m",
) -> pb.ModelInferRequest:
    r = pb.ModelInferRequest(model_name=model, id="req-1")
    if prompts is not None:
        t = r.inputs.add(name="text_input", datatype="BYTES", shape=[len(prompts)])
        t.contents.bytes_contents.extend(prompts)
    r.inputs.extend(inputs)
    set_params(r.parameters, (params or {}))
    return r


def tensor(name: str, datatype: str, field: str, values: list[Any]) -> Input:
    contents = pb.InferTensorContents(**{field: values})
    return Input(name=name, datatype=datatype, shape=[len(values)], contents=contents)


def refused(req: pb.ModelInferRequest) -> str:
    with pytest.raises(APIError) as e:
        read_infer(req)
    assert e.value.status == 400
    return e.value.message


def http_400(body: dict[str, Any]) -> str:
    """What `/v1/completions` answers to `body`: its 400's message."""
    with pytest.raises(APIError) as e:
        validated(CompletionRequest, {"prompt": "hello", **body})
    return e.value.message


def test_text_input_is_the_prompt_and_the_rest_is_defaults() -> None:
    call = read_infer(infer())
    c = call.completion
    assert (c.prompt, c.model, c.stream, c.max_tokens, c.n) == ("hello", "m", False, None, 1)
    assert (call.streaming, call.id, call.outputs) == (
        False,
        "req-1",
        ("text_output", "finish_reason"),
    )


def test_several_prompts_are_several_prompts() -> None:
    assert read_infer(infer([b"a", "é".encode()])).completion.prompts() == ["a", "é"]


def test_raw_text_input_as_tritonclient_sends_it() -> None:
    r = pb.ModelInferRequest(model_name="m")
    r.inputs.add(name="text_input", datatype="BYTES", shape=[1, 1])
    r.raw_input_contents.append(encode_bytes([b"raw prompt"]))
    assert read_infer(r).completion.prompt == "raw prompt"


def test_parameters_of_every_type() -> None:
    c = read_infer(
        infer(params={"max_tokens": 5, "temperature": 0.5, "ignore_eos": True, "stop": "\n", "seed": 3})
    ).completion  # fmt: skip
    assert (c.max_tokens, c.temperature, c.ignore_eos, c.stop, c.seed) == (5, 0.5, True, ["\n"], 3)


def test_tensors_of_every_type() -> None:
    r = infer(
        inputs=[
            tensor("max_tokens", "INT32", "int_contents", [7]),
            tensor("temperature", "FP64", "fp64_contents", [0.25]),
            tensor("top_p", "FP32", "fp32_contents", [0.5]),
            tensor("ignore_eos", "BOOL", "bool_contents", [True]),
            tensor("stop", "BYTES", "bytes_contents", [b"a", b"b"]),
            tensor("stop_token_ids", "INT64", "int64_contents", [9]),
            tensor("streaming", "BOOL", "bool_contents", [True]),
        ]
    )
    call = read_infer(r)
    c = call.completion
    assert (c.max_tokens, c.temperature, c.top_p, c.ignore_eos) == (7, 0.25, 0.5, True)
    assert (c.stop, c.stop_token_ids) == (["a", "b"], [9])  # a one-element id list stays a list
    assert call.streaming and c.stream


def test_raw_parameter_tensors() -> None:
    r = pb.ModelInferRequest(model_name="m")
    r.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    r.inputs.add(name="max_tokens", datatype="UINT32", shape=[1])
    r.inputs.add(name="streaming", datatype="BOOL", shape=[1])
    r.raw_input_contents.extend([encode_bytes([b"p"]), struct.pack("<I", 4), b"\x00"])
    call = read_infer(r)
    assert (call.completion.max_tokens, call.streaming) == (4, False)


def test_a_field_given_both_ways_must_agree() -> None:
    same = infer(
        params={"max_tokens": 5}, inputs=[tensor("max_tokens", "INT64", "int64_contents", [5])]
    )
    assert read_infer(same).completion.max_tokens == 5
    other = infer(
        params={"max_tokens": 6}, inputs=[tensor("max_tokens", "INT64", "int64_contents", [5])]
    )
    assert refused(other) == (
        "'max_tokens' is given as an input tensor (5) and as a parameter (6): send one"
    )  # fmt: skip


@pytest.mark.parametrize(
    "body",
    [
        {"temperature": -1.0},
        {"max_tokens": 0},
        {"max_tokens": "5"},  # a string is no integer, in JSON or as a string_param
        {"top_p": 2.0},
        {"n": 17},
        {"no_such_field": 1},
        {"stop": ""},
    ],
)
def test_refusals_are_http_400s_word_for_word(body: dict[str, Any]) -> None:
    assert refused(infer(params=body)) == http_400(body)


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (infer(prompts=None), "missing required input 'text_input' (BYTES: the prompt)"),
        (infer(prompts=[]), "input 'text_input' holds no prompt"),
        (infer(prompts=[b"\xff"]), "input 'text_input' is not UTF-8 text"),
        (
            infer(prompts=None, inputs=[tensor("text_input", "INT32", "int_contents", [1])]),
            "input 'text_input' must be BYTES, got INT32",
        ),
        (infer(params={"streaming": 1}), "'streaming' must be a BOOL, got 1"),
        (infer(params={"stream": True}), "'stream' cannot be given over KServe"),
        (infer(params={"logprobs": 1}), "'logprobs' cannot be given over KServe"),
        (infer(params={"prompt": "x"}), "'prompt' cannot be given over KServe"),
    ],
)
def test_what_kserve_itself_refuses(req: pb.ModelInferRequest, message: str) -> None:
    assert refused(req).startswith(message)


def test_requested_outputs_in_their_order() -> None:
    r = infer()
    r.outputs.add(name="finish_reason")
    r.outputs.add(name="text_output")
    assert read_infer(r).outputs == ("finish_reason", "text_output")
    r.outputs.add(name="logits")
    assert refused(r) == "unknown output 'logits'; the outputs are text_output, finish_reason"


def test_tritons_empty_final_response_flag_is_accepted() -> None:
    """Every stream answer's last response is marked final, so the flag asks
    for nothing more (api/kserve/answer.py)."""
    call = read_infer(infer(params={"triton_enable_empty_final_response": True}))
    assert call.completion.model_extra in (None, {})


def test_no_model_name_is_the_only_model() -> None:
    assert read_infer(infer(model="")).completion.model is None
