"""Tensors and parameters as plain values, and back.

An input tensor's elements come either from its typed `contents` or from
the request's `raw_input_contents` (little-endian, row-major; each BYTES
element a 4-byte little-endian length, then its bytes: what tritonclient
writes and reads). Outputs are written raw, which is what tritonclient's
`as_numpy` reads. A parameter is its one value (bool, int, float or str).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from rotor.api.errors import APIError
from rotor.api.kserve import kserve_pb2 as pb

Value = bool | int | float | str | bytes

_LENGTH = struct.Struct("<I")

# the typed field of InferTensorContents, and the raw element (struct), per datatype
_CONTENTS = {
    "BOOL": ("bool_contents", "?"),
    "INT8": ("int_contents", "b"),
    "INT16": ("int_contents", "h"),
    "INT32": ("int_contents", "i"),
    "INT64": ("int64_contents", "q"),
    "UINT8": ("uint_contents", "B"),
    "UINT16": ("uint_contents", "H"),
    "UINT32": ("uint_contents", "I"),
    "UINT64": ("uint64_contents", "Q"),
    "FP32": ("fp32_contents", "f"),
    "FP64": ("fp64_contents", "d"),
    "BYTES": ("bytes_contents", ""),
}
DATATYPES = tuple(_CONTENTS)


def bad(message: str) -> APIError:
    """The client's mistake: INVALID_ARGUMENT, as HTTP's 400."""
    return APIError(400, message)


def encode_bytes(items: list[bytes]) -> bytes:
    """BYTES elements as raw contents: each a 4-byte little-endian length, then its bytes."""
    return b"".join(_LENGTH.pack(len(item)) + item for item in items)


def decode_bytes(raw: bytes) -> list[bytes]:
    """Raw BYTES contents as their elements; ValueError when they are not
    length-prefixed elements end to end."""
    items = []
    at = 0
    while at < len(raw):
        if at + 4 > len(raw):
            raise ValueError("a length prefix is cut short")
        (size,) = _LENGTH.unpack_from(raw, at)
        at += 4
        if at + size > len(raw):
            raise ValueError(f"an element of {size} bytes runs past the end")
        items.append(raw[at : at + size])
        at += size
    return items


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    values: Sequence[Value]  # row-major, the shape's element count


def input_tensors(request: pb.ModelInferRequest) -> dict[str, Tensor]:
    """The request's input tensors by name, each with its elements."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise bad(
            f"raw_input_contents must hold one entry per input: {len(request.inputs)} "
            f"inputs, {len(raw)} entries"
        )
    out: dict[str, Tensor] = {}
    for i, tensor in enumerate(request.inputs):
        if tensor.name in out:
            raise bad(f"input {tensor.name!r} is given twice")
        if raw and tensor.HasField("contents"):
            raise bad(f"input {tensor.name!r} has contents and raw_input_contents: send one")
        values = tensor_values(tensor, raw[i] if raw else None)
        out[tensor.name] = Tensor(tensor.name, tensor.datatype, values)
    return out


def tensor_values(
    tensor: pb.ModelInferRequest.InferInputTensor, raw: bytes | None
) -> Sequence[Value]:
    """A tensor's elements, from `raw` when given, else from its contents;
    their count must be the shape's."""
    name, datatype = tensor.name, tensor.datatype
    if datatype not in _CONTENTS:
        raise bad(
            f"input {name!r}: datatype {datatype!r} is not served; one of {', '.join(DATATYPES)}"
        )
    if any(d < 0 for d in tensor.shape):
        raise bad(f"input {name!r}: shape {list(tensor.shape)} has a negative dimension")
    field, element = _CONTENTS[datatype]
    values: Sequence[Value]
    if raw is None:
        values = list(getattr(tensor.contents, field))
    elif datatype == "BYTES":
        try:
            values = decode_bytes(raw)
        except ValueError as e:
            raise bad(
                f"input {name!r}: malformed BYTES contents ({e}); each element is a "
                "4-byte little-endian length, then its bytes"
            ) from None
    else:
        layout = struct.Struct("<" + element)
        if len(raw) % layout.size:
            raise bad(f"input {name!r}: {len(raw)} bytes are not whole {datatype} elements")
        values = [v for (v,) in layout.iter_unpack(raw)]
    count = math.prod(tensor.shape)
    if len(values) != count:
        raise bad(
            f"input {name!r}: shape {list(tensor.shape)} holds {count} element(s), "
            f"its contents {len(values)}"
        )
    return values


def parameter_value(name: str, param: pb.InferParameter) -> Value:
    """The value a parameter holds."""
    choice = param.WhichOneof("parameter_choice")
    if choice is None:
        raise bad(f"parameter {name!r} holds no value")
    value = getattr(param, choice)
    if not isinstance(value, (bool, int, float, str, bytes)):  # a oneof member of a newer proto
        raise bad(f"parameter {name!r} holds a {type(value).__name__}, not a value")
    return value


def bytes_output(
    response: pb.ModelInferResponse, name: str, items: list[bytes]
) -> pb.ModelInferResponse.InferOutputTensor:
    """A BYTES output tensor of `items` (shape [len]) added to `response`, its contents raw."""
    out = response.outputs.add(name=name, datatype="BYTES", shape=[len(items)])
    response.raw_output_contents.append(encode_bytes(items))
    return out
