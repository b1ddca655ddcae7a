"""rotor against NVIDIA Dynamo 1.6.1 on this machine, side by side (issue 12).

Runs, one after the other and interleaved over `--repeats` rounds, on one
model directory and one `rotor bench` workload (~160-token prompts, 128-token
answers, ignore_eos, seeded, a closed loop at 1, 32 and 128 streams):

  dynamo     python -m dynamo.frontend + python -m dynamo.mocker --speedup-ratio 1e6
             (file discovery, TCP request plane: no etcd, no NATS)
  rotor      rotor run out=mocker --speedup-ratio 0
  rotor-w2   rotor run out=mocker --speedup-ratio 0 --http-workers 2
  rotor-step rotor run out=mocker --speedup-ratio 0 --step-slice-ms 0 (the
             mocker hands the loop over after every step, so the frontend is
             never behind it: one event and one socket write per token)
  rotor-w2-step  the same with --http-workers 2 (the engine in a process of
             its own, so the HTTP processes may fall behind it, as Dynamo's
             frontend falls behind its mocker)

`--baseline DIR` runs every rotor system a second time from another rotor
source tree (DIR holds its src/, e.g. a `git worktree` of an earlier
commit; same interpreter, same client), interleaved with this tree's in
every round, as `<system>@baseline`: a change's before and after, like for
like (`--systems rotor-step --baseline ../before`).

`--pace 1` runs every mocker at speedup ratio 1 instead (a real engine's
pace: each token of each stream its own step, on both stacks); the like
for like per event, and what inter-token latency the frontend adds.
The summary gives each system's events per answer (a reader that fell
behind its engine reads several tokens as one event: rotor's coalescing,
reported beside, not in, the like for like).

CPU per output token counts every process of the system under test (each
server and all its descendants, found once it answers) the same way for both,
through `rotor bench --server-pid`. Results, `rotor bench --compare` reports
and summary.md (median and spread over the rounds) go to --out.

Why 1e6 and not 0: Dynamo 1.6.1's help says "Use 0 for infinite speedup", but
its scheduler returns the unscaled simulated time when the ratio is <= 0, so
0 runs in real time like 1.0 (measured here: 128 tokens in ~750 ms at 0 and at
1, in ~3-6 ms at 1e6 and at 1e9). 1e6 makes every simulated sleep nanoseconds,
which is what rotor's `--speedup-ratio 0` (never sleep) means.

Why a replay trace: Dynamo's mocker emits random token ids. With rotor's
531-token built-in tokenizer (256 of them single bytes, half of those
non-ASCII) its answers stream no text at all: 128 tokens, content "" (seen
here; a random byte soon leaves incomplete UTF-8 that its incremental
detokenizer holds back), so the last comparison had no per-token SSE events
on Dynamo's side. Its `--response-replay-trace-path` makes it emit planned
ids instead, for requests annotated `output_replay_id:KEY`
(`nvext.annotations`). The trace holds 128 ids drawn with a seed from the
same readable vocabulary rotor's mocker samples from (whole printable
tokens), so both stacks stream the same kind of text, one event per token on
Dynamo's side. rotor bench gets that one extra body field for Dynamo only
(rotor refuses unknown fields); nothing else about the load differs.

Frontend-added TTFT (`--split-requests N`, before the runs): the same kind of
prompt's token ids go straight into rotor's mocker engine in this process (no
HTTP, no template, no tokenizer), timed from generate() to its first output;
the client-observed TTFT at 1 stream minus that is what the frontend and HTTP
add. The preparation (template + tokenizer) and the in-process pipeline are
timed on their own too. `--repeats 0 --systems rotor` runs only this split.

    DYNAMO_VENV=/path/to/dynamo-venv python benchmarks/dynamo_compare.py --out /tmp/dyn-cmp

Needs rotor installed in the running interpreter; Dynamo lives only in
DYNAMO_VENV (ai-dynamo + ai-dynamo-runtime 1.6.1). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPLAY_KEY = "bench"
SYSTEMS = ("dynamo", "rotor", "rotor-w2", "rotor-step", "rotor-w2-step")
MODEL_NAME = "bench-model"


# -- the model directory -----------------------------------------------------


def corpus(seed: int, lines: int = 6000) -> list[str]:
    """Seeded sentences: the bench's own words (so a prompt word is about one
    token, as with real BPE vocabularies), mixed with pseudo-words of a few
    syllables at Zipf-like frequencies (so training fills a realistic vocabulary
    of whole words and word pieces), plus rotor's mixed-script corpus."""
    from rotor.bench.workload import WORDS
    from rotor.model.builtin import _CORPUS

    rng = random.Random(seed)
    onsets = "b c d f g h j k l m n p r s t v w z br ch cl dr fl gr pl sh st th tr".split()
    vowels = "a e i o u ai ea ee ie oo ou".split()
    codas = ["", "", "", "n", "r", "s", "t", "l", "nd", "ng", "st", "rk"]
    pseudo = [
        "".join(
            rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
            for _ in range(rng.randint(1, 4))
        )
        for _ in range(12000)
    ]
    weights = [1.0 / (rank + 10) for rank in range(len(pseudo))]
    text = []
    for _ in range(lines):
        real = rng.choices(WORDS, k=rng.randint(4, 12))
        made = rng.choices(pseudo, weights, k=rng.randint(4, 12))
        sentence = real + made
        rng.shuffle(sentence)
        text.append(" ".join(sentence).capitalize() + rng.choice(".,;!?"))
    return text + list(_CORPUS)


