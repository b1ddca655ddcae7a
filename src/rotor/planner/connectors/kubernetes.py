"""`rotor planner --connector kubernetes`: each pool is a Deployment, scaled by
its scale subresource (`deployments/scale`, get and patch), so the planner
needs no rights on the Deployment itself. The ReplicaSet controller picks the
pods to remove; a worker drains itself on SIGTERM, so `drain` goes unused.

The official client is synchronous: each call runs in a thread. It is an
optional extra (`rotor[kubernetes]`), imported only when this connector starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

from rotor.planner.connectors import ConnectorError
from rotor.planner.observation import POOLS, PoolName, WorkerLoad

T = TypeVar("T")

# seconds to connect, and to read an answer: an API server that hangs must not hang the planner
REQUEST_TIMEOUT_S = (5.0, 15.0)
# a merge patch of spec.replicas, what `kubectl scale` sends: the same in every client version
PATCH_TYPE = "application/merge-patch+json"
# a Deployment's name is a DNS-1123 subdomain
DEPLOYMENT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
PERMISSION_HINT = "the planner's service account needs get and patch on deployments/scale"


def parse_deployments(values: list[str]) -> dict[PoolName, str]:
    """The CLI's repeated `--deployment POOL=NAME`, as {pool: Deployment name}."""
    deployments: dict[PoolName, str] = {}
    for value in values:
        pool, sep, name = value.partition("=")
        pool, name = pool.strip(), name.strip()
        if not sep:
            raise ValueError(
                f"--deployment {value!r}: expected POOL=NAME (e.g. decode=rotor-decode)"
            )
        if pool not in POOLS:
            raise ValueError(
                f"--deployment {value!r}: unknown pool {pool!r}; pools are {', '.join(POOLS)}"
            )
        if not DEPLOYMENT_NAME.fullmatch(name):
            raise ValueError(
                f"--deployment {value!r}: {name!r} is not a Deployment name "
                "(lowercase letters, digits, '-' and '.')"
            )
        if pool in deployments:
            raise ValueError(f"--deployment {pool}=...: given twice")
        deployments[pool] = name
    return deployments


