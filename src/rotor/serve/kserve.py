"""`--grpc-port`: a serving process's KServe gRPC options, and, under
`--http-workers`, the one port all its HTTP processes serve gRPC on.

Every HTTP process serves gRPC too, as it serves HTTP: each listens on the
same port (SO_REUSEPORT), so the kernel spreads gRPC connections over them
as it spreads HTTP ones. gRPC cannot listen on a socket it is handed, so the
parent chooses the port (0: a free one) and holds it with a bound socket
that takes no connections, which keeps any other program off the port; the
HTTP processes bind it themselves once they have started."""

from __future__ import annotations

import dataclasses
import socket

from rotor import logs
from rotor.api.kserve import KServeOptions, announce_line
from rotor.config import HTTPConfig
from rotor.serve.processes import ProcessError, reuse_port_socket


def kserve_options(http: HTTPConfig) -> KServeOptions | None:
    """The gRPC server's options; None without `--grpc-port`."""
    if http.grpc_port is None:
        return None
    shared = http.http_workers > 1
    return KServeOptions(http.host, http.grpc_port, http.shutdown_grace, shared=shared)


def hold_shared_port(http: HTTPConfig) -> tuple[HTTPConfig, socket.socket | None]:
    """`http` with the gRPC port the HTTP processes will share, and the
    socket that holds it until the parent exits (None without `--grpc-port`).
    ProcessError when the port is taken."""
    if http.grpc_port is None:
        return http, None
    sock = reuse_port_socket(http.host, http.grpc_port)
    try:
        port = sock.getsockname()[1]
    except OSError as e:  # pragma: no cover - a bound socket has a name
        sock.close()
        raise ProcessError(f"cannot hold the gRPC port: {e}") from None
    return dataclasses.replace(http, grpc_port=port), sock


def say_shared_port(http: HTTPConfig) -> None:
    """The parent's line saying where its HTTP processes serve gRPC."""
    if http.grpc_port is not None:
        line = announce_line(http.host, http.grpc_port)
        logs.say(f"{line} (every HTTP process)", grpc=line.rpartition(" ")[2])
