"""The `rotor` command. Parsing only: what runs lives in rotor.serve."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, NoReturn

from rotor import __version__
from rotor.api.admission import DEFAULT_MAX_QUEUED, DEFAULT_MAX_WAITING
from rotor.config import (
    DEFAULT_NATS,
    DEFAULT_REQUEST_LOG_BYTES,
    EngineConfig,
    FrontendConfig,
    HTTPConfig,
    ModelConfig,
    PlannerConfig,
    ResponseStoreConfig,
    RunConfig,
    WorkerConfig,
    lora_spec,
)
from rotor.engines.registry import ENGINES, engine_flags, engine_names, engine_spec
from rotor.flags import Flag
from rotor.inputs.style import COLOR_MODES
from rotor.logs import FORMATS
from rotor.media.limits import (
    MediaLimits,
    parse_allowed_domains,
    parse_allowed_local_path,
    parse_limit_per_prompt,
    parse_max_media_bytes,
)
from rotor.pipeline.preparer import DEFAULT_BUDGET_S
from rotor.planner.predict import PREDICTORS
from rotor.protocol.lease import ROLES
from rotor.protocol.response_store import DEFAULT_MAX_BYTES, DEFAULT_TTL_S
from rotor.router.disagg import (
    DEFAULT_MAX_CACHED_RATIO,
    DEFAULT_MIN_TOKENS,
    POLICIES,
    DisaggPolicy,
)
from rotor.router.kv_cost import DEFAULT_DISK_HIT_WEIGHT, DEFAULT_HOST_HIT_WEIGHT
from rotor.router.kv_index import DEFAULT_PREDICTED_TTL_S
from rotor.router.overload import Overload
from rotor.runtime.canary import DEFAULT_AFTER_S as DEFAULT_CANARY_AFTER_S
from rotor.runtime.canary import DEFAULT_TIMEOUT_S as DEFAULT_CANARY_TIMEOUT_S
from rotor.runtime.canary import CanaryPolicy

USAGE = """\
rotor run [in=INPUT] [out=ENGINE] [flags] [-- ENGINE_ARGS...]

  in=http            serve the HTTP API (default) on --host/--port
  in=text            interactive chat in the terminal
  in=stdin           read stdin as one user message, print the answer, exit
  in=batch:FILE      one request per JSONL line → FILE.out.jsonl (or --output)

  out=echo           echo the last user message back (default; alias echo_full)
  out=mocker         a simulated vLLM-like engine (--model-path or a built-in test model)
  out=vllm           vLLM (--model-path DIR); words after -- are vLLM's engine arguments

