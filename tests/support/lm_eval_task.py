"""lm-evaluation-harness as a real client of an OpenAI-compatible server: a
local multiple-choice task written by the test (a task YAML and a JSON-lines
dataset, `dataset_path: json`, nothing downloaded), run with `lm-eval run
--model local-completions` (prompt scoring: echo, logprobs, max_tokens 1, the
prompts as token ids from the model directory's tokenizer), and what it
logged read back: each question's per-choice loglikelihoods and the task's
accuracy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TASK = "rotor_choice"

# Eight questions, four choices each: a random model's answers are noise, but
# the same noise through any server that scores prompts the same way.
QUESTIONS = [
    ("The capital of France is", ["Paris", "Rome", "Berlin", "Madrid"], 0),
    ("Two plus two equals", ["three", "four", "five", "six"], 1),
    ("The colour of the sky on a clear day is", ["green", "red", "blue", "black"], 2),
    ("Water freezes at zero degrees", ["Kelvin", "Fahrenheit", "Rankine", "Celsius"], 3),
    ("A week has this many days:", ["seven", "ten", "five", "twelve"], 0),
    ("The opposite of hot is", ["warm", "cold", "loud", "tall"], 1),
    ("Bees make", ["milk", "silk", "honey", "wool"], 2),
    ("The largest planet in our solar system is", ["Mars", "Venus", "Earth", "Jupiter"], 3),
]


def write_task(where: Path) -> Path:
    """The task's folder (its YAML and its dataset), for `--include_path`."""
    where.mkdir(parents=True, exist_ok=True)
    data = where / "questions.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": q, "choices": c, "answer": a}) + "\n" for q, c, a in QUESTIONS
        )
    )
    task = {  # JSON is YAML
        "task": TASK,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "answer",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    }
    (where / f"{TASK}.yaml").write_text(json.dumps(task, indent=1))
    return where


@dataclass
class Scored:
    """What lm-eval logged of one run: per question (by doc id), each
    choice's loglikelihood; and the task's accuracy."""

    loglikelihoods: dict[int, list[float]]
    accuracy: float


def run_lm_eval(
    base_url: str, model: str, tokenizer: Path, task_dir: Path, out: Path, batch_size: int = 1
) -> Scored:
    """`lm-eval run --model local-completions` against `base_url` (the
    server's root), offline, its samples logged under `out` and read back."""
    args = ",".join(
        [
            f"base_url={base_url}/v1/completions",
            f"model={model}",
            f"tokenizer={tokenizer}",
            "tokenizer_backend=huggingface",
            "tokenized_requests=True",
            "num_concurrent=1",
            "max_retries=1",
            "max_length=2048",
        ]
    )
    cmd = [
        sys.executable, "-m", "lm_eval", "run", "--model", "local-completions",
        "--model_args", args, "--tasks", TASK, "--include_path", str(task_dir),
        "--output_path", str(out), "--log_samples", "--batch_size", str(batch_size),
    ]  # fmt: skip
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(out / "hf"),  # its dataset cache, the test's own
        "TOKENIZERS_PARALLELISM": "false",
    }
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"lm-eval failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    (samples,) = out.rglob(f"samples_{TASK}_*.jsonl")
    (results,) = out.rglob("results_*.json")
    loglikelihoods = {}
    for line in samples.read_text().splitlines():
        sample = json.loads(line)
        loglikelihoods[sample["doc_id"]] = [float(r[0]) for r in sample["filtered_resps"]]
    accuracy = json.loads(results.read_text())["results"][TASK]["acc,none"]
    return Scored(loglikelihoods, float(accuracy))
