"""KServe tensors as values (api/kserve/tensors.py): the BYTES encoding
tritonclient writes and reads, typed and raw contents, and the checks that
make a malformed tensor the client's INVALID_ARGUMENT."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from rotor.api.errors import APIError
from rotor.api.kserve import kserve_pb2 as pb
from rotor.api.kserve.tensors import (
    bytes_output,
    decode_bytes,
    encode_bytes,
    input_tensors,
    parameter_value,
)

Input = pb.ModelInferRequest.InferInputTensor


@given(st.lists(st.binary(max_size=64), max_size=20))
def test_bytes_round_trip(items: list[bytes]) -> None:
    assert decode_bytes(encode_bytes(items)) == items


@given(st.lists(st.binary(min_size=1, max_size=32), min_size=1, max_size=10))
def test_bytes_are_what_tritonclient_writes_and_reads(items: list[bytes]) -> None:
    """The same bytes as NVIDIA's own client's serializer, both ways (its
    serializer strips trailing NULs of np.bytes_, so object arrays here)."""
    array = np.array(items, dtype=np.object_)
    written = serialize_byte_tensor(array).item()
    assert encode_bytes(items) == written
    assert decode_bytes(written) == items
    assert list(deserialize_bytes_tensor(encode_bytes(items))) == items


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\x05\x00\x00", "a length prefix is cut short"),
        (b"\x05\x00\x00\x00abc", "an element of 5 bytes runs past the end"),
        (struct.pack("<I", 1) + b"a" + b"\x00", "a length prefix is cut short"),
    ],
)
def test_malformed_bytes_are_refused(raw: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode_bytes(raw)


def request(*inputs: Input, raw: list[bytes] | None = None) -> pb.ModelInferRequest:
    r = pb.ModelInferRequest(model_name="m", inputs=list(inputs))
    r.raw_input_contents.extend(raw or [])
    return r


def test_typed_contents_by_datatype() -> None:
    tensors = input_tensors(
        request(
            Input(name="a", datatype="INT32", shape=[2], contents=pb.InferTensorContents(int_contents=[1, -2])),
            Input(name="b", datatype="FP64", shape=[1], contents=pb.InferTensorContents(fp64_contents=[0.25])),
            Input(name="c", datatype="BOOL", shape=[1, 1], contents=pb.InferTensorContents(bool_contents=[True])),
            Input(name="d", datatype="BYTES", shape=[1], contents=pb.InferTensorContents(bytes_contents=[b"x"])),
            Input(name="e", datatype="UINT64", shape=[1], contents=pb.InferTensorContents(uint64_contents=[2**63])),
        )
    )  # fmt: skip
    assert {n: (t.datatype, t.values) for n, t in tensors.items()} == {
        "a": ("INT32", [1, -2]),
        "b": ("FP64", [0.25]),
        "c": ("BOOL", [True]),
        "d": ("BYTES", [b"x"]),
        "e": ("UINT64", [2**63]),
    }


def test_raw_contents_are_little_endian_row_major() -> None:
    tensors = input_tensors(
        request(
            Input(name="a", datatype="INT64", shape=[1, 2]),
            Input(name="b", datatype="BOOL", shape=[1]),
            Input(name="c", datatype="BYTES", shape=[2]),
            Input(name="d", datatype="FP32", shape=[1]),
            raw=[struct.pack("<qq", 7, -1), b"\x01", encode_bytes([b"hi", b""]), struct.pack("<f", 0.5)],
        )
    )  # fmt: skip
    assert [t.values for t in tensors.values()] == [[7, -1], [True], [b"hi", b""], [0.5]]


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (
            request(Input(name="a", datatype="FP16", shape=[1])),
            "input 'a': datatype 'FP16' is not served",
        ),
        (
            request(Input(name="a", datatype="INT32", shape=[2], contents=pb.InferTensorContents(int_contents=[1]))),
            "input 'a': shape [2] holds 2 element(s), its contents 1",
        ),
        (
            request(Input(name="a", datatype="INT32", shape=[-1])),
            "input 'a': shape [-1] has a negative dimension",
        ),
        (
            request(Input(name="a", datatype="INT32", shape=[0]), Input(name="a", datatype="INT32", shape=[0])),
            "input 'a' is given twice",
        ),
        (
            request(Input(name="a", datatype="INT32", shape=[1]), Input(name="b", datatype="INT32", shape=[1]), raw=[b"\0" * 4]),
            "raw_input_contents must hold one entry per input: 2 inputs, 1 entries",
        ),
        (
            request(Input(name="a", datatype="INT32", shape=[1]), raw=[b"\0" * 3]),
            "input 'a': 3 bytes are not whole INT32 elements",
        ),
        (
            request(Input(name="a", datatype="BYTES", shape=[1]), raw=[b"\x09\0\0\0ab"]),
            "input 'a': malformed BYTES contents (an element of 9 bytes runs past the end)",
        ),
        (
            request(Input(name="a", datatype="INT32", shape=[1], contents=pb.InferTensorContents()), raw=[b"\0" * 4]),
            "input 'a' has contents and raw_input_contents: send one",
        ),
    ],
)  # fmt: skip
def test_malformed_tensors_are_the_clients_400(req: pb.ModelInferRequest, message: str) -> None:
    with pytest.raises(APIError) as e:
        input_tensors(req)
    assert e.value.status == 400
    assert e.value.message.startswith(message), e.value.message


@pytest.mark.parametrize(
    ("param", "value"),
    [
        (pb.InferParameter(bool_param=False), False),
        (pb.InferParameter(int64_param=-3), -3),
        (pb.InferParameter(uint64_param=2**64 - 1), 2**64 - 1),
        (pb.InferParameter(double_param=0.125), 0.125),
        (pb.InferParameter(string_param=""), ""),
    ],
)
def test_a_parameter_is_its_one_value(param: pb.InferParameter, value: object) -> None:
    got = parameter_value("p", param)
    assert got == value and type(got) is type(value)


def test_a_parameter_with_no_value_is_refused() -> None:
    with pytest.raises(APIError, match="parameter 'p' holds no value"):
        parameter_value("p", pb.InferParameter())


def test_an_output_is_raw_bytes_one_element_each() -> None:
    response = pb.ModelInferResponse()
    bytes_output(response, "text_output", ["héllo".encode(), b""])
    (out,) = response.outputs
    assert (out.name, out.datatype, list(out.shape)) == ("text_output", "BYTES", [2])
    assert decode_bytes(response.raw_output_contents[0]) == ["héllo".encode(), b""]