Every flag also reads an environment variable: --model-path ↔ ROTOR_MODEL_PATH,
in=/out= ↔ ROTOR_IN/ROTOR_OUT. The echo engine's pace is ROTOR_ECHO_DELAY_MS
(default 10 ms per character; 0 = as fast as possible).
"""


DEFAULT_MEDIA = MediaLimits()

HTTP_FLAGS = [
    Flag("--host", "address the HTTP API binds (rotor run: in=http)", str, "127.0.0.1"),
    Flag(
        "--port",
        "port the HTTP API binds (rotor run: in=http; 0: a free one)",
        int,
        8000,
        minimum=0,
        maximum=65535,
    ),
    Flag(
        "--grpc-port",
        "also serve the KServe v2 / Triton gRPC API on this port (0: a free one; "
        "needs rotor[grpc]); default: off",
        int,
        minimum=0,
        maximum=65535,
    ),
    Flag(
        "--api-key",
        "require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on /v1/*, /tokenize, "
        "/detokenize; repeatable: any of the keys, each a tenant of its own (stored responses)",
        action="append",
    ),
    Flag("--reasoning-field", "name of the reasoning field in responses", str, "reasoning_content"),
    # reliability: admission control and the prompt-preparation budget
    Flag(
        "--max-queued-requests",
        "requests waiting for their first token beyond which a new one waits in line "
        "(--max-waiting-requests) or gets 503",
        int,
        DEFAULT_MAX_QUEUED,
        minimum=1,
    ),
    Flag(
        "--max-waiting-requests",
        "when every --max-queued-requests place is taken, up to N more requests wait in "
        "the frontend, best priority first (0: refused at once with 503)",
        int,
        DEFAULT_MAX_WAITING,
        minimum=0,
    ),
    Flag(
        "--template-timeout",
        "seconds one prompt may spend in its chat template and tokenizer",
        float,
        DEFAULT_BUDGET_S,
    ),
    Flag("--shutdown-grace", "SIGTERM: seconds running streams may still finish", float, 10.0),
    Flag(
        "--http-workers",
        "HTTP processes sharing the port (SO_REUSEPORT; rotor run: the engine stays in one)",
        int,
        1,
        minimum=1,
        maximum=256,
    ),
    # the request log (api/request_log.py): one JSON line per generating request
    Flag(
        "--request-log",
        "in=http: a JSONL file (FILE.jsonl.gz: gzip) with one record per generating request",
    ),
    Flag(
        "--request-log-max-bytes",
        "the request log is rotated (FILE.1, FILE.2, FILE.3) before it would pass this size",
        int,
        DEFAULT_REQUEST_LOG_BYTES,
        minimum=1,
    ),
    Flag(
        "--request-log-hashes",
        "request-log records carry the prompt's KV block hashes (never its text), for replay",
        bool,
        False,
        action="store_true",
    ),
    # stored Responses-API responses (serve/response_store.py)
    Flag(
        "--response-store",
        "where stored responses (store: true) live: a SQLite file, 'memory', or 'nats' "
        "(rotor frontend: the JetStream bucket frontends share); default: rotor run, "
        "$XDG_STATE_HOME/rotor/responses.sqlite3 (~/.local/state/...); rotor frontend, nats",
    ),
    Flag(
        "--response-store-ttl",
        "seconds a stored response is kept after it was written (0: forever)",
        float,
        DEFAULT_TTL_S,
        minimum=0,
    ),
    Flag(
        "--response-store-max-bytes",
        "bytes of stored responses the store holds; past it, a request that stores one gets 503",
        int,
        DEFAULT_MAX_BYTES,
        minimum=1,
    ),
    # media parts (rotor.media): how images are fetched and decoded
    Flag(
        "--max-media-bytes",
        "the most bytes one image may have (a data: URL's payload, a fetched body, a file)",
        parse_max_media_bytes,
        DEFAULT_MEDIA.max_media_bytes,
    ),
    Flag(
        "--media-timeout",
        "seconds one image fetch may take, redirects and body included (vLLM's 5 s)",
        float,
        DEFAULT_MEDIA.total_timeout,
        minimum=0.001,
    ),
    Flag(
        "--allowed-media-domains",
        "fetch images only from these host names (comma-separated, exact); default: any host",
        parse_allowed_domains,
    ),
    Flag(
        "--allow-media-redirects",
        "follow an image URL's redirects (each hop checked like the first); default: refused",
        bool,
        False,
        action="store_true",
    ),
    Flag(
        "--allow-internal-media",
        "fetch images from loopback, private, link-local and metadata addresses too",
        bool,
        False,
        action="store_true",
    ),
    Flag(
        "--allowed-local-media-path",
        "file:// image URLs may read files under this directory (default: no file:// at all)",
        parse_allowed_local_path,
    ),
    Flag(
        "--limit-mm-per-prompt",
        'the most media parts per prompt, as JSON ({"image": 2}) or image=2,video=1',
        parse_limit_per_prompt,
    ),
]
MODEL_FLAGS = [
    Flag(
        "--model-path",
        "a Hugging Face style model directory, or a Hub id (Qwen/Qwen3-0.6B) fetched "
        "into the Hub cache (HF_HOME, HF_TOKEN, HF_HUB_OFFLINE)",
    ),
    Flag("--revision", "a Hub id's branch, tag or commit (default: main)"),
    Flag("--model-name", "served model name (default: the directory's name, or echo / mock-model)"),
    Flag(
        "--served-model-name",
        "one or more names to serve the model under; the first is the canonical name "
        "(instead of --model-name), a request may use any",
        nargs="+",
    ),
    Flag(
        "--lora",
        "a LoRA adapter (PEFT directory) loaded at start and served as model NAME; repeatable",
        lora_spec,
        action="extend",
        nargs="+",
    ),
    Flag("--tool-call-parser", "tool-call family (hermes, llama3_json, mistral, ...)"),
    Flag("--reasoning-parser", "reasoning parser (think, qwen3, deepseek_r1, mistral, ...)"),
    Flag("--chat-template", "a Jinja chat template file that replaces the model's"),
    Flag("--max-model-len", "context length (at most the model's)", int, minimum=1),
]
LOG_FLAGS = [
    Flag(
        "--log-level",
        "debug, info, warning, error",
        str.lower,
        "warning",
        choices=("debug", "info", "warning", "error"),
    ),
    Flag(
        "--log-format",
        "text for people, json for machines (one object per line)",
        str.lower,
        "text",
        choices=FORMATS,
    ),
]
# tracing (rotor/tracing): off unless a collector is named, here or by OTEL_* variables
TRACE_FLAGS = [
    Flag(
        "--otlp-endpoint",
        "trace requests: the OTLP/HTTP collector's URL (/v1/traces added), e.g. "
        "http://127.0.0.1:4318; default: OTEL_EXPORTER_OTLP_ENDPOINT, else off",
    ),
]
RUN_FLAGS = [
    Flag("--output", "batch mode: where to write the answers (default FILE.out.jsonl)"),
    Flag("--max-tokens", "text/stdin/batch modes: max tokens per answer", int),
    Flag(
        "--color",
        "text/stdin modes: colours (auto: on a terminal, unless NO_COLOR is set or TERM=dumb)",
        str.lower,
        "auto",
        choices=COLOR_MODES,
    ),
]


def overload_status(raw: str) -> int:
    """`--overload-status`: 503 or 529."""
    if raw.strip() not in ("503", "529"):
        raise ValueError(f"expected 503 or 529, got {raw!r}")
    return int(raw)


NATS_FLAGS = [Flag("--nats", "the NATS server (or cluster) URL", str, DEFAULT_NATS)]
FRONTEND_FLAGS = [
    Flag(
        "--router",
        "how a pool's worker is chosen",
        str,
        "round_robin",
        choices=("round_robin", "random", "least_loaded", "kv"),
    ),
    Flag("--migration-limit", "times one request may move to another worker", int, 3, minimum=0),
    Flag("--router-temperature", "kv router: sample among good workers (0 = best)", float, 0.0),
    Flag(
        "--request-timeout",
        "seconds an answer that has begun may go without output before its worker counts "
        "as stuck (a request waiting for its first token waits while its worker is alive)",
        float,
        30.0,
        minimum=0.001,
    ),
    Flag(
        "--kv-overlap-weight", "kv router: weight of prefill blocks against decode load", float, 4.0
    ),
    Flag(
        "--no-kv-events",
        "kv router: workers publish no KV events; route on this frontend's own decisions",
        bool,
        False,
        action="store_true",
    ),
    Flag("--router-ttl", "kv router with --no-kv-events: seconds a decision counts", float, 120.0),
    Flag(
        "--router-host-hit-weight",
        "kv router: what a cached block in a worker's host memory is worth against one on "
        "its device (1)",
        float,
        DEFAULT_HOST_HIT_WEIGHT,
        minimum=0,
        maximum=1,
    ),
    Flag(
        "--router-disk-hit-weight",
        "kv router: what a cached block on a worker's disk is worth (at most the host's)",
        float,
        DEFAULT_DISK_HIT_WEIGHT,
        minimum=0,
        maximum=1,
    ),
    Flag(
        "--router-predicted-ttl",
        "kv router: seconds a routed request's blocks count as predicted on its worker "
        "until its KV events confirm them (0: off)",
        float,
        DEFAULT_PREDICTED_TTL_S,
        minimum=0,
    ),
    Flag(
        "--session-ttl",
        "seconds a session (x-rotor-session-id) stays on the worker of its last turn; 0: off",
        float,
        300.0,
        minimum=0,
    ),
    # disaggregated serving (router/disagg.py)
    Flag(
        "--disagg-policy",
        "with prefill workers: when a request is prefilled on one (else on its decode worker)",
        str.lower,
        "load",
        choices=POLICIES,
    ),
    Flag(
        "--disagg-min-tokens",
        "isl: prompts shorter than this (less what the decode worker caches) prefill locally",
        int,
        DEFAULT_MIN_TOKENS,
        minimum=0,
    ),
    Flag(
        "--disagg-max-cached-ratio",
        "isl: prompts the decode worker already holds this share of prefill locally",
        float,
        DEFAULT_MAX_CACHED_RATIO,
        minimum=0,
        maximum=1,
    ),
    Flag(
        "--prefill-busy-threshold",
        "load: queued prompt tokens past which a prefill worker is busy (0: 4 × its step budget)",
        int,
        0,
        minimum=0,
    ),
    Flag(
        "--enforce-disagg",
        "never prefill on a decode worker: without a working prefill worker, a 503",
        bool,
        False,
        action="store_true",
    ),
    # overload (router/overload.py): off unless a limit is given
    Flag(
        "--max-kv-usage",
        "skip workers whose share of device KV blocks in use is past this (0-1); default: off",
        float,
        minimum=0,
        maximum=1,
    ),
    Flag(
        "--max-prefill-tokens",
        "skip workers with more prompt tokens waiting for their prefill; default: off",
        int,
        minimum=0,
    ),
    Flag(
        "--overload-status",
        "the status when every worker is past those limits: 503 or 529 (Dynamo's)",
        overload_status,
        503,
    ),
]
WORKER_FLAGS = [
    Flag(
        "--system-port",
        "serve the worker's /live, /health and /metrics on this port",
        int,
        minimum=1,
        maximum=65535,
    ),
    Flag(
        "--system-host",
        "address the --system-port binds (0.0.0.0: reachable beyond this host)",
        str,
        "127.0.0.1",
    ),
    Flag("--grace-period", "seconds to finish running requests on SIGTERM", float, 30.0, minimum=0),
    Flag(
        "--disaggregation-mode",
        "agg: whole requests; prefill: only their prefill (decode workers fetch the KV); "
        "decode: the rest after a prefill worker's",
        str.lower,
        "agg",
        choices=ROLES,
    ),
    # the canary (runtime/canary.py): is the engine still stepping?
    Flag(
        "--canary-after",
        "seconds without an engine step (idle or not) before a 1-token canary request; 0: off",
        float,
        DEFAULT_CANARY_AFTER_S,
        minimum=0,
    ),
    Flag(
        "--canary-timeout",
        "seconds a canary may take to answer before the worker is unhealthy (not routed to, "
        "its requests moved)",
        float,
        DEFAULT_CANARY_TIMEOUT_S,
        minimum=0.001,
    ),
    Flag(
        "--kv-events-delay-ms",
        "a test switch: hold each step's KV events back this long before publishing them, "
        "in order (the lag of a loaded machine, on purpose)",
        int,
        0,
        minimum=0,
    ),
]
# rotor planner (rotor/planner, serve/planner.py)
PLANNER_FLAGS = [
    Flag("--model", "the served model name whose pools the planner sizes"),
    Flag(
        "--mode",
        "agg: one pool of whole-request workers; disagg: prefill and decode pools",
        str.lower,
        "agg",
        choices=("agg", "disagg"),
    ),
    Flag("--ttft", "seconds: the time-to-first-token target (p90)", float, 0.5, minimum=0.001),
    Flag("--itl", "seconds: the inter-token latency target (p90)", float, 0.05, minimum=0.0001),
    Flag("--interval", "seconds between decisions", float, 10.0, minimum=0.1),
    Flag("--min-workers", "workers per pool, at least", int, 1, minimum=0),
    Flag("--max-workers", "workers per pool, at most", int, 8, minimum=1),
    Flag("--gpus-per-worker", "GPUs one worker takes (for --max-gpus)", int, 1, minimum=1),
    Flag("--max-gpus", "GPUs all pools together may take", int, minimum=1),
    Flag(
        "--scaling",
        "load: from observed latency and load, no profile; throughput: predicted load "
        "against --profile",
        str.lower,
        "load",
        choices=("load", "throughput"),
    ),
    Flag("--profile", "throughput scaling: a profile.json from `rotor planner profile`"),
    Flag(
        "--predictor",
        "throughput scaling: how the next interval's load is predicted",
        str.lower,
        "holt",
        choices=PREDICTORS,
    ),
    Flag("--cooldown", "seconds after a scale-up before any scale-down", float, 60.0, minimum=0),
    Flag(
        "--down-intervals",
        "intervals in a row a scale-down must be wanted before it happens",
        int,
        3,
        minimum=1,
    ),
    Flag(
        "--settle-timeout",
        "seconds for asked-for workers to register (or leave) before the next action",
        float,
        180.0,
        minimum=1,
    ),
    Flag(
        "--connector",
        "local: worker processes here; kubernetes: Deployments' scale; virtual: a NATS key",
        str.lower,
        "local",
        choices=("local", "kubernetes", "virtual"),
    ),
    Flag("--dry-run", "log each decision, change nothing", bool, False, action="store_true"),
    Flag("--worker-cmd", "local: the command that starts one worker (ROTOR_NATS is set for it)"),
    Flag("--prefill-cmd", "local, disagg: the prefill pool's command (default --worker-cmd)"),
    Flag("--decode-cmd", "local, disagg: the decode pool's command (default --worker-cmd)"),
    Flag(
        "--drain-timeout",
        "local: seconds a worker told to leave (SIGTERM) has before SIGKILL",
        float,
        60.0,
        minimum=0,
    ),
    Flag("--namespace", "kubernetes: the Deployments' namespace", str, "default"),
    Flag(
        "--kubeconfig", "kubernetes: a kubeconfig file (default: in-cluster, else ~/.kube/config)"
    ),
    Flag(
        "--ack-timeout",
        "virtual: seconds an external system has to acknowledge a decision",
        float,
        60.0,
        minimum=0.01,
    ),
]
FLAGS = HTTP_FLAGS + MODEL_FLAGS + LOG_FLAGS + TRACE_FLAGS + RUN_FLAGS


def env_name(flag: str) -> str:
    return "ROTOR_" + flag.lstrip("-").replace("-", "_").upper()


def _env_default(flag: Flag) -> Any:
    raw = os.environ.get(env_name(flag.name))
    if raw is None:
        return flag.default
    if flag.action == "store_true":
        return raw.lower() in ("1", "true", "yes", "on")
    if flag.action == "append":  # an empty (or blank) variable is one empty value, refused
        return [_env_value(flag, word, raw) for word in raw.split() or [raw]]
    if flag.nargs is not None:
        return [_env_value(flag, word, raw) for word in raw.split()]
    return _env_value(flag, raw, raw)


def _env_value(flag: Flag, word: str, raw: str) -> Any:
    try:
        value = flag.parse(word)
    except ValueError as e:
        raise SystemExit(f"rotor: {env_name(flag.name)}: {e}") from None
    if flag.choices is not None and value not in flag.choices:
        raise SystemExit(
            f"rotor: {env_name(flag.name)}={raw!r} is not one of {', '.join(flag.choices)}"
        )
    return value


class _Append(argparse.Action):
    """A flag given several times, one value each: the values on the command
    line, else the variable's (argparse's own "append" adds to the default)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        items = getattr(namespace, self.dest)
        if items is self.default:  # the first on the command line: the variable's go
            items = []
            setattr(namespace, self.dest, items)
        items.append(values)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `rotor run: --port: must be at most 65535`."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _checked(flag: Flag) -> Any:
    def parse(raw: str) -> Any:
        try:
            return flag.parse(raw)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = flag.type.__name__  # what argparse names in its messages
    return parse


