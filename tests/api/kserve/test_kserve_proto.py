"""rotor's kserve.proto against Triton's own (api/kserve/kserve.proto): every
message, field and rpc rotor declares is Triton's, by name, number and type,
as tritonclient's generated code (from Triton's grpc_service.proto and
model_config.proto) has them; both load in one process; and nothing of
grpc is imported unless --grpc-port asks for it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tritonclient.grpc.model_config_pb2 as triton_config
import tritonclient.grpc.service_pb2 as triton_service
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from rotor.api.kserve import kserve_pb2 as pb

OURS = pb.DESCRIPTOR


def triton_message(name: str) -> Descriptor:
    for module in (triton_service, triton_config):
        if name in module.DESCRIPTOR.message_types_by_name:
            return module.DESCRIPTOR.message_types_by_name[name]
    raise AssertionError(f"Triton has no message {name}")


def shape(field: FieldDescriptor) -> tuple:
    kind = field.message_type or field.enum_type
    return (field.number, field.type, field.is_repeated, kind.full_name if kind else None)


def pairs() -> list[tuple[Descriptor, Descriptor]]:
    out = []

    def walk(ours: Descriptor, theirs: Descriptor) -> None:
        out.append((ours, theirs))
        for inner in ours.nested_types:
            assert inner.name in theirs.nested_types_by_name, f"{theirs.full_name}.{inner.name}"
            walk(inner, theirs.nested_types_by_name[inner.name])

    for message in OURS.message_types_by_name.values():
        walk(message, triton_message(message.name))
    return out


PAIRS = pairs()


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=[o.full_name for o, _ in PAIRS])
def test_every_field_is_tritons(ours: Descriptor, theirs: Descriptor) -> None:
    assert ours.full_name == theirs.full_name
    for field in ours.fields:
        assert field.name in theirs.fields_by_name, (
            f"Triton's {theirs.full_name} has no {field.name}"
        )
        assert shape(field) == shape(theirs.fields_by_name[field.name]), field.full_name
    for oneof in ours.oneofs:
        assert [f.name for f in oneof.fields] == [
            f.name for f in theirs.oneofs_by_name[oneof.name].fields
        ]


def test_the_data_types_are_tritons() -> None:
    ours: EnumDescriptor = OURS.enum_types_by_name["DataType"]
    theirs = triton_config.DESCRIPTOR.enum_types_by_name["DataType"]
    assert [(v.name, v.number) for v in ours.values] == [(v.name, v.number) for v in theirs.values]


def test_every_rpc_is_tritons() -> None:
    (ours,) = OURS.services_by_name.values()
    theirs = triton_service.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert ours.full_name == theirs.full_name == "inference.GRPCInferenceService"
    for method in ours.methods:
        t = theirs.methods_by_name[method.name]
        assert (method.input_type.full_name, method.output_type.full_name) == (
            t.input_type.full_name,
            t.output_type.full_name,
        )
        assert (method.client_streaming, method.server_streaming) == (
            t.client_streaming,
            t.server_streaming,
        )
    assert {m.name for m in ours.methods} == {
        "ServerLive", "ServerReady", "ModelReady", "ServerMetadata",
        "ModelMetadata", "ModelInfer", "ModelStreamInfer", "ModelConfig",
    }  # fmt: skip


def test_bytes_cross_between_the_two() -> None:
    """What rotor writes, tritonclient's classes read, and back."""
    ours = pb.ModelInferResponse(model_name="m", id="x", raw_output_contents=[b"\x01\x00\x00\x00a"])
    ours.parameters["triton_final_response"].bool_param = True
    ours.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    theirs = triton_service.ModelInferResponse.FromString(ours.SerializeToString())
    assert theirs.parameters["triton_final_response"].bool_param
    assert (theirs.outputs[0].name, list(theirs.outputs[0].shape)) == ("text_output", [1])
    assert pb.ModelInferResponse.FromString(theirs.SerializeToString()) == ours


def test_grpc_is_not_imported_without_grpc_port() -> None:
    """A serving process, its app built, in a fresh interpreter: no grpc or
    protobuf module among its imports unless --grpc-port is given."""
    code = (
        "import sys\n"
        "from rotor.config import HTTPConfig, RunConfig\n"
        "from rotor.serve.build import build_system\n"
        "import rotor.cli, rotor.serve.run, rotor.serve.frontend, rotor.serve.http_processes\n"
        "build_system(RunConfig()).app(HTTPConfig())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'grpc' or m.startswith('google.protobuf')))\n"
        "build_system(RunConfig()).app(HTTPConfig(grpc_port=0))\n"
        "print('grpc' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_grpc_port_without_grpc_installed_is_a_clear_startup_error() -> None:
    """grpcio missing (its import refused here): `rotor run --grpc-port`
    stops before building anything, saying what to install (exit 2)."""
    code = (
        "import sys\n"
        "class Missing:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'grpc':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Missing)\n"
        "from rotor.cli import main\n"
        "sys.exit(main(['run', '--grpc-port', '0', '--port', '0']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "--grpc-port needs grpcio and protobuf: pip install 'rotor[grpc]'" in out.stderr
