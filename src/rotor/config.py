"""Typed configuration: what the `rotor` commands parse their flags into, and
what launch builds from (each flag described by a `rotor.flags.Flag`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rotor.media.limits import MediaLimits
from rotor.protocol.lease import Role
from rotor.protocol.response_store import DEFAULT_MAX_BYTES, DEFAULT_TTL_S
from rotor.router.disagg import DisaggPolicy
from rotor.router.overload import Overload
from rotor.runtime.canary import CanaryPolicy


def lora_spec(raw: str) -> tuple[str, str]:
    """`--lora NAME=DIR` as (name, directory)."""
    name, sep, path = raw.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"expected NAME=DIR, got {raw!r}")
    return name, path


@dataclass
class ModelConfig:
    """Which model is served and how the frontend treats it."""

    model_path: str | None = None  # a model directory, or a Hub id (model/hub.py)
    revision: str | None = None  # a Hub id's branch, tag or commit (None: main)
    model_name: str | None = None
    # `--served-model-name A B`: served as A (canonical) and B
    served_model_names: list[str] = field(default_factory=list)
    # `--lora NAME=DIR`: LoRA adapters loaded at start, each served as a model
    loras: list[tuple[str, str]] = field(default_factory=list)
    max_model_len: int | None = None
    chat_template: str | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    template_timeout: float = 5.0  # seconds per prompt in the prepare pool


DEFAULT_REQUEST_LOG_BYTES = 100 * 1024 * 1024  # --request-log-max-bytes


@dataclass
class ResponseStoreConfig:
    """Where stored Responses-API responses live (serve/response_store.py
    builds the store): `--response-store`, `--response-store-ttl`,
    `--response-store-max-bytes`."""

    # None: the command's default (rotor run: the SQLite file under the user's
    # state folder; rotor frontend: "nats"); "memory"; "nats", the JetStream
    # bucket (rotor frontend); anything else, a SQLite file's path
    where: str | None = None
    ttl_s: float = DEFAULT_TTL_S  # seconds a record lives after its put; 0: forever
    max_bytes: int = DEFAULT_MAX_BYTES  # the records' bytes; past it a put is refused (503)


@dataclass
class HTTPConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    # `--api-key`, repeatable: each key a tenant of its own (api/auth.py); none: no auth
    api_keys: list[str] = field(default_factory=list)
    reasoning_field: str = "reasoning_content"
    max_queued_requests: int = 1024  # admission control (rotor.api.admission)
    max_waiting_requests: int = 0  # then a line by priority (0: refused at once)
    shutdown_grace: float = 10.0  # SIGTERM: then open streams end with an error event
    http_workers: int = 1  # HTTP processes; >1: the engine is reached over a unix socket
    request_log: str | None = None  # a JSONL (.gz) file: one record per generating request
    request_log_max_bytes: int = DEFAULT_REQUEST_LOG_BYTES  # then rotated (api/request_log.py)
    request_log_hashes: bool = False  # records carry the prompt's KV block hashes
    otlp_endpoint: str | None = None  # tracing: the OTLP/HTTP collector (rotor.tracing)
    grpc_port: int | None = None  # KServe v2 gRPC beside HTTP (rotor.api.kserve); None: off
    response_store: ResponseStoreConfig = field(default_factory=ResponseStoreConfig)
    # how a request's images are fetched and decoded (the media flags)
    media: MediaLimits = field(default_factory=MediaLimits)


@dataclass
class EngineConfig:
    """An engine by registry name, with the values of its own flags."""

    name: str = "echo"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunConfig:
    """`rotor run`: one process, one model, one engine, one input."""

    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    http: HTTPConfig = field(default_factory=HTTPConfig)
    input: str = "http"  # http | text | stdin | batch
    batch_file: str | None = None
    output: str | None = None  # batch mode's output file
    max_tokens: int | None = None  # text/stdin/batch: cap each answer
    color: str = "auto"  # text/stdin: auto | always | never (inputs/style.py)
    log_level: str = "warning"
    log_format: str = "text"  # text | json (rotor.logs)


DEFAULT_NATS = "nats://127.0.0.1:4222"


@dataclass
class WorkerConfig:
    """`rotor worker`: one engine on NATS."""

    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    nats: str = DEFAULT_NATS
    system_port: int | None = None  # /live, /health and /metrics of the worker
    system_host: str = "127.0.0.1"  # the address the system port binds
    grace_period: float = 30.0  # seconds to finish running requests on SIGTERM
    role: Role = "agg"  # --disaggregation-mode (its choices are the roles)
    # --canary-after, --canary-timeout: the watch over the engine's health
    canary: CanaryPolicy = field(default_factory=CanaryPolicy)
    kv_events_delay_ms: int = 0  # a test switch: each step's KV events held back this long
    otlp_endpoint: str | None = None  # tracing: the OTLP/HTTP collector (rotor.tracing)
    log_level: str = "warning"
    log_format: str = "text"  # text | json (rotor.logs)


@dataclass
class FrontendConfig:
    """`rotor frontend`: the HTTP API over every model live workers offer."""

    http: HTTPConfig = field(default_factory=HTTPConfig)
    nats: str = DEFAULT_NATS
    router: str = "round_robin"
    migration_limit: int = 3
    router_temperature: float = 0.0
    request_timeout: float = 30.0
    kv_overlap_weight: float = 4.0
    kv_events: bool = True  # False: --no-kv-events, the router records its own decisions
    router_ttl: float = 120.0  # how long a recorded decision counts (--no-kv-events)
    # kv: what a block in host memory, or on disk, is worth against one on the device
    router_host_hit_weight: float = 0.75
    router_disk_hit_weight: float = 0.25
    # kv: seconds a routed request's blocks count as predicted on its worker (0: off)
    router_predicted_ttl: float = 5.0  # (router/kv_index.DEFAULT_PREDICTED_TTL_S)
    session_ttl: float = 300.0  # seconds a session stays pinned after its last turn (0: off)
    # disaggregated serving: where each request of a model with prefill workers is prefilled
    disagg: DisaggPolicy = field(default_factory=DisaggPolicy)
    # overload: the limits past which a worker takes no new request (off by
    # default), and the status when every worker is past them (503 or 529)
    overload: Overload = field(default_factory=Overload)
    overload_status: int = 503
    template_timeout: float = 5.0  # seconds per prompt in the prepare pool
    log_level: str = "warning"
    log_format: str = "text"  # text | json (rotor.logs)


@dataclass
class PlannerConfig:
    """`rotor planner`: one model's worker pools sized to its load."""

    model: str
    nats: str = DEFAULT_NATS
    mode: str = "agg"  # agg: one pool; disagg: prefill and decode pools
    ttft: float = 0.5  # seconds: the time-to-first-token target (p90)
    itl: float = 0.05  # seconds: the inter-token latency target (p90)
    interval: float = 10.0  # seconds between decisions
    min_workers: int = 1  # per pool
    max_workers: int = 8  # per pool
    gpus_per_worker: int = 1
    max_gpus: int | None = None  # all pools together
    scaling: str = "load"  # load (no profile) | throughput (--profile)
    profile: str | None = None
    predictor: str = "holt"
    cooldown: float = 60.0  # seconds after a scale-up before any scale-down
    down_intervals: int = 3  # intervals in a row a scale-down must be wanted
    settle_timeout: float = 180.0  # seconds for asked-for workers to register
    connector: str = "local"  # local | kubernetes | virtual
    dry_run: bool = False
    worker_cmd: str | None = None  # local: the worker command (every pool)
    prefill_cmd: str | None = None  # local, disagg: the prefill pool's, if another
    decode_cmd: str | None = None
    drain_timeout: float = 60.0  # local: seconds a SIGTERMed worker has before SIGKILL
    namespace: str = "default"  # kubernetes
    deployments: list[str] = field(default_factory=list)  # kubernetes: POOL=NAME
    kubeconfig: str | None = None
    ack_timeout: float = 60.0  # virtual: seconds for an external system's acknowledgement
    system_port: int | None = None  # /live, /health, /metrics
    system_host: str = "127.0.0.1"
    log_level: str = "info"
    log_format: str = "text"
