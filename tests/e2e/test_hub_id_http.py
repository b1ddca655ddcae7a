"""`rotor run --model-path org/name` end to end, offline: HF_HOME is a Hub
cache the test lays out (support/hub.py), HF_HUB_OFFLINE=1, so the process
finds the snapshot in the cache alone. The mocker serves it under the Hub id;
the echo engine (which answers with the rendered prompt) shows the template is
the snapshot's, and `--revision dev` another snapshot's. A model not cached is
a clean startup error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from support.hub import ELSEWHERE, add_snapshot, commit_of, hub_env
from support.models import chatml_model, write_model_dir
from support.server import rotor_server

REPO = "acme/qwenish"
DEV_TEMPLATE = (
    "{% for m in messages %}<<dev {{ m.role }}: {{ m.content }}>>{% endfor %}"
    "{% if add_generation_prompt %}<<dev assistant>>{% endif %}"
)


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """REPO's main (Qwen's ChatML template) and its dev branch (a template of its own)."""
    tmp = tmp_path_factory.mktemp("hub")
    home = tmp / "hf"
    add_snapshot(home, REPO, chatml_model(tmp / "main"), commit=commit_of("main"))
    dev = write_model_dir(
        tmp / "dev" / "m",
        special_tokens=["<|endoftext|>"],
        chat_template=DEV_TEMPLATE,
        eos_token="<|endoftext|>",
    )
    add_snapshot(home, REPO, dev, commit=commit_of("dev"), refs=("dev",))
    return home


@pytest.fixture(autouse=True)
def only_the_test_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ELSEWHERE:
        monkeypatch.delenv(name, raising=False)


def test_the_mocker_serves_a_hub_id_from_the_cache(hf_home: Path) -> None:
    with rotor_server("out=mocker", "--model-path", REPO, env=hub_env(hf_home)) as srv:
        client = srv.openai()
        assert [m.id for m in client.models.list().data] == [REPO]
        resp = client.chat.completions.create(
            model=REPO, messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert resp.model == REPO and resp.choices[0].message.content is not None
        # the prompt is the ChatML template's, rendered by the snapshot's tokenizer
        assert resp.usage is not None and resp.usage.prompt_tokens > 1


@pytest.mark.parametrize(
    ("revision", "rendered"),
    [
        ((), "user\nhi"),  # ChatML: <|im_start|>user\nhi<|im_end|> (special tokens skipped)
        (("--revision", "dev"), "<<dev user: hi>><<dev assistant>>"),
    ],
)
def test_the_template_is_the_snapshots(
    hf_home: Path, revision: tuple[str, ...], rendered: str
) -> None:
    with rotor_server("out=echo", "--model-path", REPO, *revision, env=hub_env(hf_home)) as srv:
        r = httpx.post(
            f"{srv.url}/v1/chat/completions",
            json={"model": REPO, "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert rendered in r.json()["choices"][0]["message"]["content"]


def test_a_model_not_in_the_cache_is_a_clean_startup_error(hf_home: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rotor.cli", "run", "out=mocker", "--port", "0"]
        + ["--model-path", "acme/absent"],
        env={**_environ(), **hub_env(hf_home)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "model acme/absent is not a local directory" in proc.stderr
    assert "`hf download acme/absent`" in proc.stderr


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ELSEWHERE}
