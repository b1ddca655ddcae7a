"""The kubernetes connector, with the official client, against a fake API
server (support/fake_kube.py): the requests it sends to the scale subresource,
and the errors an operator reads when the cluster says no."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rotor.planner.connectors import ConnectorError
from rotor.planner.connectors.kubernetes import KubernetesConnector, parse_deployments

from support.fake_kube import FakeKube, fake_kube
from support.server import free_port

NS = "rotor"
SCALE = "/apis/apps/v1/namespaces/rotor/deployments/{}/scale"


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with fake_kube({(NS, "rotor-decode"): 2, (NS, "rotor-prefill"): 0}) as server:
        yield server


@pytest.fixture
def kubeconfig(kube: FakeKube, tmp_path: Path) -> str:
    return str(kube.write_kubeconfig(tmp_path / "kubeconfig", token="dummy-token"))


async def started(kubeconfig: str, **deployments: str) -> KubernetesConnector:
    mapping = deployments or {"decode": "rotor-decode", "prefill": "rotor-prefill"}
    connector = KubernetesConnector(NS, mapping, kubeconfig=kubeconfig)  # type: ignore[arg-type]
    await connector.start()
    return connector


async def test_scale_sends_one_merge_patch_of_spec_replicas(
    kube: FakeKube, kubeconfig: str
) -> None:
    connector = await started(kubeconfig)
    try:
        await connector.scale("decode", 5, [])
    finally:
        await connector.stop()
    [patch] = kube.patches
    assert patch.path == SCALE.format("rotor-decode")
    assert patch.body == {"spec": {"replicas": 5}}
    assert patch.content_type is not None
    assert patch.content_type.split(";")[0] == "application/merge-patch+json"
    assert patch.authorization == "Bearer dummy-token"  # the kubeconfig's user
    assert kube.replicas(NS, "rotor-decode") == 5
    assert kube.replicas(NS, "rotor-prefill") == 0  # the other pool untouched


async def test_replicas_reads_spec_replicas(kube: FakeKube, kubeconfig: str) -> None:
    connector = await started(kubeconfig)
    try:
        assert await connector.replicas("decode") == 2
        assert await connector.replicas("prefill") == 0  # the API omits a 0
        await connector.scale("prefill", 3, [])
        assert await connector.replicas("prefill") == 3
    finally:
        await connector.stop()
    gets = [r for r in kube.requests if r.method == "GET"]
    assert [r.path for r in gets] == [
        SCALE.format("rotor-decode"),
        SCALE.format("rotor-prefill"),
        SCALE.format("rotor-prefill"),
    ]


async def test_a_missing_deployment_names_it_and_the_namespace(
    kube: FakeKube, kubeconfig: str
) -> None:
    connector = await started(kubeconfig, decode="rotor-gone")
    try:
        for attempt in (
            lambda: connector.replicas("decode"),
            lambda: connector.scale("decode", 1, []),
        ):
            with pytest.raises(ConnectorError) as caught:
                await attempt()
            message = str(caught.value)
            assert "rotor-gone" in message and "namespace rotor" in message
            assert "404" in message
    finally:
        await connector.stop()


async def test_forbidden_says_which_permission_is_missing(kube: FakeKube, kubeconfig: str) -> None:
    kube.forbid(NS, "rotor-decode")
    connector = await started(kubeconfig)
    try:
        with pytest.raises(ConnectorError) as caught:
            await connector.scale("decode", 4, [])
        assert str(caught.value) == (
            "kubernetes: cannot patch deployments/scale rotor-decode in namespace rotor "
            "(403 Forbidden): the planner's service account needs get and patch on "
            "deployments/scale"
        )
        with pytest.raises(ConnectorError, match=r"cannot get deployments/scale rotor-decode"):
            await connector.replicas("decode")
    finally:
        await connector.stop()
    assert kube.replicas(NS, "rotor-decode") == 2


async def test_a_pool_without_a_deployment_names_the_flag(kube: FakeKube, kubeconfig: str) -> None:
    connector = await started(kubeconfig, decode="rotor-decode")
    try:
        with pytest.raises(ConnectorError, match=r"--deployment prefill=NAME"):
            await connector.scale("prefill", 1, [])
        with pytest.raises(ConnectorError, match=r"--deployment agg=NAME"):
            await connector.replicas("agg")
    finally:
        await connector.stop()
    assert kube.requests == []


async def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "kubeconfig"
    connector = KubernetesConnector(NS, {"agg": "rotor"}, kubeconfig=str(path))
    with pytest.raises(ConnectorError, match=f"no kubeconfig at {path}"):
        await connector.start()


async def test_without_a_path_kubeconfig_env_is_used(
    kube: FakeKube, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    connector = KubernetesConnector(NS, {"decode": "rotor-decode"})
    await connector.start()
    try:
        assert connector.host == kube.url
        assert await connector.replicas("decode") == 2
    finally:
        await connector.stop()


async def test_no_kubeconfig_and_no_cluster_says_what_to_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    connector = KubernetesConnector(NS, {"decode": "rotor-decode"})
    with pytest.raises(ConnectorError, match=r"give --kubeconfig PATH"):
        await connector.start()


@pytest.fixture
def in_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A pod's environment: the service host and port, and the service account's
    files (at paths of our own: the client reads them from its module's names)."""
    from kubernetes.config import incluster_config

    token, cert = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    cert.write_text("not a real certificate\n")  # only read when a TLS connection is made
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(cert))
    port = free_port()  # nothing listens there
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    return port


async def test_in_a_pod_the_service_account_is_used(in_cluster: int) -> None:
    connector = KubernetesConnector(NS, {"decode": "rotor-decode"})
    await connector.start()
    try:
        assert connector.host == f"https://127.0.0.1:{in_cluster}"
        # an API server that is not there: the message names its URL
        with pytest.raises(ConnectorError) as caught:
            await connector.replicas("decode")
        message = str(caught.value)
        assert f"cannot reach the API server at https://127.0.0.1:{in_cluster}" in message
        assert "refused" in message.lower()
    finally:
        await connector.stop()


async def test_an_explicit_kubeconfig_wins_over_the_pod(
    in_cluster: int, kube: FakeKube, kubeconfig: str
) -> None:
    connector = KubernetesConnector(NS, {"decode": "rotor-decode"}, kubeconfig=kubeconfig)
    await connector.start()
    try:
        assert connector.host == kube.url
        assert await connector.replicas("decode") == 2
    finally:
        await connector.stop()


async def test_in_a_pod_without_a_service_account(
    in_cluster: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import incluster_config

    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "no-token"))
    connector = KubernetesConnector(NS, {"decode": "rotor-decode"})
    with pytest.raises(ConnectorError, match=r"KUBERNETES_SERVICE_HOST is set"):
        await connector.start()


def test_parse_deployments() -> None:
    assert parse_deployments(["prefill=rotor-prefill", "decode=rotor-decode"]) == {
        "prefill": "rotor-prefill",
        "decode": "rotor-decode",
    }
    assert parse_deployments([]) == {}


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("decode", "expected POOL=NAME"),
        ("gpu=rotor", "unknown pool 'gpu'; pools are agg, prefill, decode"),
        ("decode=", "not a Deployment name"),
        ("decode=Rotor_Decode", "not a Deployment name"),
    ],
)
def test_parse_deployments_refuses(value: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_deployments([value])


def test_parse_deployments_refuses_a_pool_twice() -> None:
    with pytest.raises(ValueError, match="given twice"):
        parse_deployments(["agg=a", "agg=b"])
