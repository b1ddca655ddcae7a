"""deploy/kubernetes, read without a cluster: each variant's kustomization
resolved as `kubectl apply -k` would (checked against `kubectl kustomize`
where kubectl is installed), every object validated against the Kubernetes
API schema (strict: an unknown field fails), rotor's commands parsed by
rotor's own argument parser, and the wiring between objects checked — probes
and Services against the ports the commands open, --nats against the NATS
Service, the grace periods against the drain, and the planner's RBAC against
exactly the Deployments it scales. The checks are functions returning their
problems, so each is also shown to catch a mutated copy."""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import posixpath
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from rotor.cli import build_parser, split_passthrough
from rotor.engines.registry import engine_spec

from support.environ import rotor_env

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
VARIANTS = ("agg", "disagg")
# the oldest Kubernetes these manifests claim (the preStop sleep action is on by default since 1.30)
K8S_VERSION = "1.33"
LOOPBACK = ("127.0.0.1", "localhost", "::1")

Obj = dict[str, Any]

# --- a kustomize of our own: only what these kustomizations use -------------------------------

# kinds kustomize's `namespace:` sets a namespace on, and those it leaves alone
NAMESPACED = {
    "ConfigMap",
    "Deployment",
    "PersistentVolumeClaim",
    "Role",
    "RoleBinding",
    "Secret",
    "Service",
    "ServiceAccount",
    "StatefulSet",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume"}
# anything else in a kustomization (patches, images, labels, ...) would change the objects,
# and the tests would then check something other than what is applied
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "resources"}


class ResolveError(Exception):
    pass


@dataclass
class Variant:
    objects: list[Obj]
    files: set[Path] = field(default_factory=set)  # every file read
    namespace: str = ""


def resolve(directory: Path) -> Variant:
    """The objects `kubectl apply -k DIRECTORY` applies, and the files read for them."""
    file = directory / "kustomization.yaml"
    if not file.is_file():
        raise ResolveError(f"{directory}: no kustomization.yaml")
    spec = yaml.safe_load(file.read_text()) or {}
    unknown = set(spec) - KUSTOMIZATION_KEYS
    if unknown:
        raise ResolveError(f"{file}: this resolver does not model {sorted(unknown)}")
    out = Variant([], {file})
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            inner = resolve(path)
            out.objects += inner.objects
            out.files |= inner.files
        elif path.is_file():
            out.files.add(path)
            out.objects += [o for o in yaml.safe_load_all(path.read_text()) if o]
        else:
            raise ResolveError(f"{file}: {entry} is neither a file nor a directory")
    namespace = spec.get("namespace")
    if namespace:
        set_namespace(out.objects, namespace)
        out.namespace = namespace
    return out


def set_namespace(objects: list[Obj], namespace: str) -> None:
    """kustomize's namespace transformer, as far as these kinds go."""
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    for obj in objects:
        kind = obj["kind"]
        if kind in NAMESPACED:
            obj["metadata"]["namespace"] = namespace
        elif kind == "Namespace":
            obj["metadata"]["name"] = namespace  # kustomize renames it
        elif kind not in CLUSTER_SCOPED:
            raise ResolveError(f"{kind}: say whether it is namespaced")
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            # a subject naming one of these ServiceAccounts follows it into the namespace
            for subject in obj.get("subjects", []):
                if subject.get("kind") == "ServiceAccount" and subject["name"] in accounts:
                    subject["namespace"] = namespace


def variant(name: str) -> Variant:
    return resolve(KUBE / name)