def write_model_dir(root: Path, vocab_size: int, seed: int) -> Path:
    """A Qwen-shaped directory both stacks load: byte-level BPE tokenizer.json,
    tokenizer_config.json with the ChatML template, generation_config.json, and
    a config.json whose vocab_size is the tokenizer's."""
    from rotor.model.builtin import CHATML_ADDED, CHATML_SPECIAL, CHATML_TEMPLATE, build_tokenizer

    root.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(CHATML_SPECIAL, CHATML_ADDED, corpus(seed), vocab_size)
    tok.save(str(root / "tokenizer.json"))
    added = {
        str(i): {
            "content": t.content,
            "special": t.special,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "single_word": False,
        }
        for i, t in sorted(tok.get_added_tokens_decoder().items())
    }
    _dump(
        root / "tokenizer_config.json",
        {
            "added_tokens_decoder": added,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "bos_token": None,
            "chat_template": CHATML_TEMPLATE,
            "model_max_length": 32768,
            "tokenizer_class": "PreTrainedTokenizerFast",
        },
    )
    eos = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    _dump(root / "generation_config.json", {"eos_token_id": eos})
    _dump(
        root / "config.json",
        {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "vocab_size": tok.get_vocab_size(),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "max_position_embeddings": 32768,
            "eos_token_id": eos[0],
            "bos_token_id": eos[1],
            "torch_dtype": "bfloat16",
        },
    )
    return root


def write_replay_trace(path: Path, model_dir: Path, output_len: int, seed: int) -> list[int]:
    """One replay row of `output_len` ids from the readable vocabulary rotor's
    mocker samples (whole printable tokens, no special or added ones)."""
    from rotor.engines.mocker.sampler import readable_vocab
    from rotor.model.tokenizer import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = random.Random(f"replay:{seed}").choices(readable_vocab(tok), k=output_len)
    row = {"request_id": REPLAY_KEY, "output_length": output_len, "output_token_ids": ids}
    path.write_text(json.dumps(row) + "\n")
    return ids