class KubernetesConnector:
    name = "kubernetes"

    def __init__(
        self, namespace: str, deployments: dict[PoolName, str], kubeconfig: str | None = None
    ) -> None:
        self.namespace = namespace
        self.deployments = dict(deployments)
        self.kubeconfig = kubeconfig
        self.host: str | None = None  # the API server's URL, once started
        self._api_client: Any = None
        self._apps: Any = None

    async def start(self) -> None:
        try:
            import kubernetes  # noqa: F401 - the optional extra
        except ImportError:
            raise ConnectorError(
                "--connector kubernetes needs the kubernetes client: pip install 'rotor[kubernetes]'"
            ) from None
        self._api_client = await asyncio.to_thread(self._connect)

    def _connect(self) -> Any:
        """An ApiClient by the explicit kubeconfig, else the service account
        (in a pod), else the default kubeconfig ($KUBECONFIG or ~/.kube/config)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        if self.kubeconfig is not None and not os.path.isfile(os.path.expanduser(self.kubeconfig)):
            raise ConnectorError(f"kubernetes: no kubeconfig at {self.kubeconfig}")
        try:
            if self.kubeconfig is not None:
                config.load_kube_config(
                    config_file=self.kubeconfig, client_configuration=configuration
                )
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                config.load_incluster_config(client_configuration=configuration)
            else:
                path = os.environ.get("KUBECONFIG") or "~/.kube/config"
                config.load_kube_config(config_file=path, client_configuration=configuration)
        except Exception as e:  # ConfigException, or the YAML or file beneath it
            raise ConnectorError(self._config_failure(e)) from e
        self.host = configuration.host
        api_client = client.ApiClient(configuration)
        self._apps = client.AppsV1Api(api_client)
        return api_client

    def _config_failure(self, e: Exception) -> str:
        if self.kubeconfig is not None:
            return f"kubernetes: cannot use the kubeconfig {self.kubeconfig}: {e}"
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return (
                f"kubernetes: KUBERNETES_SERVICE_HOST is set but the in-cluster config "
                f"failed ({e}): run in a pod with a service account, or give --kubeconfig"
            )
        path = os.environ.get("KUBECONFIG") or "~/.kube/config"
        return (
            f"kubernetes: no usable kubeconfig at {path} ({e}) and not in a cluster "
            "(KUBERNETES_SERVICE_HOST unset): give --kubeconfig PATH"
        )

    async def replicas(self, pool: PoolName) -> int | None:
        """The Deployment's spec.replicas (0 when the API leaves it out)."""
        name = self._deployment(pool)
        scale = await self._call(
            "get",
            name,
            lambda: self._apps.read_namespaced_deployment_scale(
                name, self.namespace, _request_timeout=REQUEST_TIMEOUT_S
            ),
        )
        spec = scale.spec
        return int(spec.replicas or 0) if spec is not None else 0

    async def scale(self, pool: PoolName, target: int, drain: list[WorkerLoad]) -> None:
        name = self._deployment(pool)
        if target < 0:
            raise ConnectorError(f"kubernetes: cannot scale {name} to {target} replicas")
        body = {"spec": {"replicas": target}}
        await self._call(
            "patch",
            name,
            lambda: self._apps.patch_namespaced_deployment_scale(
                name,
                self.namespace,
                body,
                _content_type=PATCH_TYPE,
                _request_timeout=REQUEST_TIMEOUT_S,
            ),
        )

    async def stop(self) -> None:
        """The fleet stays as it is; only the client's connections close."""
        if self._api_client is not None:
            api_client, self._api_client, self._apps = self._api_client, None, None
            await asyncio.to_thread(api_client.close)

    def _deployment(self, pool: PoolName) -> str:
        name = self.deployments.get(pool)
        if name is None:
            raise ConnectorError(
                f"kubernetes: no Deployment for the {pool} pool: give --deployment {pool}=NAME"
            )
        if self._apps is None:
            raise ConnectorError("kubernetes: the connector is not started")
        return name

    async def _call(self, verb: str, name: str, request: Callable[[], T]) -> T:
        """`request` in a thread; whatever goes wrong, a ConnectorError that says what to do."""
        import urllib3
        from kubernetes.client import ApiException

        try:
            return await asyncio.to_thread(request)
        except ApiException as e:
            raise ConnectorError(self._refused(verb, name, e)) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            why = getattr(e, "reason", None) or e  # urllib3's MaxRetryError: the last attempt's
            raise ConnectorError(
                f"kubernetes: cannot reach the API server at {self.host} to {verb} "
                f"deployments/scale {name}: {why}"
            ) from e

    def _refused(self, verb: str, name: str, e: Any) -> str:
        what = f"deployments/scale {name} in namespace {self.namespace}"
        status, reason = e.status, e.reason
        if status == 403:
            return f"kubernetes: cannot {verb} {what} (403 Forbidden): {PERMISSION_HINT}"
        if status == 404:
            return (
                f"kubernetes: no Deployment {name} in namespace {self.namespace} (404 Not Found): "
                "check --deployment and --namespace"
            )
        if status == 401:
            return (
                f"kubernetes: cannot {verb} {what} (401 Unauthorized): the API server at "
                f"{self.host} refused the credentials (kubeconfig or service account token)"
            )
        if not status:  # the client's own failure before an answer (TLS)
            return f"kubernetes: cannot {verb} {what} at {self.host}: {reason}"
        return f"kubernetes: cannot {verb} {what} ({status} {reason}): {_status_message(e.body)}"


def _status_message(body: str | None) -> str:
    """The message of the API server's Status object, else its raw answer."""
    try:
        message = json.loads(body or "").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else (body or "no details").strip()[:300]