def _add_flags(parser: argparse.ArgumentParser, flags: list[Flag]) -> None:
    for flag in flags:
        default = _env_default(flag)
        shown = "" if flag.action or default is None else f" (default: {default})"
        help_text = f"{flag.help}{shown} [{env_name(flag.name)}]"
        if flag.action == "extend":  # repeatable, each time one or more values
            parser.add_argument(
                flag.name, action="extend", nargs="+", type=_checked(flag), help=help_text
            )
            parser.set_defaults(**{flag.dest: list(default or [])})
        elif flag.action == "append":  # repeatable, one value each: the command line's replace
            parser.add_argument(
                flag.name,
                action=_Append,
                type=_checked(flag),
                default=list(default or []),
                help=help_text,
            )
        elif flag.action:
            parser.add_argument(flag.name, action=flag.action, default=default, help=help_text)
        else:
            parser.add_argument(
                flag.name,
                type=_checked(flag),
                default=default,
                choices=flag.choices,
                nargs=flag.nargs,
                help=help_text,
            )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rotor", description="rotor: an LLM serving frontend")
    parser.add_argument("--version", action="version", version=f"rotor {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    run = sub.add_parser(
        "run",
        help="run a whole system in one process",
        description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("io", nargs="*", metavar="in=INPUT out=ENGINE", help="input and engine")
    _add_flags(run, FLAGS + engine_flags())
    nats = sub.add_parser("nats", help="run a local nats-server with JetStream (development)")
    nats.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    nats.add_argument("--port", type=int, default=4222, help="port to bind (4222)")
    nats.add_argument("--store", help="JetStream storage directory (default: a temp dir)")
    frontend = sub.add_parser(
        "frontend", help="the HTTP API over every model that live workers on NATS offer"
    )
    _add_flags(frontend, HTTP_FLAGS + NATS_FLAGS + FRONTEND_FLAGS + LOG_FLAGS + TRACE_FLAGS)
    worker = sub.add_parser("worker", help="serve one engine to frontends over NATS")
    worker.add_argument("io", nargs="*", metavar="out=ENGINE", help="the engine")
    _add_flags(
        worker, MODEL_FLAGS + NATS_FLAGS + WORKER_FLAGS + LOG_FLAGS + TRACE_FLAGS + engine_flags()
    )
    planner = sub.add_parser("planner", help="size a model's worker pools to its load")
    # the planner's decisions are info lines: its log level starts there
    planner_log = [dataclasses.replace(LOG_FLAGS[0], default="info"), *LOG_FLAGS[1:]]
    _add_flags(planner, PLANNER_FLAGS + NATS_FLAGS + WORKER_FLAGS[:2] + planner_log)
    planner.add_argument(
        "--deployment",
        action="append",
        default=[],
        metavar="POOL=NAME",
        help="kubernetes: the Deployment of a pool (agg, prefill, decode); repeatable",
    )
    planner_sub = planner.add_subparsers(dest="planner_command", parser_class=Parser)
    from rotor.bench.profiling import add_arguments as add_profile_arguments

    profile = planner_sub.add_parser(
        "profile", help="measure one worker (TTFT against prompt length, ITL against load)"
    )
    add_profile_arguments(profile)
    # rotor bench: its flags live with it (rotor.bench.args); this block only wires them in
    from rotor.bench.args import DESCRIPTION as BENCH_DESCRIPTION
    from rotor.bench.args import add_arguments as add_bench_arguments

    bench = sub.add_parser(
        "bench",
        help="benchmark an OpenAI-compatible server",
        description=BENCH_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bench_arguments(bench)
    return parser


INPUTS = ("http", "text", "stdin", "batch")


def parse_io(items: list[str]) -> tuple[str, str | None, str]:
    """(input kind, batch file, engine) from `in=...` / `out=...` words."""
    inp = os.environ.get("ROTOR_IN", "http")
    out = os.environ.get("ROTOR_OUT", "echo")
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in ("in", "out") or not value:
            raise SystemExit(f"rotor run: expected in=INPUT or out=ENGINE, got {item!r}")
        if key == "in":
            inp = value
        else:
            out = value
    kind, _, path = inp.partition(":")
    if kind not in INPUTS:
        raise SystemExit(f"rotor run: unknown input {inp!r}; valid: http, text, stdin, batch:FILE")
    if kind == "batch" and not path:
        raise SystemExit("rotor run: in=batch needs a file: in=batch:FILE.jsonl")
    if kind != "batch" and path:
        raise SystemExit(f"rotor run: in={kind} takes no file")
    try:
        spec = engine_spec(out)
    except KeyError:
        raise SystemExit(
            f"rotor run: unknown engine {out!r}; valid: {', '.join(engine_names())}"
        ) from None
    return kind, path or None, spec.name


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    """rotor's own words, and the words after the first `--` (the engine's options)."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _model_config(args: argparse.Namespace) -> ModelConfig:
    return ModelConfig(
        model_path=args.model_path,
        revision=args.revision,
        model_name=args.model_name,
        served_model_names=list(args.served_model_name or []),
        loras=list(args.lora or []),
        max_model_len=args.max_model_len,
        chat_template=args.chat_template,
        tool_call_parser=args.tool_call_parser,
        reasoning_parser=args.reasoning_parser,
        template_timeout=getattr(args, "template_timeout", DEFAULT_BUDGET_S),
    )


def _engine_config(
    args: argparse.Namespace, engine: str, engine_args: list[str] | None = None
) -> EngineConfig:
    spec = ENGINES[engine]
    options = {f.dest: getattr(args, f.dest) for f in spec.flags}
    if engine_args:
        if not spec.passthrough:
            raise SystemExit(f"rotor: out={engine} takes no engine arguments after '--'")
        options["engine_args"] = list(engine_args)
    return EngineConfig(engine, options)


def _http_config(args: argparse.Namespace) -> HTTPConfig:
    return HTTPConfig(
        host=args.host,
        port=args.port,
        api_keys=list(args.api_key),
        reasoning_field=args.reasoning_field,
        max_queued_requests=args.max_queued_requests,
        max_waiting_requests=args.max_waiting_requests,
        shutdown_grace=args.shutdown_grace,
        http_workers=args.http_workers,
        request_log=args.request_log,
        request_log_max_bytes=args.request_log_max_bytes,
        request_log_hashes=args.request_log_hashes,
        otlp_endpoint=args.otlp_endpoint,
        grpc_port=args.grpc_port,
        response_store=ResponseStoreConfig(
            where=args.response_store,
            ttl_s=args.response_store_ttl,
            max_bytes=args.response_store_max_bytes,
        ),
        media=media_limits(args),
    )


def media_limits(args: argparse.Namespace) -> MediaLimits:
    """The media flags as one MediaLimits."""
    return MediaLimits(
        max_media_bytes=args.max_media_bytes,
        connect_timeout=min(DEFAULT_MEDIA.connect_timeout, args.media_timeout),
        total_timeout=args.media_timeout,
        allow_redirects=args.allow_media_redirects,
        allowed_domains=args.allowed_media_domains,
        allow_internal=args.allow_internal_media,
        allowed_local_path=args.allowed_local_media_path,
        limit_per_prompt=args.limit_mm_per_prompt or {},
    )


def run_config(
    args: argparse.Namespace,
    kind: str,
    path: str | None,
    engine: str,
    engine_args: list[str] | None = None,
) -> RunConfig:
    """The parsed flags as the typed config launch builds from."""
    return RunConfig(
        model=_model_config(args),
        engine=_engine_config(args, engine, engine_args),
        http=_http_config(args),
        input=kind,
        batch_file=path,
        output=args.output,
        max_tokens=args.max_tokens,
        color=args.color,
        log_level=args.log_level,
        log_format=args.log_format,
    )


def _worker_engine(items: list[str]) -> str:
    out = os.environ.get("ROTOR_OUT", "echo")
    for item in items:
        key, sep, value = item.partition("=")
        if key != "out" or not sep or not value:
            raise SystemExit(f"rotor worker: expected out=ENGINE, got {item!r}")
        out = value
    try:
        return engine_spec(out).name
    except KeyError:
        raise SystemExit(
            f"rotor worker: unknown engine {out!r}; valid: {', '.join(engine_names())}"
        ) from None


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    passthrough: list[str] = []
    if words[:1] in (["run"], ["worker"]):
        words, passthrough = split_passthrough(words)
    parser = build_parser()
    args = parser.parse_args(words)
    if args.command is None:  # `rotor` alone: what it can do
        parser.print_help()
        return 0
    if args.command == "run":
        kind, path, engine = parse_io(args.io)
        from rotor.inputs.interrupt import EXIT_INTERRUPTED
        from rotor.serve.run import run

        try:
            return run(run_config(args, kind, path, engine, passthrough))
        except KeyboardInterrupt:  # Ctrl-C before a mode installed its own handling
            return EXIT_INTERRUPTED
    if args.command == "nats":
        from rotor.runtime.nats.server import run as run_nats

        return run_nats(args.host, args.port, args.store)
    if args.command == "frontend":
        from rotor.serve.frontend import run_frontend

        if args.router_disk_hit_weight > args.router_host_hit_weight:
            parser.exit(
                2,
                f"rotor frontend: --router-disk-hit-weight ({args.router_disk_hit_weight:g}) "
                f"must be at most --router-host-hit-weight ({args.router_host_hit_weight:g})\n",
            )

        return run_frontend(
            FrontendConfig(
                http=_http_config(args),
                nats=args.nats,
                router=args.router,
                migration_limit=args.migration_limit,
                router_temperature=args.router_temperature,
                request_timeout=args.request_timeout,
                kv_overlap_weight=args.kv_overlap_weight,
                kv_events=not args.no_kv_events,
                router_ttl=args.router_ttl,
                router_host_hit_weight=args.router_host_hit_weight,
                router_disk_hit_weight=args.router_disk_hit_weight,
                router_predicted_ttl=args.router_predicted_ttl,
                session_ttl=args.session_ttl,
                disagg=DisaggPolicy(
                    policy=args.disagg_policy,
                    min_tokens=args.disagg_min_tokens,
                    max_cached_ratio=args.disagg_max_cached_ratio,
                    busy_tokens=args.prefill_busy_threshold,
                    enforce=args.enforce_disagg,
                ),
                overload=Overload(args.max_kv_usage, args.max_prefill_tokens),
                overload_status=args.overload_status,
                template_timeout=args.template_timeout,
                log_level=args.log_level,
                log_format=args.log_format,
            )
        )
    if args.command == "worker":
        from rotor.serve.worker import run_worker

        engine = _worker_engine(args.io)
        return run_worker(
            WorkerConfig(
                model=_model_config(args),
                engine=_engine_config(args, engine, passthrough),
                nats=args.nats,
                system_port=args.system_port,
                system_host=args.system_host,
                grace_period=args.grace_period,
                role=args.disaggregation_mode,
                canary=CanaryPolicy(args.canary_after, args.canary_timeout),
                kv_events_delay_ms=args.kv_events_delay_ms,
                otlp_endpoint=args.otlp_endpoint,
                log_level=args.log_level,
                log_format=args.log_format,
            )
        )
    if args.command == "planner":
        return _planner(args)
    if args.command == "bench":
        from rotor.bench.main import main as bench_main

        return bench_main(args)
    return 2  # pragma: no cover - argparse requires a command


def _planner(args: argparse.Namespace) -> int:
    if args.planner_command == "profile":
        from rotor.bench.profiling import main as profile_main

        return profile_main(args)
    if not args.model:
        raise SystemExit("rotor planner: --model is required (the served model name)")
    from rotor.serve.planner import run_planner

    # every PlannerConfig field is the flag of the same name (--deployment appends)
    names = [f.name for f in dataclasses.fields(PlannerConfig) if f.name != "deployments"]
    config = PlannerConfig(
        **{name: getattr(args, name) for name in names}, deployments=list(args.deployment)
    )
    return run_planner(config)


if __name__ == "__main__":
    sys.exit(main())