def _dump(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


# -- the systems under test ----------------------------------------------------


class System:
    """The processes of one system under test, started in `work`, logging there."""

    def __init__(
        self,
        kind: str,
        model_dir: Path,
        work: Path,
        dynamo_python: Path | None,
        dynamo_speedup: float = 1e6,
        pace: float | None = None,
        src: Path | None = None,
    ) -> None:
        """`src`: another rotor tree's src/ to run a rotor system from (the
        baseline of a before/after run); None: this interpreter's rotor."""
        self.kind = kind
        self.src = src
        self.pace = pace  # every mocker's speedup ratio (None: as fast as each goes)
        self.dynamo_speedup = dynamo_speedup if pace is None else pace
        self.model_dir = model_dir
        self.work = work
        self.dynamo_python = dynamo_python
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        if self.kind == "dynamo":
            assert self.dynamo_python is not None
            env = {**os.environ, "DYN_FILE_KV": str(self.work / "kv")}
            common = ["--discovery-backend", "file", "--request-plane", "tcp"]
            self._spawn(
                "frontend",
                [str(self.dynamo_python), "-m", "dynamo.frontend"]
                + ["--http-host", "127.0.0.1", "--http-port", str(self.port), *common],
                env,
            )
            self._spawn(
                "mocker",
                [str(self.dynamo_python), "-m", "dynamo.mocker"]
                + ["--model-path", str(self.model_dir), "--model-name", MODEL_NAME, *common]
                + ["--speedup-ratio", str(self.dynamo_speedup)]
                + ["--response-replay-trace-path", str(self.model_dir / "replay.jsonl")],
                env,
            )
        else:
            workers = ["--http-workers", "2"] if self.kind.startswith("rotor-w2") else []
            if self.kind.endswith("-step"):  # a step at a time: one event per token
                workers += ["--step-slice-ms", "0"]
            ratio = "0" if self.pace is None else str(self.pace)
            env = dict(os.environ)
            if self.src is not None:  # another tree's rotor: its src/ first on the path
                env["PYTHONPATH"] = os.pathsep.join([str(self.src), env.get("PYTHONPATH", "")])
            self._spawn(
                "rotor",
                [sys.executable, "-m", "rotor.cli", "run", "out=mocker"]
                + ["--model-path", str(self.model_dir), "--model-name", MODEL_NAME]
                + ["--speedup-ratio", ratio, "--port", str(self.port), *workers],
                env,
            )

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """`argv` as one of the system's processes (`env`: None inherits this one's)."""
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 (the child keeps it)
        self.procs.append(
            subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.work)
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until /v1/models lists the model (Dynamo's frontend lists it once
        it has discovered the mocker)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"{self.kind}: {p.args[2:4]} exited ({p.returncode}); see {self.work}"
                    )
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if MODEL_NAME in r.read().decode():
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.kind}: not ready after {timeout:.0f} s; see {self.work}")

    def pids(self) -> list[int]:
        """Every process of the system: what was started and all descendants."""
        return descendants([p.pid for p in self.procs])

    def stop(self) -> None:
        stop_all(self.procs)


