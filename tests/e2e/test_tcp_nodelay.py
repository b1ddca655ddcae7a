"""No Nagle stalls: the server's side of a keep-alive connection has
TCP_NODELAY, in one process and with --http-workers. Read from the server's
own socket (Linux: pidfd_getfd duplicates it into this process)."""

from __future__ import annotations

import ctypes
import os
import socket
from pathlib import Path

import pytest

from support.server import rotor_server

SYS_PIDFD_GETFD = 438  # x86_64 and aarch64 alike


def _descendants(pid: int) -> list[int]:
    out = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        out += _descendants(int(child))
    return out


def _inode_of(pid: int, local_port: int, remote_port: int) -> int | None:
    """The socket inode of the server's end of the connection, from /proc/PID/net/tcp."""
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], int(fields[9])
        if int(local.split(":")[1], 16) == local_port and int(remote.split(":")[1], 16) == (
            remote_port
        ):
            return inode
    return None


def server_nodelay(server_pid: int, server_port: int, client: socket.socket) -> int:
    """TCP_NODELAY on whichever server process holds the other end of `client`."""
    inode = _inode_of(server_pid, server_port, client.getsockname()[1])
    assert inode, "the server's end of the connection is not in /proc/net/tcp"
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in _descendants(server_pid):
        for fd_path in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd_path) != f"socket:[{inode}]":
                    continue
            except OSError:
                continue
            pidfd = os.pidfd_open(pid)
            try:
                fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(fd_path.name), 0)
                assert fd >= 0, f"pidfd_getfd: {os.strerror(ctypes.get_errno())}"
                with socket.socket(fileno=fd) as dup:
                    return dup.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            finally:
                os.close(pidfd)
    raise AssertionError("no server process holds the connection")


def read_response(sock: socket.socket) -> bytes:
    """One whole HTTP/1.1 response (head and its content-length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        body += chunk
    assert len(body) == length, "more bytes than the response: a second response?"
    return head + b"\r\n\r\n" + body


@pytest.mark.parametrize("workers", [[], ["--http-workers", "2"]], ids=["one", "workers"])
def test_keep_alive_connections_have_tcp_nodelay(workers: list[str]) -> None:
    with rotor_server(*workers) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            for _ in range(2):  # the same connection, kept alive across requests
                client.sendall(b"GET /live HTTP/1.1\r\nHost: t\r\n\r\n")
                reply = read_response(client)
                assert reply.startswith(b"HTTP/1.1 200"), reply
            assert server_nodelay(server.process.pid, port, client) != 0
