"""A fake Kubernetes API server for the kubernetes connector's tests (no
cluster runs here): only a Deployment's scale subresource, over plain HTTP on a
free loopback port, answering as the real one does (an autoscaling/v1 Scale,
or a v1 Status on failure). It records every request, so a test sees exactly
what the official client sent."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

SCALE_PATH = re.compile(r"/apis/apps/v1/namespaces/([^/]+)/deployments/([^/]+)/scale")
# the patch types the API server takes for the scale subresource (a JSON patch is a list)
OBJECT_PATCHES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    content_type: str | None
    authorization: str | None
    body: Any  # parsed JSON; None when there was none


@dataclass
class FakeKube:
    url: str
    deployments: dict[tuple[str, str], int]  # (namespace, name) -> spec.replicas
    forbidden: set[tuple[str, str]] = field(default_factory=set)  # answered 403
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def patches(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.method == "PATCH"]

    def replicas(self, namespace: str, name: str) -> int:
        with self.lock:
            return self.deployments[(namespace, name)]

    def forbid(self, namespace: str, name: str) -> None:
        """From now on, every request for this Deployment gets 403 Forbidden."""
        with self.lock:
            self.forbidden.add((namespace, name))

    def write_kubeconfig(self, path: Path, token: str | None = None) -> Path:
        """A kubeconfig whose current context is this server (a bearer token if given)."""
        user: dict[str, Any] = {"token": token} if token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path


def scale_object(namespace: str, name: str, replicas: int) -> dict[str, Any]:
    # the real API leaves spec.replicas out when it is 0 (omitempty)
    spec = {"replicas": replicas} if replicas else {}
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"replicas": replicas},
    }


def status_object(code: int, reason: str, message: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {"name": name, "group": "apps", "kind": "deployments"},
        "code": code,
    }


def _handler(kube: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request a connection: nothing lingers at stop

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:  # noqa: N802
            self._serve("GET")

        def do_PATCH(self) -> None:  # noqa: N802
            self._serve("PATCH")

        def _serve(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            content_type = self.headers.get("Content-Type")
            with kube.lock:
                kube.requests.append(
                    Request(method, path, content_type, self.headers.get("Authorization"), body)
                )
            match = SCALE_PATH.fullmatch(path)
            if match is None:
                self._answer(
                    404,
                    status_object(
                        404, "NotFound", "the server could not find the requested resource", ""
                    ),
                )
                return
            namespace, name = match.groups()
            self._answer(*self._scale(method, namespace, name, content_type, body))

        def _scale(
            self, method: str, namespace: str, name: str, content_type: str | None, body: Any
        ) -> tuple[int, dict[str, Any]]:
            key = (namespace, name)
            with kube.lock:
                if key in kube.forbidden:
                    verb = "get" if method == "GET" else "patch"
                    message = (
                        f'deployments.apps "{name}" is forbidden: User '
                        f'"system:serviceaccount:{namespace}:planner" cannot {verb} resource '
                        f'"deployments/scale" in API group "apps" in the namespace "{namespace}"'
                    )
                    return 403, status_object(403, "Forbidden", message, name)
                if key not in kube.deployments:
                    message = f'deployments.apps "{name}" not found'
                    return 404, status_object(404, "NotFound", message, name)
                if method == "PATCH":
                    if (content_type or "").split(";")[0] not in OBJECT_PATCHES:
                        message = (
                            f"the body of the request was in an unknown format: {content_type}"
                        )
                        return 415, status_object(415, "UnsupportedMediaType", message, name)
                    replicas = (body or {}).get("spec", {}).get("replicas")
                    if replicas is not None:
                        kube.deployments[key] = int(replicas)
                return 200, scale_object(namespace, name, kube.deployments[key])

        def _answer(self, code: int, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def fake_kube(deployments: dict[tuple[str, str], int]) -> Iterator[FakeKube]:
    """The fake API server holding `deployments`, until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    kube = FakeKube(f"http://127.0.0.1:{server.server_address[1]}", dict(deployments))
    server.RequestHandlerClass = _handler(kube)
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="fake-kube", daemon=True
    )
    thread.start()
    try:
        yield kube
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