def key(obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def of_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_every_file_is_applied_by_some_variant() -> None:
    reached = set().union(*(variant(v).files for v in VARIANTS))
    present = {p.resolve() for p in KUBE.rglob("*") if p.is_file()}
    assert present - reached == set(), "files no kustomization applies"
    assert {p.parent.name for p in present} == {"base", *VARIANTS}


def test_the_resolver_models_kustomize(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("namespace: elsewhere\nresources: [things.yaml]\n")
    things = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "rb"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "other"}],
        },
    ]
    (tmp_path / "things.yaml").write_text(yaml.safe_dump_all(things))
    got = {o["kind"]: o for o in resolve(tmp_path).objects}
    assert got["Namespace"]["metadata"] == {"name": "elsewhere"}
    assert got["ServiceAccount"]["metadata"]["namespace"] == "elsewhere"
    assert got["RoleBinding"]["subjects"][0]["namespace"] == "elsewhere"
    # what it does not model, it refuses
    (tmp_path / "kustomization.yaml").write_text("resources: [things.yaml]\npatches: []\n")
    with pytest.raises(ResolveError, match="patches"):
        resolve(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("namespace: n\nresources: [missing.yaml]\n")
    with pytest.raises(ResolveError, match="missing.yaml"):
        resolve(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("namespace: n\nresources: [things.yaml]\n")
    (tmp_path / "things.yaml").write_text("apiVersion: v1\nkind: Gizmo\nmetadata: {name: g}\n")
    with pytest.raises(ResolveError, match="Gizmo"):
        resolve(tmp_path)


# kubectl is not one of rotor's dependencies and Debian's (1.20) kustomize is too old for
# these files: where none is installed, this cross-check of the resolver is all that is left
# out; the schema, RBAC, probe and grace checks below run on the resolver's output regardless.
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("name", VARIANTS)
def test_the_resolver_agrees_with_kubectl_kustomize(name: str) -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(KUBE / name)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    theirs = sorted((o for o in yaml.safe_load_all(built) if o), key=key)
    ours = sorted(variant(name).objects, key=key)
    assert [key(o) for o in ours] == [key(o) for o in theirs]
    assert ours == theirs


# --- the API schema ------------------------------------------------------------------------------


def schema_problems(obj: Obj) -> list[str]:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return [f"{obj['kind']}/{obj['metadata'].get('name')}: {path}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [e.message]
    return []


DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@pytest.mark.parametrize("name", VARIANTS)
def test_every_object_validates_against_the_api_schema(name: str) -> None:
    objects = variant(name).objects
    problems = [p for obj in objects for p in schema_problems(obj)]
    assert not problems, "\n".join(problems)
    keys = [key(o) for o in objects]
    assert len(keys) == len(set(keys)), "an object defined twice"
    for kind, _, obj_name in keys:
        assert DNS_LABEL.fullmatch(obj_name), f"{kind}/{obj_name}"


def test_the_schema_check_catches_mistakes() -> None:
    frontend = of_kind(variant("agg").objects, "Deployment")["rotor-frontend"]
    assert not schema_problems(frontend)

    def broken(change: Any) -> Obj:
        obj = copy.deepcopy(frontend)
        change(obj)
        return obj

    def container(obj: Obj) -> Obj:
        return obj["spec"]["template"]["spec"]["containers"][0]

    mistakes = [
        lambda o: container(o).update(livenessprobe=container(o)["livenessProbe"]),  # a typo
        lambda o: o["spec"].update(replicas="1"),  # a string where an integer goes
        lambda o: container(o).pop("name"),  # required
        lambda o: container(o)["readinessProbe"]["httpGet"].update(port=[8000]),
        lambda o: o.update(status={"phase": "Running", "color": "blue"}),
    ]
    for mistake in mistakes:
        assert schema_problems(broken(mistake)), mistake
    unknown_kind = {"apiVersion": "v1", "kind": "Gizmo", "metadata": {"name": "g"}}
    assert schema_problems(unknown_kind)


# --- the image ---------------------------------------------------------------------------------------


@dataclass
class Image:
    env: dict[str, str]
    entrypoint: list[str] | None
    runs: list[str]
    user_uid: int | None


def dockerfile_image(target: str | None) -> Image:
    """What `docker build --target TARGET` (the last stage by default) is configured with."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[tuple[str, str, list[tuple[str, str]]]] = []  # (name, base, instructions)
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM":
            parts = rest.split()
            stages.append((parts[2] if len(parts) == 3 else "", parts[0], []))
        else:
            stages[-1][2].append((word.upper(), rest.strip()))
    by_name = {s[0]: s for s in stages if s[0]}
    chain = [by_name[target] if target else stages[-1]]
    while chain[-1][1] in by_name:
        chain.append(by_name[chain[-1][1]])
    img = Image({}, None, [], None)
    for _, _, instructions in reversed(chain):
        for word, rest in instructions:
            if word == "ENV":
                img.env.update(w.partition("=")[::2] for w in shlex.split(rest))
            elif word == "ENTRYPOINT":
                img.entrypoint = json.loads(rest)
            elif word == "RUN":
                img.runs.append(rest)
                uid = re.search(r"useradd .*--uid (\d+)", rest)
                img.user_uid = int(uid[1]) if uid else img.user_uid
    return img


# deploy/Dockerfile's tags: `-t rotor` (its last stage) and `--target vllm -t rotor:vllm`
ROTOR_TAGS = {"latest": None, "vllm": "vllm"}


def rotor_target(image: str) -> str | None:
    name, _, tag = image.partition(":")
    assert name == "rotor" and (tag or "latest") in ROTOR_TAGS, image
    return ROTOR_TAGS[tag or "latest"]


# --- the workloads and rotor's commands --------------------------------------------------------


@dataclass
class Container:
    workload: Obj
    pod: Obj  # the pod spec
    spec: Obj  # the container
    args: argparse.Namespace | None  # rotor's parsed command line; None: not rotor's image

    @property
    def name(self) -> str:
        return self.workload["metadata"]["name"]

    def listens(self) -> int | None:
        """The port rotor's HTTP answers on: the API's --port, or the --system-port."""
        if self.args is None:
            return None
        return self.args.port if self.args.command == "frontend" else self.args.system_port

    def port_number(self, port: int | str) -> int:
        if isinstance(port, int):
            return port
        named = {p["name"]: p["containerPort"] for p in self.spec.get("ports", [])}
        assert port in named, f"{self.name}: no container port named {port!r}"
        return named[port]


def workloads(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]


def parse_rotor(spec: Obj) -> argparse.Namespace:
    """A rotor container's command line as rotor reads it: the image's entrypoint
    (`rotor`) and the container's args, with the image's and the container's variables."""
    image = dockerfile_image(rotor_target(spec["image"]))
    assert image.entrypoint == ["rotor"]
    assert "command" not in spec, f"{spec['name']}: `command` would replace the entrypoint"
    words = [str(w) for w in spec["args"]]
    env = {**image.env, **{e["name"]: e["value"] for e in spec.get("env", []) if "value" in e}}
    own, passthrough = split_passthrough(words)
    err = io.StringIO()
    with (
        rotor_env({k: v for k, v in env.items() if k.startswith("ROTOR_")}),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        try:
            args = build_parser().parse_args(own)
        except SystemExit as e:
            pytest.fail(f"rotor {shlex.join(words)}: exit {e.code}: {err.getvalue().strip()}")
    if args.command == "worker":
        outs = [w.partition("=")[2] for w in args.io if w.startswith("out=")]
        assert len(outs) == len(args.io) == 1, args.io
        assert engine_spec(outs[0]).passthrough or not passthrough
    else:
        assert not passthrough, words
    return args


def containers(objects: list[Obj]) -> list[Container]:
    found = []
    for workload in workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        for spec in pod["containers"]:
            ours = spec["image"].partition(":")[0] == "rotor"
            found.append(Container(workload, pod, spec, parse_rotor(spec) if ours else None))
    return found


def rotor_containers(objects: list[Obj], command: str) -> list[Container]:
    return [c for c in containers(objects) if c.args and c.args.command == command]


def planner(objects: list[Obj]) -> Container:
    (found,) = rotor_containers(objects, "planner")
    return found


@pytest.mark.parametrize("name", VARIANTS)
def test_every_rotor_command_parses_with_rotor_s_cli(name: str) -> None:
    found = containers(variant(name).objects)
    commands = sorted(c.args.command for c in found if c.args)
    pools = {"agg": ["worker"], "disagg": ["worker", "worker"]}[name]
    assert commands == sorted(["frontend", "planner", *pools])
    (nats,) = [c for c in found if c.args is None]
    assert nats.spec["image"].startswith("nats:2.")
    for c in found:
        if c.args and c.args.command == "worker":
            assert c.args.io == ["out=vllm"] and rotor_target(c.spec["image"]) == "vllm"
            assert c.args.model_path and c.args.model_path.startswith("/models/")


def served_model(worker: argparse.Namespace) -> str:
    return worker.model_name or posixpath.basename(worker.model_path.rstrip("/"))


def test_the_planner_s_image_has_the_kubernetes_client() -> None:
    """--connector kubernetes needs rotor's `kubernetes` extra (the official client)."""
    for name in VARIANTS:
        image = dockerfile_image(rotor_target(planner(variant(name).objects).spec["image"]))
        assert any(re.search(r"pip install .*\.\[[\w,]*kubernetes", r) for r in image.runs), (
            f"{name}: the planner's image installs no rotor[kubernetes]: {image.runs}"
        )


# --- ports, probes and Services ---------------------------------------------------------------------


def probe_problems(c: Container) -> list[str]:
    """Probes and scrape annotations against the port rotor really listens on."""
    port = c.listens()
    if port is None:
        return []
    problems = []
    host = c.args.host if c.args.command == "frontend" else c.args.system_host
    if host in LOOPBACK:
        problems.append(f"{c.name}: binds {host}: nothing outside the pod reaches it")
    if port not in [p["containerPort"] for p in c.spec.get("ports", [])]:
        problems.append(f"{c.name}: listens on {port}, which it does not declare")
    wanted = {"livenessProbe": "/live", "startupProbe": "/live", "readinessProbe": "/health"}
    if c.args.command == "planner":
        del wanted["readinessProbe"]  # nothing sends the planner traffic
    for kind, path in wanted.items():
        probe = c.spec.get(kind, {}).get("httpGet")
        if probe is None:
            problems.append(f"{c.name}: no {kind}")
        elif (c.port_number(probe["port"]), probe["path"]) != (port, path):
            problems.append(f"{c.name}: {kind} asks {probe['port']}{probe['path']}, not {port}")
    notes = c.workload["spec"]["template"]["metadata"].get("annotations", {})
    if notes.get("prometheus.io/scrape") == "true" and notes.get("prometheus.io/port") != str(port):
        problems.append(f"{c.name}: Prometheus is told port {notes.get('prometheus.io/port')}")
    return problems


def nats_args(c: Container) -> dict[str, str]:
    words = c.spec.get("command", []) + c.spec["args"]
    assert words[0] == "nats-server", words
    flags = {w: v for w, v in zip(words, words[1:], strict=False) if w.startswith("-")}
    return flags | {w: "" for w in words if w in ("-js", "--jetstream")}


@pytest.mark.parametrize("name", VARIANTS)
def test_probes_ask_the_ports_rotor_listens_on(name: str) -> None:
    found = containers(variant(name).objects)
    problems = [p for c in found for p in probe_problems(c)]
    assert not problems, "\n".join(problems)
    (nats,) = [c for c in found if c.args is None]
    flags = nats_args(nats)
    assert "-js" in flags, "JetStream: rotor keeps cards and leases in it"
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = nats.spec[kind]["httpGet"]
        assert nats.port_number(probe["port"]) == int(flags["-m"])
        assert probe["path"].startswith("/healthz")


def test_the_probe_check_catches_mistakes() -> None:
    (worker,) = rotor_containers(variant("agg").objects, "worker")
    assert not probe_problems(worker)
    moved = copy.deepcopy(worker)
    moved.spec["readinessProbe"]["httpGet"]["port"] = 8000
    assert probe_problems(moved)
    swapped = copy.deepcopy(worker)
    swapped.spec["livenessProbe"]["httpGet"]["path"] = "/health"
    assert probe_problems(swapped)
    other = copy.deepcopy(worker)
    other.args = argparse.Namespace(**{**vars(worker.args), "system_port": 9999})
    assert probe_problems(other)


def selects(selector: dict[str, str], workload: Obj) -> bool:
    labels = workload["spec"]["template"]["metadata"].get("labels", {})
    return bool(selector) and selector.items() <= labels.items()


@pytest.mark.parametrize("name", VARIANTS)
def test_each_workload_owns_its_pods(name: str) -> None:
    found = workloads(variant(name).objects)
    for w in found:
        selector = w["spec"]["selector"]["matchLabels"]
        assert selects(selector, w), f"{w['metadata']['name']}: selects none of its own pods"
        others = [o["metadata"]["name"] for o in found if o is not w and selects(selector, o)]
        assert not others, f"{w['metadata']['name']} also selects the pods of {others}"


def service_targets(objects: list[Obj]) -> dict[tuple[str, int], int]:
    """(Service, port) → the container port it reaches, every Service selecting one workload."""
    out = {}
    found = containers(objects)
    for svc in of_kind(objects, "Service").values():
        selector = svc["spec"]["selector"]
        (target,) = [w for w in workloads(objects) if selects(selector, w)]
        (c,) = [c for c in found if c.workload is target]
        for port in svc["spec"]["ports"]:
            number = c.port_number(port.get("targetPort", port["port"]))
            out[(svc["metadata"]["name"], port["port"])] = number
    return out


@pytest.mark.parametrize("name", VARIANTS)
def test_services_reach_what_listens(name: str) -> None:
    objects = variant(name).objects
    targets = service_targets(objects)
    (frontend,) = rotor_containers(objects, "frontend")
    assert targets[("rotor-frontend", frontend.args.port)] == frontend.args.port
    (nats,) = [c for c in containers(objects) if c.args is None]
    client = int(nats_args(nats)["-p"])
    governing = of_kind(objects, "Service")[nats.workload["spec"]["serviceName"]]
    assert governing["spec"]["clusterIP"] == "None", "a StatefulSet's Service is headless"
    for c in containers(objects):
        if c.args is None:
            continue
        url = re.fullmatch(r"nats://([a-z0-9-]+):(\d+)", c.args.nats)
        assert url, f"{c.name}: --nats {c.args.nats}"
        assert targets.get((url[1], int(url[2]))) == client, f"{c.name}: --nats {c.args.nats}"


@pytest.mark.parametrize("name", VARIANTS)
def test_the_nats_store_is_on_its_volume(name: str) -> None:
    (nats,) = [c for c in containers(variant(name).objects) if c.args is None]
    store = nats_args(nats)["-sd"]
    claims = {t["metadata"]["name"] for t in nats.workload["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in nats.spec["volumeMounts"]}
    assert mounts.get(store) in claims, f"-sd {store} is not on a claim"


# --- stopping ------------------------------------------------------------------------------------------


def grace_problems(c: Container) -> list[str]:
    """The kubelet's SIGKILL comes terminationGracePeriodSeconds (default 30) after
    the preStop hook begins: it must outlast the drain rotor is told to allow."""
    if c.args is None or c.args.command == "planner":
        return []
    total = c.pod.get("terminationGracePeriodSeconds", 30)
    pre_stop = c.spec.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    # a worker's running requests; a frontend's streams, then uvicorn's own 5 s (serve/http.py)
    worker = c.args.command == "worker"
    drain = c.args.grace_period if worker else c.args.shutdown_grace + 5
    need = pre_stop + drain
    if not need <= total <= need + 30:
        return [f"{c.name}: {total} s to stop, for {pre_stop} s + {drain} s of drain"]
    return []


@pytest.mark.parametrize("name", VARIANTS)
def test_stopping_gives_rotor_its_grace(name: str) -> None:
    found = containers(variant(name).objects)
    problems = [p for c in found for p in grace_problems(c)]
    assert not problems, "\n".join(problems)
    (frontend,) = [c for c in found if c.args and c.args.command == "frontend"]
    assert frontend.spec["lifecycle"]["preStop"]["sleep"]["seconds"] > 0


def test_the_grace_check_catches_mistakes() -> None:
    (worker,) = rotor_containers(variant("agg").objects, "worker")
    short = copy.deepcopy(worker)
    short.pod["terminationGracePeriodSeconds"] = int(worker.args.grace_period) - 1
    assert grace_problems(short)
    absurd = copy.deepcopy(worker)
    absurd.pod["terminationGracePeriodSeconds"] = int(worker.args.grace_period) + 31
    assert grace_problems(absurd)
    unset = copy.deepcopy(worker)
    unset.pod.pop("terminationGracePeriodSeconds")
    unset.args.grace_period = 45.0
    assert grace_problems(unset)


# --- workers: GPU and model ------------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_each_worker_gets_a_gpu_and_the_model_read_only(name: str) -> None:
    objects = variant(name).objects
    claims = of_kind(objects, "PersistentVolumeClaim")
    for c in rotor_containers(objects, "worker"):
        resources = c.spec["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 1
        volumes = {v["name"]: v for v in c.pod["volumes"]}
        mount = next(
            m for m in c.spec["volumeMounts"] if c.args.model_path.startswith(m["mountPath"] + "/")
        )
        assert mount.get("readOnly") is True, f"{c.name}: the model is mounted writable"
        claim = volumes[mount["name"]]["persistentVolumeClaim"]
        assert claim["claimName"] in claims and claim.get("readOnly") is True
        modes = claims[claim["claimName"]]["spec"]["accessModes"]
        assert {"ReadWriteMany", "ReadOnlyMany"} & set(modes), "pods on many nodes mount it"


# --- the planner and its RBAC ------------------------------------------------------------------------

POOLS = {"agg": {"agg"}, "disagg": {"prefill", "decode"}}


def rbac_problems(objects: list[Obj], namespace: str) -> list[str]:
    """The planner may get and patch the scale of exactly the Deployments its
    --deployment flags name, which exist with the right --disaggregation-mode,
    and nothing else; it runs as the ServiceAccount that the binding binds."""
    problems: list[str] = []
    p = planner(objects)
    targets = dict(d.split("=", 1) for d in p.args.deployment)
    if set(targets) != POOLS[p.args.mode]:
        problems.append(f"--mode {p.args.mode} with --deployment for {sorted(targets)}")
    if p.args.namespace != namespace:
        problems.append(f"--namespace {p.args.namespace}, but the objects are in {namespace}")
    deployments = of_kind(objects, "Deployment")
    workers = {c.name: c for c in rotor_containers(objects, "worker")}
    for pool, deployment in targets.items():
        if deployment not in deployments or deployment not in workers:
            problems.append(f"--deployment {pool}={deployment}: no such worker Deployment")
            continue
        mode = workers[deployment].args.disaggregation_mode
        if mode != pool:
            problems.append(f"{deployment}: --disaggregation-mode {mode}, for pool {pool}")
        if "replicas" in deployments[deployment]["spec"]:
            problems.append(f"{deployment}: spec.replicas would undo the planner on every apply")
    account = p.pod.get("serviceAccountName")
    if account not in of_kind(objects, "ServiceAccount"):
        problems.append(f"the planner runs as {account!r}, which is not here")
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        if of_kind(objects, kind):
            problems.append(f"a {kind}: the planner needs nothing cluster-wide")
    roles = of_kind(objects, "Role")
    granted: list[Obj] = []
    for binding in of_kind(objects, "RoleBinding").values():
        subjects = binding.get("subjects", [])
        mine = [
            s
            for s in subjects
            if s["kind"] == "ServiceAccount"
            and s["name"] == account
            and s.get("namespace", namespace) == namespace
        ]
        if not mine:
            continue
        if len(subjects) != len(mine):
            problems.append(f"{binding['metadata']['name']} binds others too: {subjects}")
        ref = binding["roleRef"]
        if ref["kind"] != "Role" or ref["name"] not in roles:
            problems.append(f"{binding['metadata']['name']} binds {ref['kind']}/{ref['name']}")
            continue
        granted += roles[ref["name"]]["rules"]
    wanted = {
        "apiGroups": ["apps"],
        "resources": ["deployments/scale"],
        "verbs": ["get", "patch"],
        "resourceNames": sorted(targets.values()),
    }
    got = [{k: sorted(v) for k, v in rule.items()} for rule in granted]
    if got != [wanted]:
        problems.append(f"the planner is granted {got}, not only {wanted}")
    if p.workload["spec"].get("replicas") != 1:
        problems.append("more than one planner")
    if p.workload["spec"].get("strategy", {}).get("type") != "Recreate":
        problems.append("a rolling update runs two planners at once")
    return problems


@pytest.mark.parametrize("name", VARIANTS)
def test_the_planner_may_scale_its_workers_and_nothing_else(name: str) -> None:
    v = variant(name)
    problems = rbac_problems(v.objects, v.namespace)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", VARIANTS)
def test_the_planner_sizes_what_the_workers_serve(name: str) -> None:
    objects = variant(name).objects
    p = planner(objects).args
    assert p.connector == "kubernetes" and p.mode == name
    for worker in rotor_containers(objects, "worker"):
        assert served_model(worker.args) == p.model, f"{worker.name} serves another model"
        # a new Deployment starts with 1 pod (no spec.replicas): within the planner's bounds
        assert p.min_workers <= 1 <= p.max_workers


def test_the_rbac_check_catches_mistakes() -> None:
    v = variant("disagg")
    assert not rbac_problems(v.objects, v.namespace)

    def role(objects: list[Obj]) -> Obj:
        return of_kind(objects, "Role")["rotor-planner"]["rules"][0]

    def binding(objects: list[Obj]) -> Obj:
        return of_kind(objects, "RoleBinding")["rotor-planner"]

    def deployment(objects: list[Obj], name: str) -> Obj:
        return of_kind(objects, "Deployment")[name]

    def pod(objects: list[Obj], name: str) -> Obj:
        return deployment(objects, name)["spec"]["template"]["spec"]

    def args(objects: list[Obj]) -> list[str]:
        return pod(objects, "rotor-planner")["containers"][0]["args"]

    def prefill_args(objects: list[Obj]) -> list[str]:
        return pod(objects, "rotor-prefill")["containers"][0]["args"]

    mistakes = {
        "a verb too many": lambda o: role(o)["verbs"].append("list"),
        "another Deployment": lambda o: role(o)["resourceNames"].append("rotor-frontend"),
        "every Deployment": lambda o: role(o).pop("resourceNames"),
        "the Deployment itself": lambda o: role(o).update(resources=["deployments"]),
        "pods too": lambda o: of_kind(o, "Role")["rotor-planner"]["rules"].append(
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}
        ),
        "a pool left out": lambda o: role(o)["resourceNames"].remove("rotor-decode"),
        "another account bound": lambda o: binding(o)["subjects"][0].update(name="default"),
        "another namespace's account": lambda o: binding(o)["subjects"][0].update(namespace="x"),
        "a cluster role": lambda o: binding(o)["roleRef"].update(kind="ClusterRole"),
        "the planner as default": lambda o: pod(o, "rotor-planner").pop("serviceAccountName"),
        "a pool of the wrong mode": lambda o: prefill_args(o).__setitem__(
            prefill_args(o).index("prefill"), "decode"
        ),
        "a Deployment that is not here": lambda o: args(o).__setitem__(
            args(o).index("decode=rotor-decode"), "decode=rotor-decoder"
        ),
        "replicas in the manifest": lambda o: deployment(o, "rotor-decode")["spec"].update(
            replicas=2
        ),
        "two planners": lambda o: deployment(o, "rotor-planner")["spec"].update(replicas=2),
        "another namespace": lambda o: args(o).__setitem__(args(o).index("rotor"), "default"),
    }
    for what, mistake in mistakes.items():
        objects = copy.deepcopy(v.objects)
        mistake(objects)
        assert rbac_problems(objects, v.namespace), what


# --- pod security ----------------------------------------------------------------------------------

ALLOWED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def pod_problems(c: Container) -> list[str]:
    """The restricted Pod Security Standard's rules that these pods could break,
    and only the planner with an API token."""
    problems = []
    pod, spec = c.pod, c.spec
    pod_sc, sc = pod.get("securityContext", {}), spec.get("securityContext", {})
    for setting in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(setting):
            problems.append(f"{c.name}: {setting}")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            problems.append(f"{c.name}: a {kinds} volume")
    if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
        problems.append(f"{c.name}: may run as root")
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    if c.args is not None and uid != dockerfile_image(rotor_target(spec["image"])).user_uid:
        problems.append(f"{c.name}: runs as {uid}, not the image's user (a name cannot be checked)")
    seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        problems.append(f"{c.name}: seccomp {seccomp}")
    if sc.get("allowPrivilegeEscalation") is not False or sc.get("privileged"):
        problems.append(f"{c.name}: may escalate privileges")
    if sc.get("capabilities", {}).get("drop") != ["ALL"] or sc["capabilities"].get("add"):
        problems.append(f"{c.name}: keeps capabilities")
    if spec.get("ports") and any("hostPort" in p for p in spec["ports"]):
        problems.append(f"{c.name}: a hostPort")
    token = pod.get("automountServiceAccountToken", True)
    if token != (c.args is not None and c.args.command == "planner"):
        problems.append(f"{c.name}: automountServiceAccountToken {token}")
    return problems


@pytest.mark.parametrize("name", VARIANTS)
def test_every_pod_meets_the_restricted_standard(name: str) -> None:
    v = variant(name)
    (namespace,) = of_kind(v.objects, "Namespace").values()
    assert namespace["metadata"]["name"] == v.namespace
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    problems = [p for c in containers(v.objects) for p in pod_problems(c)]
    assert not problems, "\n".join(problems)


def test_the_pod_check_catches_mistakes() -> None:
    found = containers(variant("agg").objects)
    (worker,) = [c for c in found if c.args and c.args.command == "worker"]
    mistakes = [
        lambda c: c.pod["volumes"].append({"name": "m", "hostPath": {"path": "/models"}}),
        lambda c: c.pod["securityContext"].pop("runAsUser"),
        lambda c: c.pod["securityContext"].pop("seccompProfile"),
        lambda c: c.spec["securityContext"].update(allowPrivilegeEscalation=True),
        lambda c: c.spec["securityContext"]["capabilities"].update(add=["NET_ADMIN"]),
        lambda c: c.pod.pop("automountServiceAccountToken"),
        lambda c: c.pod.update(hostNetwork=True),
    ]
    for mistake in mistakes:
        broken = copy.deepcopy(worker)
        mistake(broken)
        assert pod_problems(broken), mistake
