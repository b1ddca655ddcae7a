"""Repository paths named in docstrings exist.

Every module, class and function docstring of the Python files under
src/rotor/, tests/ and benchmarks/ is read (with `ast`), and each repository
path it names must resolve to something in the tree.

**What counts as a path.** A word made of `/`-separated segments, each a name
(letters, digits, `_`, `-`, an optional leading dot as in `.ci/`; `*` and an
all-capitals placeholder such as `NAME` stand for any name), that is not part
of a URL, an absolute path (`/v1/models`, `/tmp/x`) or a `../` path, and that:

1. ends in a file suffix of the tree — `.py`, `.md`, `.json`, `.jsonl`,
   `.yaml`, `.yml`, `.toml`, `.proto`, `.html`, `.jinja`, `.sh`, `.txt` —
   as in `api/streamed.py` or `tests/fixtures/templates/NAME.jinja`; or
2. ends in `/`, a folder, as in `engines/mocker/` or
   `pipeline/parse/families/` — one of a single name only when that name is
   one of the folders of 3 (`tests/`, `api/`; the venv's `bin/` is not the
   tree's); or
3. starts with a folder of the tree — a top-level one (`src`, `tests`,
   `benchmarks`, `docs`, `deploy`, `scripts`, `.ci`), `rotor`, or a package of
   src/rotor or a folder of tests/ (`api`, `router`, `e2e`, …) — as in
   `tests/e2e`, `runtime/nats` or `router/pool.Pool`. Such a word may name a
   module without its `.py`, and a `module.Name` names the module's file and
   a name defined at its top level (the same reading as tests/test_docs.py
   gives inline code in the docs).

Anything else is prose, not a path: `text/event-stream`, `application/json`,
`request/reply`, `tokens/s`, `HTTP/1.1`, `Qwen/Qwen3-0.6B`, dotted module
names (`rotor.router.pool`), `x-rotor-*` headers, `https://…` URLs.

**Where a path may be relative to**: the repository root, src/, src/rotor/,
tests/, or the folder of the file whose docstring names it (a module of
src/rotor/pipeline/ may name src/rotor/pipeline/parse/tools.py by what
follows its own folder).

Fast: the words are first looked for in each file's raw text, and only a file
with a word that resolves nowhere is parsed, to see whether that word sits in
a docstring (rather than in code, a string or a comment, which this test does
not judge).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "rotor"
SOURCES = [SRC, ROOT / "tests", ROOT / "benchmarks"]

FILE_SUFFIXES = {"py", "md", "json", "jsonl", "yaml", "yml", "toml", "proto", "html"}
FILE_SUFFIXES |= {"jinja", "sh", "txt"}
_TOP = {"src", "tests", "benchmarks", "docs", "deploy", "scripts", ".ci", "rotor"}
ROOTS = (
    _TOP
    | {p.name for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__"}
    | {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
)

# Segments joined by `/`, not preceded by what would make the word part of a URL
# (`//host/x`, `example.com/x`), an absolute or `../` path, a `$VAR/x` or `~/x`.
_WORD = re.compile(r"(?<![\w./:@$~*-])(?:\.?[\w*-]+/)+(?:[\w*-]+(?:\.[\w*-]+)*)?")


def named_path(word: str) -> tuple[str, str | None] | None:
    """(path, top-level name or None) that `word` names, or None for prose."""
    head, _, last = word.rpartition("/")
    first = word.split("/", 1)[0]
    if not last:
        return (word, None) if "/" in head or head in ROOTS else None  # a folder
    if last.rsplit(".", 1)[-1] in FILE_SUFFIXES and "." in last:
        return word, None  # a file
    if first not in ROOTS:
        return None
    module, dot, attribute = last.partition(".")
    if dot:
        return f"{head}/{module}.py", attribute.split(".", 1)[0]
    return word, None  # a folder, or a module without its .py


def _candidates(path: str) -> list[str]:
    """`path` as written, or (where it has no suffix) as a module's file."""
    last = path.rstrip("/").rsplit("/", 1)[-1]
    return [path] if path.endswith("/") or "." in last else [path, path + ".py"]


def _exists(base: Path, path: str) -> bool:
    if (base / path).exists():
        return True
    wild = re.sub(r"(?<![^/])[A-Z][A-Z0-9_]+(?=[./]|$)", "*", path.rstrip("/"))
    return "*" in wild and any(True for _ in base.glob(wild))