def stop_all(procs: list[subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    """SIGTERM what was started (last first: rotor stops its HTTP workers
    itself), then SIGKILL whatever of it, or of its descendants, is still there."""
    tree = descendants([p.pid for p in procs])
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for pid in tree:
        if pid not in {p.pid for p in procs} and alive(pid):
            os.kill(pid, signal.SIGKILL)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_serving(
    port: int,
    tries: int = 300,
    pause: float = 0.2,
    proc: subprocess.Popen[bytes] | None = None,
) -> None:
    """Until a server on `port` answers `/v1/models`: RuntimeError once `tries`
    run out, or as soon as `proc` (the server's process, if given) has exited."""
    for _ in range(tries):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited ({proc.returncode}) before serving")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1):
                return
        except OSError:
            time.sleep(pause)
    raise RuntimeError(f"nothing serves on port {port} after {tries} tries")


def descendants(roots: Sequence[int]) -> list[int]:
    """`roots` and every process below them, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def sanity_check(system: System, output_len: int) -> str:
    """One streamed answer: it must carry text and `output_len` tokens, or the
    comparison would be unfair (the empty-text trap of Dynamo's random ids)."""
    body: dict[str, Any] = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "Say something."}],
        "max_tokens": output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if system.kind == "dynamo":
        body["nvext"] = {"annotations": [f"output_replay_id:{REPLAY_KEY}"]}
    req = urllib.request.Request(
        system.url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    text, events, usage = [], 0, None
    with urllib.request.urlopen(req, timeout=60) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    text.append(piece)
                    events += 1
    answer = "".join(text)
    tokens = (usage or {}).get("completion_tokens")
    if not answer.strip() or tokens != output_len:
        raise RuntimeError(
            f"{system.kind}: the sanity answer has {len(answer)} characters and "
            f"{tokens} tokens (wanted text and {output_len}); see {system.work}"
        )
    return f"{tokens} tokens, {events} text events, {len(answer)} characters: {answer[:60]!r}…"


# -- the load ------------------------------------------------------------------


def bench_argv(args: argparse.Namespace, system: System, out: Path) -> list[str]:
    """The one `rotor bench` command line every system gets."""
    argv = [sys.executable, str(Path(__file__).resolve()), "_bench"]
    if system.kind == "dynamo":
        argv.append("--replay-annotation")
    argv += ["--", "--url", system.url + "/v1", "--model", MODEL_NAME]
    argv += ["--concurrency", *map(str, args.concurrency)]
    argv += ["--duration", str(args.duration), "--warmup", str(args.warmup)]
    argv += ["--input-len", str(args.input_len), "--output-len", str(args.output_len)]
    argv += ["--ignore-eos", "on", "--seed", str(args.seed), "--no-progress"]
    argv += ["--server-pid", *map(str, system.pids())]
    argv += ["--label", out.name, "--output-dir", str(out)]
    return argv


def bench_entry(argv: list[str]) -> int:
    """`_bench [--replay-annotation] -- ROTOR-BENCH-ARGS`: rotor bench itself,
    its request bodies carrying Dynamo's replay annotation when asked."""
    from rotor import cli
    from rotor.bench import client

    if argv and argv[0] == "--replay-annotation":
        argv = argv[1:]
        plain = client.build_body

        def annotated(*a: Any, **kw: Any) -> dict[str, Any]:
            body = plain(*a, **kw)
            body["nvext"] = {"annotations": [f"output_replay_id:{REPLAY_KEY}"]}
            return body

        client.build_body = annotated  # type: ignore[assignment]
    if argv and argv[0] == "--":
        argv = argv[1:]
    return cli.main(["bench", *argv])


# -- where rotor's time to first token goes ------------------------------------


async def ttft_split(model_dir: Path, input_len: int, output_len: int, n: int, seed: int) -> dict:
    """Time to first token inside rotor's process at 1 stream, with no HTTP:
    the mocker engine alone (prompt token ids in, first output out), the
    prompt's preparation alone (chat template and tokenizer) as the frontend
    runs it (a short prompt: on the loop under the CPU alarm), in the
    preparer's threads, and called directly, and the whole
    frontend pipeline (chat request in, first text event
    out: preparation, engine, detokenizer). p50, p90 and mean in ms."""
    from rotor.api.body import validated
    from rotor.bench.workload import words
    from rotor.engines.mocker import MockerConfig, MockerEngine
    from rotor.model.loader import load_model
    from rotor.pipeline.preprocess import new_request_id, prepare_chat
    from rotor.pipeline.served import ServedModel
    from rotor.protocol.engine import EngineRequest, StopParams, pulled
    from rotor.protocol.openai import ChatCompletionRequest
    from rotor.serve.system import System as RotorSystem

    card, tok = load_model(model_dir, model_name=MODEL_NAME)
    engine = MockerEngine(card, tok, MockerConfig(speedup_ratio=0))
    system = RotorSystem.local(engine, ServedModel.build(card, tok))
    await system.start()
    frontend = system.frontend
    frontend.ready = True
    rng = random.Random(seed)
    perf = time.perf_counter
    engine_ms, prepare_ms, pool_ms, inline_ms, frontend_ms, prompt_tokens = [], [], [], [], [], []
    entry = frontend.model(MODEL_NAME)
    served = entry.model

    def chat_request(body: dict) -> ChatCompletionRequest:
        return validated(ChatCompletionRequest, body)

    ways = ["frontend", "pool", "direct"]
    try:
        for i in range(n + n // 10):  # the first tenth warms up
            body = {
                "model": MODEL_NAME,
                "messages": [{"role": "user", "content": words(rng, input_len)}],
                "max_tokens": output_len,
                "ignore_eos": True,
                "stream": True,
            }
            # The three ways of preparing, in a rotating order (a warm second
            # run of the same prompt must not favour one of them).
            times: dict[str, float] = {}
            for way in ways[i % 3 :] + ways[: i % 3]:
                t0 = perf()
                if way == "frontend":  # as chat() does: inline under the alarm when short
                    prepared = await frontend.prepare_chat(served, chat_request(body))
                elif way == "pool":
                    await frontend.preparer.run(
                        prepare_chat, served, chat_request(body), new_request_id()
                    )
                else:
                    prepare_chat(served, chat_request(body), new_request_id())
                times[way] = perf() - t0
            t_prepare, t_pool, t_inline = times["frontend"], times["pool"], times["direct"]
            ids = prepared.token_ids
            stop = StopParams(max_tokens=output_len, ignore_eos=True)
            t0 = perf()
            stream = pulled(
                engine.generate(EngineRequest(f"split-{i}", MODEL_NAME, ids, stop=stop))
            )
            await stream.__anext__()
            t_engine = perf() - t0
            async for _ in stream:
                pass

            t0 = perf()
            resp = await frontend.chat(entry, chat_request(body), f"split-{i}")
            t_frontend = None
            async for event in resp.events:
                if t_frontend is None and event.pieces:
                    t_frontend = perf() - t0
            if i >= n // 10 and t_frontend is not None:
                engine_ms.append(1e3 * t_engine)
                prepare_ms.append(1e3 * t_prepare)
                pool_ms.append(1e3 * t_pool)
                inline_ms.append(1e3 * t_inline)
                frontend_ms.append(1e3 * t_frontend)
                prompt_tokens.append(len(ids))
    finally:
        await system.stop()
    return {
        "requests": len(engine_ms),
        "prompt_tokens_mean": statistics.fmean(prompt_tokens),
        "engine_ms": _pct(engine_ms),
        "prepare_ms": _pct(prepare_ms),
        "prepare_pool_ms": _pct(pool_ms),
        "prepare_inline_ms": _pct(inline_ms),
        "frontend_in_process_ms": _pct(frontend_ms),
    }


def _pct(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50": xs[len(xs) // 2], "p90": xs[int(len(xs) * 0.9)], "mean": statistics.fmean(xs)}


# -- the report ----------------------------------------------------------------

FIGURES = (
    ("req/s", lambda s: s["request_throughput"]),
    ("out tok/s", lambda s: s["output_throughput"]),
    ("CPU µs/tok", lambda s: (s.get("server_cpu") or {}).get("us_per_output_token")),
    ("server cores", lambda s: (s.get("server_cpu") or {}).get("cores")),
    ("client cores", lambda s: (s.get("client_cpu") or {}).get("cores")),
    ("TTFT p50 ms", lambda s: (s.get("ttft_ms") or {}).get("p50")),
    ("ITL p50 ms", lambda s: (s.get("itl_ms") or {}).get("p50")),
    ("ITL p99 ms", lambda s: (s.get("itl_ms") or {}).get("p99")),
)


def summarize(out: Path, runs: dict[str, list[Path]], split: dict | None, loads: list[str]) -> str:
    """summary.json and summary.md: each figure's median over the rounds with
    its range, per system and concurrency."""
    table: dict[str, dict[int, dict[str, list[float]]]] = {}
    for kind, paths in runs.items():
        for path in paths:
            res = json.loads(path.read_text())
            for level in res["levels"]:
                s = level["summary"]
                cell = table.setdefault(kind, {}).setdefault(level["concurrency"], {})
                for name, get in FIGURES:
                    value = get(s)
                    if value is not None:
                        cell.setdefault(name, []).append(float(value))
                cell.setdefault("failed", []).append(float(s["failed"]))
                cell.setdefault("prompt tok/req", []).append(
                    s["prompt_tokens"] / max(1, s["completed"])
                )
                cell.setdefault("output tok/req", []).append(
                    s["output_tokens"] / max(1, s["completed"])
                )
                events = events_per_answer(level)
                if events is not None:
                    cell.setdefault("events/answer", []).append(events)
    (out / "summary.json").write_text(json.dumps({"table": table, "ttft_split": split}, indent=1))

    names = [n for n, _ in FIGURES] + [
        "events/answer",
        "prompt tok/req",
        "output tok/req",
        "failed",
    ]
    lines = [
        "Median over rounds [min–max]; CPU counts every server process and its descendants.",
        "",
        "| system | streams | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for kind in runs:
        for conc, cell in sorted(table.get(kind, {}).items()):
            vals = []
            for name in names:
                xs = cell.get(name)
                if not xs:
                    vals.append("–")
                    continue
                med = statistics.median(xs)
                vals.append(
                    f"{_fmt(med)} [{_fmt(min(xs))}–{_fmt(max(xs))}]" if len(xs) > 1 else _fmt(med)
                )
            lines.append(f"| {kind} | {conc} | " + " | ".join(vals) + " |")
    if split is not None:
        one = {
            k: statistics.median(table[k][1]["TTFT p50 ms"]) for k in runs if 1 in table.get(k, {})
        }
        e, f = split["engine_ms"]["p50"], split["frontend_in_process_ms"]["p50"]
        pr, inline = split["prepare_ms"]["p50"], split["prepare_inline_ms"]["p50"]
        pool = split["prepare_pool_ms"]["p50"]
        lines += [
            "",
            f"TTFT at 1 stream, rotor in process ({split['requests']} requests, "
            f"{split['prompt_tokens_mean']:.0f}-token prompts, p50): engine alone {e:.3f} ms; "
            f"prompt preparation alone {pr:.3f} ms as the frontend runs it (on the loop "
            f"under the CPU alarm), {pool:.3f} ms in the prepare pool, {inline:.3f} ms "
            f"called directly; whole frontend pipeline to the first "
            f"text event {f:.3f} ms (adds {f - e:.3f} ms to the engine's).",
        ]
        for kind, ttft in one.items():
            extra = (
                f"; minus engine = {ttft - e:.3f} ms added outside rotor's engine"
                if kind != "dynamo"
                else ""
            )
            lines.append(f"- {kind}: client-observed TTFT p50 {ttft:.3f} ms{extra}")
    lines += ["", f"{os.cpu_count()} CPUs here, shared with others:", *(f"- {x}" for x in loads)]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def events_per_answer(level: dict[str, Any]) -> float | None:
    """A `rotor bench` level's mean of SSE events per answer (its first and
    every gap after it), over the requests that ended without an error;
    None if none did."""
    events = [len(q.get("itl_s") or []) + 1 for q in level["requests"] if not q.get("error")]
    return statistics.fmean(events) if events else None


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"


# -- main ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_bench":
        return bench_entry(argv[1:])
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, default=Path("/tmp/rotor-dynamo-compare"))
    p.add_argument("--dynamo-venv", type=Path, default=os.environ.get("DYNAMO_VENV"))
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--repeats", type=int, default=2, help="rounds; each runs every system once")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32, 128])
    p.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    p.add_argument("--warmup", type=int, default=64)
    p.add_argument("--input-len", type=int, default=150, help="prompt words (~1 token each)")
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dynamo-speedup", type=float, default=1e6, help="Dynamo's ratio (its 0 is real time)"
    )
    p.add_argument("--split-requests", type=int, default=300, help="0: no TTFT split")
    p.add_argument("--pace", type=float, help="every mocker at this speedup ratio (1: real pace)")
    p.add_argument(
        "--baseline", type=Path, help="a rotor tree whose rotor systems run beside, interleaved"
    )
    args = p.parse_args(argv)

    dynamo_python = None
    if "dynamo" in args.systems:
        if args.dynamo_venv is None:
            p.error("give DYNAMO_VENV (or --dynamo-venv) for the dynamo system")
        dynamo_python = args.dynamo_venv / "bin" / "python"
        if not dynamo_python.exists():
            p.error(f"{dynamo_python} does not exist")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model_dir = write_model_dir(out / MODEL_NAME, args.vocab_size, args.seed)
    write_replay_trace(model_dir / "replay.jsonl", model_dir, args.output_len, args.seed)
    print(
        f"model {model_dir} (vocab {json.loads((model_dir / 'config.json').read_text())['vocab_size']})"
    )

    split = None
    if args.split_requests:
        split = asyncio.run(
            ttft_split(model_dir, args.input_len, args.output_len, args.split_requests, args.seed)
        )
        (out / "ttft_split.json").write_text(json.dumps(split, indent=1))
        print(f"ttft split (in process): {split}")

    names = list(args.systems)
    if args.baseline is not None:
        names += [f"{k}@baseline" for k in args.systems if k.startswith("rotor")]
        baseline_src = (args.baseline / "src").resolve()
        if not (baseline_src / "rotor").is_dir():
            p.error(f"{baseline_src} holds no rotor package")
    runs: dict[str, list[Path]] = {k: [] for k in names}
    loads: list[str] = []
    for r in range(args.repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            label = f"r{r + 1}-{name}"
            kind, _, baseline = name.partition("@")
            src = baseline_src if baseline else None
            system = System(
                kind,
                model_dir,
                out / "work" / label,
                dynamo_python,
                args.dynamo_speedup,
                args.pace,
                src,
            )
            system.start()
            try:
                system.wait_ready()
                print(f"{label}: {sanity_check(system, args.output_len)}; pids {system.pids()}")
                argv_ = bench_argv(args, system, out / label)
                (out / label).mkdir(exist_ok=True)
                (out / label / "command.txt").write_text(" ".join(argv_) + "\n")
                load0 = Path("/proc/loadavg").read_text().split()[0]
                subprocess.run(argv_, check=True)
                load1 = Path("/proc/loadavg").read_text().split()[0]
                loads.append(f"{label}: load average {load0} before, {load1} after")
                print(loads[-1])
            finally:
                system.stop()
            runs[name].append(out / label / "results.json")
        paths = [str(out / f"r{r + 1}-{k}" / "results.json") for k in names]
        subprocess.run(
            [sys.executable, "-m", "rotor.cli", "bench", "--compare", *paths]
            + ["--output-dir", str(out / f"compare-r{r + 1}")],
            check=True,
        )
    print(summarize(out, runs, split, loads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
