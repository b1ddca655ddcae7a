"""A Hugging Face Hub cache laid out by the tests, as huggingface_hub lays it
out: `$HF_HOME/hub/models--org--name/` with `blobs/<hash>` (the files' bytes),
`snapshots/<commit>/<file>` (links to the blobs) and `refs/<branch>` (the
commit a branch names). A model directory written by support.models becomes
one snapshot; no network, no huggingface_hub code writes it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def repo_cache(hf_home: str | Path, repo_id: str) -> Path:
    """The cache folder of a model repo: HF_HOME/hub/models--org--name."""
    return Path(hf_home) / "hub" / ("models--" + repo_id.replace("/", "--"))


def commit_of(label: str) -> str:
    """A 40-hex commit hash, made up from a label (the tests' stand-in for git's)."""
    return hashlib.sha1(label.encode()).hexdigest()


def add_snapshot(
    hf_home: str | Path,
    repo_id: str,
    model_dir: Path,
    *,
    commit: str,
    refs: tuple[str, ...] = ("main",),
) -> Path:
    """Put `model_dir`'s files into the cache as snapshot `commit`, each
    branch in `refs` pointing at it; the snapshot directory."""
    repo = repo_cache(hf_home, repo_id)
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in sorted(model_dir.iterdir()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        # relative links, as huggingface_hub makes them: ../../blobs/<hash>
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    for ref in refs:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # no newline, as huggingface_hub writes it
    return snapshot


# Variables that would point huggingface_hub elsewhere than a test's HF_HOME
# (a test deletes them from its environment: monkeypatch.delenv).
ELSEWHERE = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT", "HF_TOKEN")


def hub_env(hf_home: str | Path) -> dict[str, str]:
    """A rotor process's environment on this cache alone: HF_HOME, offline."""
    return {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