@functools.cache
def top_level_names(file: Path) -> frozenset[str]:
    """Names a module binds at its top level (also inside top-level if/try)."""
    names: set[str] = set()
    todo = list(ast.parse(file.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo += node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", [])
            todo += [s for h in getattr(node, "handlers", []) for s in h.body]
    return frozenset(names)


def resolves(word: str, folder: Path) -> bool:
    """Whether `word`, named in a file in `folder`, is prose or a path that exists."""
    named = named_path(word)
    if named is None:
        return True
    path, attribute = named
    for base in (ROOT, ROOT / "src", SRC, ROOT / "tests", folder):
        for candidate in _candidates(path):
            if not _exists(base, candidate):
                continue
            file = base / candidate
            if attribute is None or (file.is_file() and attribute in top_level_names(file)):
                return True
    return False


def docstrings(source: str) -> list[tuple[int, str]]:
    """(first line, text) of each module, class and function docstring."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            found.append((first.lineno, first.value.value))
    return found


def missing_paths(file: Path, source: str) -> list[str]:
    """`FILE:LINE: word` for each path a docstring of `file` names that resolves nowhere."""
    folder = file.parent
    if all(resolves(m.group(0), folder) for m in _WORD.finditer(source)):
        return []  # nothing unresolved anywhere in the file: no need to parse it
    name = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else str(file)
    missing = []
    for line, text in docstrings(source):
        for m in _WORD.finditer(text):
            if not resolves(m.group(0), folder):
                missing.append(f"{name}:{line + text.count(chr(10), 0, m.start())}: {m.group(0)}")
    return missing


def python_files() -> list[Path]:
    return sorted(p for top in SOURCES for p in top.rglob("*.py") if "__pycache__" not in p.parts)


def test_docstring_paths_exist() -> None:
    missing = [
        miss
        for file in python_files()
        for miss in missing_paths(file, file.read_text(encoding="utf-8"))
    ]
    assert not missing, "docstrings name paths that do not exist:\n" + "\n".join(missing)


def test_the_files_were_read() -> None:
    files = python_files()
    assert len(files) > 300
    assert SRC / "router" / "pool.py" in files and ROOT / "benchmarks" / "bench.py" in files


def test_a_stale_path_is_caught_and_prose_is_not() -> None:
    """The rule itself, on words as a docstring would have them."""
    here = SRC / "runtime"
    for word in (
        "api/streamed.py",
        "router/pool.py",
        "router/pool.Pool",
        "engines/mocker/",
        "pipeline/parse/families/",
        "tests/e2e/test_lora.py",
        "docs/vllm.md",
        "benchmarks/bench.py",
        "nats/leases.py",  # beside the file that names it
        "runtime/nats",
        "protocol/kv",  # a module without its .py
        "rotor/tracing",
        "tests/fixtures/templates/NAME.jinja",
        "protocol/*",
        ".ci/run",
    ):
        assert named_path(word) is not None and resolves(word, here), word
    for word in (
        "api/no_such_module.py",
        "router/pool.NoSuchClass",
        "engines/nothing/",
        "tests/e2e/test_nothing.py",
        "docs/nothing.md",
        "runtime/nothing",
        "rotor/heap.py",
    ):
        assert not resolves(word, here), word
    for word in (
        "text/event-stream",
        "application/json",
        "request/reply",
        "tokens/s",
        "HTTP/1.1",
        "Qwen/Qwen3-0.6B",
        "x-rotor-request/id",
        "bin/",
    ):
        assert named_path(word) is None, word
    text = (
        "See https://example.com/docs/x.py, /v1/chat/completions, /tmp/run/a.py,"
        " ../other/src/b.py, $HOME/.cache/c.py and rotor.router.pool, but `router/gone.py`."
    )
    assert [m.group(0) for m in _WORD.finditer(text)] == ["router/gone.py"]
    source = f'"""Module.\n\nNames `api/gone.py`.\n"""\n\n\ndef f():\n    """{text}"""\n'
    file = SRC / "api" / "example.py"
    assert missing_paths(file, source) == [
        "src/rotor/api/example.py:3: api/gone.py",
        "src/rotor/api/example.py:8: router/gone.py",
    ]
    assert missing_paths(file, "x = 'api/gone.py'  # api/gone.py, not in a docstring\n") == []
