"""`--model-path` as a Hub id (rotor.model.hub): resolved from a Hub cache the
tests lay out, at the revision asked for, served under the id; every way the
Hub can fail (offline and not cached, unreachable, not found, gated, no such
revision) a StartupError naming the model and how to fetch it. The Hub here is
a closed loopback port or a loopback server answering as the Hub answers
errors: nothing reaches huggingface.co."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants

from rotor.config import ModelConfig
from rotor.engines.registry import ENGINES, engine_spec
from rotor.model.hub import TEXT_FILES, looks_like_hub_id, resolve_model
from rotor.serve.build import StartupError, load

from support.hub import add_snapshot, commit_of
from support.models import chatml_model, write_model_dir

REPO = "acme/qwenish"


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hub cache, offline: huggingface_hub read its variables when
    imported, so its constants are what the test sets."""
    home = tmp_path / "hf"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return home


def two_revisions(hf_home: Path, tmp_path: Path) -> tuple[Path, Path]:
    """REPO's main (context 32768) and its dev branch (context 1024)."""
    main = add_snapshot(
        hf_home, REPO, chatml_model(tmp_path / "main"), commit=commit_of("main"), refs=("main",)
    )
    dev_dir = write_model_dir(
        tmp_path / "dev" / "m", special_tokens=["<s>"], eos_token="<s>", context_length=1024
    )
    dev = add_snapshot(hf_home, REPO, dev_dir, commit=commit_of("dev"), refs=("dev",))
    return main, dev


def config(path: str, revision: str | None = None, **kw: Any) -> ModelConfig:
    return ModelConfig(model_path=path, revision=revision, **kw)


def test_a_hub_id_resolves_from_the_cache_offline_and_is_served_under_the_id(
    hf_home: Path, tmp_path: Path
) -> None:
    main, _ = two_revisions(hf_home, tmp_path)
    card, tok = load(config(REPO), engine_spec("mocker"))
    assert card.name == REPO and card.path == str(main.resolve())
    assert card.context_length == 32768 and tok is not None
    assert "<|im_start|>" in card.chat_templates["default"]


def test_the_names_flags_still_name_a_hub_model(hf_home: Path, tmp_path: Path) -> None:
    two_revisions(hf_home, tmp_path)
    card, _ = load(config(REPO, model_name="short"), engine_spec("echo"))
    assert card.name == "short"
    card, _ = load(config(REPO, served_model_names=["a", "b"]), engine_spec("echo"))
    assert (card.name, card.aliases) == ("a", ["b"])


@pytest.mark.parametrize("revision", ["dev", commit_of("dev")])
def test_revision_selects_another_snapshot(hf_home: Path, tmp_path: Path, revision: str) -> None:
    _, dev = two_revisions(hf_home, tmp_path)
    card, _ = load(config(REPO, revision), engine_spec("mocker"))
    assert card.path == str(dev.resolve()) and card.context_length == 1024
    assert card.name == REPO


def test_vllm_gets_the_snapshot_directory_the_frontend_read(hf_home: Path, tmp_path: Path) -> None:
    """out=vllm is handed card.path (engines/vllm/engine.py): the snapshot, not the id."""
    _, dev = two_revisions(hf_home, tmp_path)
    card, _ = load(config(REPO, "dev"), engine_spec("vllm"))
    assert card.path == str(dev.resolve()) and card.name == REPO


