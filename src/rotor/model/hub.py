"""`--model-path` as a Hugging Face Hub id (`Qwen/Qwen3-0.6B`), resolved to a
local snapshot directory the way vLLM and Dynamo resolve it: through
`huggingface_hub.snapshot_download`, which itself reads `HF_HOME` /
`HF_HUB_CACHE` (where the cache is), `HF_TOKEN` (gated and private models) and
`HF_HUB_OFFLINE` (the cache alone, no network). rotor sets none of them.

The directory found is what both ends load: the frontend reads its text files
and vLLM gets the directory itself, never the id, so it cannot resolve another
revision. An existing directory always wins over an id that looks the same.
Every way the Hub can fail is a `ModelLoadError` that names the model and says
how to fetch it, never a traceback."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rotor.model.loader import ModelLoadError

# What the frontend reads (loader.py), the mocker (config.json) and a
# multimodal model's processor: an engine without weights fetches only these.
TEXT_FILES = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
]
# An engine with weights (vLLM) fetches the whole repo but the copies of the
# weights in formats it does not load.
NOT_WEIGHTS = [
    "original/*",
    "*.pth",
    "*.gguf",
    "*.onnx",
    "onnx/*",
    "openvino/*",
    "*.msgpack",
    "*.h5",
    "*.ot",
]
# A Hub repo id: `name` or `org/name`, word characters, dots and dashes (as
# huggingface_hub's validate_repo_id accepts them).
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


@dataclass(frozen=True)
class ModelSource:
    """Where a `--model-path` lives: `directory` to load, and `hub_id` (the
    served name, as vLLM serves a Hub model under its id) when it came from
    the Hub."""

    directory: str
    hub_id: str | None = None


def looks_like_hub_id(value: str) -> bool:
    """Whether a `--model-path` that is not a directory could be a Hub repo id."""
    return (
        len(value) <= 96
        and _REPO_ID.fullmatch(value) is not None
        and "--" not in value
        and ".." not in value
        and not value.endswith(".git")
    )


def resolve_model(value: str, revision: str | None = None, *, weights: bool) -> ModelSource:
    """A `--model-path`: an existing directory as it is, else a Hub id fetched
    (or found in the cache) at `revision` (None: the default branch, main);
    `weights`: the engine loads the weights, so they are fetched too."""
    local = Path(value).expanduser()
    if local.is_dir():
        if revision is not None:
            raise ModelLoadError(
                f"--revision {revision} names a Hub revision, but --model-path {value} is a "
                "local directory: leave --revision out, or give the Hub id"
            )
        return ModelSource(str(local))
    if not looks_like_hub_id(value):
        what = "is not a directory" if local.exists() else "does not exist"
        raise ModelLoadError(f"model path {local.resolve()} {what} (nor is it a Hub id: org/name)")
    return ModelSource(_snapshot(value, revision, weights), hub_id=value)


def _snapshot(repo_id: str, revision: str | None, weights: bool) -> str:
    """The snapshot directory of `repo_id` at `revision`, downloaded if need be."""
    from huggingface_hub import constants, errors, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    # huggingface_hub 1.x+ only; older ones return a partial snapshot as it is
    incomplete: Any = getattr(errors, "IncompleteSnapshotError", ())

    at = f" at revision {revision}" if revision is not None else ""
    fetch = f"hf download {repo_id}" + (f" --revision {revision}" if revision else "")
    how = (
        f"fetch it with `{fetch}` (`huggingface-cli download` before huggingface_hub 1.0), "
        "or give --model-path a local model directory"
    )
    try:
        return snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=None if weights else TEXT_FILES,
            ignore_patterns=NOT_WEIGHTS if weights else None,
        )
    except GatedRepoError:
        why = (
            f"is gated: accept its terms on https://huggingface.co/{repo_id} and set HF_TOKEN "
            "(or `hf auth login`)"
        )
    except RevisionNotFoundError:
        why = f"has no revision {revision or 'main'} on the Hub"
    except RepositoryNotFoundError:
        why = "is not on the Hub (or is private: set HF_TOKEN to a token that may read it)"
    except incomplete as e:
        why = f"is only partly in the Hub cache ({constants.HF_HUB_CACHE}): {e}"
    except LocalEntryNotFoundError as e:
        if constants.HF_HUB_OFFLINE or isinstance(e.__cause__, OfflineModeIsEnabled):
            why = (
                f"is not in the Hub cache ({constants.HF_HUB_CACHE}){at} and HF_HUB_OFFLINE "
                "is set, so the Hub is not asked"
            )
        else:
            cause = e.__cause__ or e
            why = (
                f"is not in the Hub cache ({constants.HF_HUB_CACHE}){at} and the Hub could "
                f"not be reached ({type(cause).__name__}: {_first_line(cause)})"
            )
    except (OSError, ValueError) as e:  # another HTTP error, a bad revision, a full disk
        why = f"could not be fetched{at} ({type(e).__name__}: {_first_line(e)})"
    raise ModelLoadError(f"model {repo_id} is not a local directory, and {why}; {how}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
