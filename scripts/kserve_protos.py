"""Regenerate rotor's KServe gRPC code from src/rotor/api/kserve/kserve.proto.

    python -m venv /tmp/protoc && /tmp/protoc/bin/pip install grpcio-tools==1.71.0
    /tmp/protoc/bin/python scripts/kserve_protos.py

The generated kserve_pb2.py and kserve_pb2_grpc.py are checked in (rotor
needs no protoc to be installed or run). They come from one pinned
grpcio-tools, because generated code refuses a protobuf runtime older than
the protoc that wrote it, and a grpcio older than the grpcio-tools: 1.71.0
writes protobuf 5.29 code, which the `grpc` extra's floor
(protobuf>=5.29, grpcio>=1.71) matches and every newer runtime reads.

One edit follows protoc: the messages are registered in a descriptor pool of
rotor's own, not protobuf's default one, so rotor's `inference.*` messages
and tritonclient's (the same names, in the same package) can be loaded in
one process: the default pool refuses a second definition of a name.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PROTO = "rotor/api/kserve/kserve.proto"
TOOLS = "1.71.0"
DEFAULT_POOL = "_descriptor_pool.Default().AddSerializedFile("
OWN_POOL = (
    "_descriptor_pool.DescriptorPool().AddSerializedFile(  # rotor's own pool "
    "(scripts/kserve_protos.py)\n    "
)


def main() -> int:
    try:
        from importlib.metadata import version

        from grpc_tools import protoc
    except ImportError:
        print(f"needs grpcio-tools: pip install grpcio-tools=={TOOLS}", file=sys.stderr)
        return 2
    found = version("grpcio-tools")
    if found != TOOLS:
        print(
            f"needs grpcio-tools=={TOOLS} (found {found}); see this script's docstring",
            file=sys.stderr,
        )
        return 2
    args = [
        "protoc",
        f"-I{SRC}",
        f"--python_out={SRC}",
        f"--grpc_python_out={SRC}",
        str(SRC / PROTO),
    ]
    if protoc.main(args) != 0:
        return 1
    generated = SRC / PROTO.replace(".proto", "_pb2.py")
    code = generated.read_text()
    if code.count(DEFAULT_POOL) != 1:
        print(f"{generated}: expected one {DEFAULT_POOL!r}", file=sys.stderr)
        return 1
    generated.write_text(code.replace(DEFAULT_POOL, OWN_POOL))
    print(f"wrote {generated.relative_to(ROOT)} and its _grpc module")
    return 0


if __name__ == "__main__":
    sys.exit(main())