def test_only_vllm_fetches_weights(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An engine without weights asks the Hub for the text files alone."""
    asked: list[dict[str, Any]] = []

    def fake(repo_id: str, **kw: Any) -> str:
        asked.append(kw)
        return str(tmp_path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert [n for n, spec in ENGINES.items() if spec.weights] == ["vllm"]
    resolve_model(REPO, "v1", weights=False)
    resolve_model(REPO, None, weights=True)
    assert asked[0] == {"revision": "v1", "allow_patterns": TEXT_FILES, "ignore_patterns": None}
    assert asked[1]["allow_patterns"] is None and "*.gguf" in asked[1]["ignore_patterns"]
    assert {"tokenizer.json", "config.json", "chat_template.jinja"} <= set(TEXT_FILES)


def test_offline_and_not_cached_says_how_to_fetch_it(hf_home: Path) -> None:
    with pytest.raises(StartupError) as err:
        load(config(REPO), engine_spec("echo"))
    text = str(err.value)
    assert f"model {REPO} is not a local directory" in text
    assert "HF_HUB_OFFLINE is set" in text and str(hf_home / "hub") in text
    assert f"`hf download {REPO}`" in text and "local model directory" in text


def test_offline_with_a_revision_not_cached(hf_home: Path, tmp_path: Path) -> None:
    two_revisions(hf_home, tmp_path)
    with pytest.raises(StartupError) as err:
        load(config(REPO, "v9"), engine_spec("echo"))
    assert "at revision v9" in str(err.value)
    assert f"`hf download {REPO} --revision v9`" in str(err.value)


def test_an_unreachable_hub_falls_back_to_the_cache_then_says_so(
    hf_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Online but the Hub does not answer (a closed loopback port): the cached
    snapshot serves; a model not cached is an error naming the connection."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    main, _ = two_revisions(hf_home, tmp_path)
    card, _ = load(config(REPO), engine_spec("echo"))
    assert card.path == str(main.resolve())
    with pytest.raises(StartupError) as err:
        load(config("acme/elsewhere"), engine_spec("echo"))
    text = str(err.value)
    assert "model acme/elsewhere is not a local directory" in text
    assert "the Hub could not be reached (ConnectError" in text
    assert "`hf download acme/elsewhere`" in text


# -- the Hub's own answers: a loopback server answering as huggingface.co does ---------


class FakeHub(BaseHTTPRequestHandler):
    status = 404
    error_code = "RepoNotFound"
    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.headers.get("Authorization"))
        self.send_response(self.status)
        self.send_header("X-Error-Code", self.error_code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_hub(hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeHub]]:
    # each server its own handler class, so its own `seen`: a handler thread of an
    # earlier test's server that ends late cannot write into this test's list
    hub = type("Hub", (FakeHub,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("status", "code", "says"),
    [
        (404, "RepoNotFound", "is not on the Hub (or is private: set HF_TOKEN"),
        (401, "GatedRepo", "is gated: accept its terms on https://huggingface.co/acme/qwenish"),
        (404, "RevisionNotFound", "has no revision v2 on the Hub"),
    ],
)
def test_the_hubs_refusals_are_startup_errors(
    fake_hub: type[FakeHub], monkeypatch: pytest.MonkeyPatch, status: int, code: str, says: str
) -> None:
    monkeypatch.setattr(FakeHub, "status", status)
    monkeypatch.setattr(FakeHub, "error_code", code)
    with pytest.raises(StartupError) as err:
        load(config(REPO, "v2"), engine_spec("echo"))
    assert says in str(err.value) and f"model {REPO} is not a local directory" in str(err.value)


def test_hf_token_is_what_the_hub_is_sent(
    fake_hub: type[FakeHub], monkeypatch: pytest.MonkeyPatch
) -> None:
    """rotor passes no token of its own: huggingface_hub sends HF_TOKEN's."""
    monkeypatch.setenv("HF_TOKEN", "hf_rotor_test")
    with pytest.raises(StartupError):
        load(config(REPO), engine_spec("echo"))
    # (huggingface_hub may send a first request of its own bare: in the full
    # suite it did; what counts is that HF_TOKEN's token reaches the Hub, and no other)
    assert "Bearer hf_rotor_test" in fake_hub.seen
    assert set(fake_hub.seen) <= {"Bearer hf_rotor_test", None}


# -- directories, and what is neither ------------------------------------------------


def test_a_directory_still_wins_even_named_like_a_hub_id(
    hf_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_revisions(hf_home, tmp_path)
    chatml_model(tmp_path / "acme", name="qwenish")  # ./acme/qwenish beside the cached one
    monkeypatch.chdir(tmp_path)
    card, _ = load(config(REPO), engine_spec("echo"))
    assert card.path == str((tmp_path / REPO).resolve()) and card.name == "qwenish"


def test_revision_with_a_directory_or_no_model_is_an_error(tmp_path: Path) -> None:
    model = chatml_model(tmp_path)
    with pytest.raises(StartupError, match="is a local directory: leave --revision out"):
        load(config(str(model), "dev"), engine_spec("echo"))
    with pytest.raises(StartupError, match="--revision needs --model-path with a Hub id"):
        load(ModelConfig(revision="dev"), engine_spec("mocker"))


def test_a_path_that_is_no_hub_id_is_not_looked_up(hf_home: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(StartupError, match="does not exist") as err:
        load(config(str(missing)), engine_spec("echo"))
    assert str(missing) in str(err.value)


@pytest.mark.parametrize("value", ["gpt2", "Qwen/Qwen3-0.6B", "a.b/c_d-1"])
def test_hub_ids(value: str) -> None:
    assert looks_like_hub_id(value)


@pytest.mark.parametrize(
    "value", ["/abs/dir", "./rel", "~/m", "a/b/c", "a--b/c", "a/../b", "x.git", "", "a" * 97]
)
def test_not_hub_ids(value: str) -> None:
    assert not looks_like_hub_id(value)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port
