"""The documentation against the real command line and the real tree.

README.md and docs/*.md are read for what they claim about rotor, and each
claim is checked:

- **Commands in code blocks** (```bash, ```sh, ```shell, ```console, ```text):
  each shell command — lines joined at a trailing backslash, cut at `&&`,
  `||`, `;`, `|`, `&` and parentheses, comments dropped — whose first word,
  after `VAR=value` assignments, is `rotor` or `python -m rotor.cli`. Where
  some lines of a block start with a `$ ` prompt, only those are commands
  (the rest is output). These are concrete command lines, so beyond the
  checks below they go through rotor's own argument parser, values and all
  (a `$(…)` or `$VAR` stands for one word, `1`).
- **Commands in inline code** (`` `rotor …` ``): syntax summaries such as
  `rotor run [in=INPUT] [out=ENGINE]`, so only the subcommand, the flag
  names and the in=/out= values that are not placeholders are checked.
- For both: the subcommand exists, every `--flag` is one that
  `rotor <subcommand> --help` lists, and in=/out= values are ones rotor
  accepts. Words after a bare `--` are the engine's (vLLM's), not rotor's.
- **Flags in prose** (an inline code span that starts with `--flag`): a flag
  of some rotor command, or one of the vLLM options rotor refuses after `--`
  (the vLLM page names them).
- **Flag tables**: a table whose first column is `flag` documents flags of
  the command(s) its nearest heading names in code (`rotor run`, …); a table
  whose first column is `command` documents, in each row, the flags of the
  command its first cell names. Every such flag exists in that command's
  --help, and every flag in a command's --help is documented in such a table.
- **Links**: relative links resolve to files that exist, and their
  `#anchors` to headings of the file.
- **Repository paths** in inline code (`src/…`, `tests/…`, `benchmarks/…`,
  `docs/…`, `.ci/…`, or a path inside src/rotor such as `pipeline/decode.py`
  or `router/pool.Pool`) exist.
- **The README stays a front door**: at most 200 lines, the serve command
  unchanged, the test command in its own bash block after the marker that
  `.ci/run` reads, and a link to every page of docs/.

`python -m rotor.cli … --help` runs once per subcommand, at import; nothing
here touches the network.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rotor.cli import build_parser, parse_io
from rotor.engines.vllm.args import OWNED as VLLM_OPTIONS_ROTOR_REFUSES

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]

SERVE_COMMAND = "python3 -m venv .venv && . .venv/bin/activate && pip install . && rotor run"
TEST_MARKER = "<!-- test-command: .ci/run runs the next line verbatim -->"
README_MAX_LINES = 200


# --- the real CLI, read once ------------------------------------------------


def _help_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTOR_")}
    env["COLUMNS"] = "120"  # argparse wraps to the terminal; keep the layout fixed
    return env


def _help(*words: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rotor.cli", *words, "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_help_env(),
        cwd=ROOT,
    )


def _read(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out


# An option line of argparse's help: two spaces, maybe `-h, `, then the long name.
_OPTION_LINE = re.compile(r"^  (?:-\w, )?(--[a-z][a-z0-9-]*)", re.M)

_TOP_HELP = _read(_help())
SUBCOMMANDS = re.search(r"\{([\w,]+)\}", _TOP_HELP).group(1).split(",")
# `rotor planner profile`, a command of its own under `rotor planner`
NESTED = ("planner profile",)
_procs = {sub: _help(*sub.split()) for sub in (*SUBCOMMANDS, *NESTED)}
HELP_TEXT = {"": _TOP_HELP, **{sub: _read(p) for sub, p in _procs.items()}}
# "" is `rotor` itself (`--version`).
HELP_FLAGS = {sub: set(_OPTION_LINE.findall(text)) for sub, text in HELP_TEXT.items()}
ALL_FLAGS = set().union(*HELP_FLAGS.values())
# vLLM's, named on the vLLM page: those rotor refuses, and those it passes on after `--`
FOREIGN_FLAGS = set(VLLM_OPTIONS_ROTOR_REFUSES) | {"--kv-transfer-config"}


def test_help_was_read() -> None:
    assert {"run", "nats", "frontend", "worker", "bench"} <= set(SUBCOMMANDS)
    assert "--model-path" in HELP_FLAGS["run"] and "--nats" in HELP_FLAGS["worker"]
    assert "--version" in HELP_FLAGS[""]


# --- reading the docs ---------------------------------------------------------

_FENCE = re.compile(r"^```\s*([\w-]*)\s*$")
_SHELL_BLOCKS = {"bash", "sh", "shell", "console", "text"}
_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")


@dataclass(frozen=True)
class Doc:
    path: Path
    lines: list[str]
    blocks: list[tuple[str, int, list[str]]]  # (language, first line number, lines)
    prose: str  # the text with every fenced block blanked (line numbers kept)

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    def line_of(self, offset: int) -> int:
        return self.prose.count("\n", 0, offset) + 1


def read_doc(path: Path) -> Doc:
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks: list[tuple[str, int, list[str]]] = []
    prose: list[str] = []
    fence: tuple[str, int, list[str]] | None = None
    for number, line in enumerate(lines, 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = (m.group(1).lower(), number + 1, [])
            prose.append("")
        elif fence is not None and line.strip() == "```":
            blocks.append(fence)
            fence = None
            prose.append("")
        elif fence is not None:
            fence[2].append(line)
            prose.append("")
        else:
            prose.append(line)
    assert fence is None, f"{path.name}: a code block is never closed"
    return Doc(path, lines, blocks, "\n".join(prose))


DOC_FILES = [read_doc(p) for p in DOCS]
DOC_IDS = [d.name for d in DOC_FILES]


def spans(doc: Doc) -> list[tuple[int, str]]:
    """Inline code spans (a span may run over a line break) with their line."""
    return [
        (doc.line_of(m.start()), " ".join(m.group(1).split())) for m in _SPAN.finditer(doc.prose)
    ]


# --- commands -------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    where: str  # FILE:LINE
    words: list[str]  # after `rotor`
    concrete: bool  # a command line from a code block (parsed in full)


# `> FILE`, `2>&1`, `&> FILE`, `< FILE`: not the command's words
_REDIRECTION = re.compile(r"(?<!\S)\d*(?:&>|>>|>&|>|<)\s*(?:\d+\b|[^\s;&|()'\"]+)")
_SUBSTITUTION = (re.compile(r"\$\([^()]*\)"), re.compile(r"\$\{\w+\}|\$\w+"))
_ROTOR_WORD = re.compile(r"(?:^|[\s;&|(])(?:rotor(?:\s|$)|python3? -m rotor\.cli\b)")


def _logical_lines(block: list[str], first: int) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending, start = "", first
    for number, line in enumerate(block, first):
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _shell_commands(line: str) -> list[list[str]]:
    for pattern in _SUBSTITUTION:
        line = pattern.sub("1", line)
    line = _REDIRECTION.sub(" ", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if set(token) <= set("&|;()<>"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _rotor_words(command: list[str]) -> list[str] | None:
    """The words after `rotor` when `command` runs rotor, else None."""
    i = 0
    while i < len(command) and re.match(r"^[A-Za-z_]\w*=", command[i]):
        i += 1  # VAR=value before the command
    rest = command[i:]
    if rest[:1] == ["rotor"]:
        return rest[1:]
    if len(rest) >= 3 and re.fullmatch(r"python3?", rest[0]) and rest[1:3] == ["-m", "rotor.cli"]:
        return rest[3:]
    return None


def block_commands(doc: Doc) -> list[Command]:
    found: list[Command] = []
    for language, first, block in doc.blocks:
        if language not in _SHELL_BLOCKS:
            continue
        prompted = any(line.startswith("$ ") for line in block)
        for number, line in _logical_lines(block, first):
            if prompted:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not _ROTOR_WORD.search(line):
                continue
            where = f"{doc.name}:{number}"
            try:
                commands = _shell_commands(line)
            except ValueError as e:
                found.append(Command(where, [f"<not a shell line: {e}>"], True))
                continue
            for command in commands:
                words = _rotor_words(command)
                if words is not None:
                    found.append(Command(where, words, True))
    return found


def span_commands(doc: Doc) -> list[Command]:
    found: list[Command] = []
    for line, text in spans(doc):
        if text != "rotor" and not text.startswith("rotor "):
            continue
        words = re.sub(r"[\[\]]", " ", text).split()[1:]
        found.append(Command(f"{doc.name}:{line}", words, False))
    return found


COMMANDS = [c for d in DOC_FILES for c in block_commands(d) + span_commands(d)]


def _word(word: str) -> str:
    return word.replace("\\|", "|").rstrip("…,.").removesuffix("...")


def _cmd(sub: str) -> str:
    return f"rotor {sub}" if sub else "rotor"


def _placeholder(value: str) -> bool:
    return re.fullmatch(r"[A-Z][A-Z0-9_]*", value) is not None


def command_problems(cmd: Command) -> list[str]:
    words = cmd.words
    if words and words[0].startswith("<not a shell line"):
        return [words[0]]
    own = words[: words.index("--")] if "--" in words else words
    sub = own[0] if own and not own[0].startswith("-") else ""
    if sub and sub not in SUBCOMMANDS:
        return [f"`rotor {sub}`: no such command (rotor has {', '.join(SUBCOMMANDS)})"]
    args = own[1:] if sub else own
    if args and f"{sub} {args[0]}" in NESTED:  # `rotor planner profile ...`
        sub, args = f"{sub} {args[0]}", args[1:]
    problems = []
    for word in args:
        if word.startswith("--"):
            flag = _word(word.split("=", 1)[0])
            if flag not in HELP_FLAGS[sub]:
                problems.append(f"`{_cmd(sub)}`: {flag} is not in its --help")
    io_words = [_word(w) for w in args if re.match(r"^(in|out)=", w)]
    concrete = [w for w in io_words if not _placeholder(w.split("=", 1)[1])]
    if io_words and sub not in ("run", "worker"):
        problems.append(f"`{_cmd(sub)}` takes no in=/out= words: {io_words}")
    elif sub == "worker" and any(w.startswith("in=") for w in io_words):
        problems.append("`rotor worker` takes out= only")
    elif concrete:
        try:
            parse_io(concrete)
        except SystemExit as e:
            problems.append(str(e))
    if cmd.concrete and not problems:
        problems += _parse_problems(own)
    return problems


def _parse_problems(words: list[str]) -> list[str]:
    """What rotor's own argument parser says about a whole command line."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            build_parser().parse_args(words)
        except SystemExit as e:
            if e.code not in (0, None):
                return [err.getvalue().strip() or f"exit {e.code}"]
    return []


@pytest.mark.parametrize(
    "cmd", COMMANDS, ids=[f"{c.where}:{' '.join(c.words)[:40]}" for c in COMMANDS]
)
def test_documented_command_runs(cmd: Command) -> None:
    problems = command_problems(cmd)
    assert not problems, f"{cmd.where}: rotor {' '.join(cmd.words)}\n" + "\n".join(problems)


def test_commands_were_found() -> None:
    subs = {c.words[0] for c in COMMANDS if c.concrete and c.words}
    assert {"run", "nats", "frontend", "worker", "bench"} <= subs
    assert any(c.where.startswith("README.md") and c.words == ["run"] for c in COMMANDS)


@pytest.mark.parametrize("doc", DOC_FILES, ids=DOC_IDS)
def test_flags_in_prose_exist(doc: Doc) -> None:
    unknown = []
    for line, text in spans(doc):
        if not re.match(r"--[a-z]", text):
            continue
        for word in text.split():
            if re.match(r"--[a-z]", word):
                flag = _word(word.split("=", 1)[0])
                if flag not in ALL_FLAGS and flag not in FOREIGN_FLAGS:
                    unknown.append(f"{doc.name}:{line}: {flag}")
    assert not unknown, "flags that no rotor command has:\n" + "\n".join(unknown)


# --- flag tables ------------------------------------------------------------------


def _cells(row: str) -> list[str]:
    row = row.strip().removeprefix("|").removesuffix("|")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)]


def _commands_in(text: str) -> list[str]:
    found = []
    for span in re.findall(r"`([^`]+)`", text):
        m = re.fullmatch(r"rotor(?: (\w+))?(?: (\w+))?(?: .*)?", span)
        if m:
            nested = f"{m.group(1)} {m.group(2)}"
            found.append(nested if nested in NESTED else m.group(1) or "")
    return found


def _flags_in(cell: str) -> list[str]:
    return [
        _word(span.split()[0].split("=", 1)[0])
        for span in re.findall(r"`([^`]+)`", cell)
        if re.match(r"--[a-z]", span)
    ]


def table_flags(doc: Doc) -> tuple[dict[str, set[str]], list[str]]:
    """(command → flags the doc's tables document for it, problems)."""
    documented: dict[str, set[str]] = {}
    problems: list[str] = []
    heading = ""
    lines = doc.prose.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"#{1,6} ", line):
            heading = line
        is_table = line.startswith("|") and i + 1 < len(lines)
        if not (is_table and re.fullmatch(r"\|[\s:|-]+\|", lines[i + 1].strip())):
            i += 1
            continue
        header = _cells(line)[0].lower()
        rows = []
        i += 2
        while i < len(lines) and lines[i].startswith("|"):
            rows.append((i + 1, _cells(lines[i])))
            i += 1
        if header == "flag":
            owners = _commands_in(heading)
            if not owners:
                problems.append(
                    f"{doc.name}: a flag table under {heading!r}, which names no command"
                )
            for number, cells in rows:
                for flag in _flags_in(cells[0]):
                    for owner in owners:
                        documented.setdefault(owner, set()).add(flag)
                        if flag not in HELP_FLAGS.get(owner, set()):
                            problems.append(
                                f"{doc.name}:{number}: {flag} is not a flag of `{_cmd(owner)}`"
                            )
        elif header == "command":
            for number, cells in rows:
                owners = _commands_in(cells[0])
                for owner in owners:
                    if owner and owner not in SUBCOMMANDS:
                        problems.append(f"{doc.name}:{number}: `rotor {owner}`: no such command")
                        continue
                    for flag in (f for cell in cells[1:] for f in _flags_in(cell)):
                        documented.setdefault(owner, set()).add(flag)
                        if flag not in HELP_FLAGS[owner]:
                            problems.append(
                                f"{doc.name}:{number}: {flag} is not a flag of `{_cmd(owner)}`"
                            )
    return documented, problems


TABLES = {d.name: table_flags(d) for d in DOC_FILES}


@pytest.mark.parametrize("doc", DOC_IDS)
def test_table_flags_exist(doc: str) -> None:
    problems = TABLES[doc][1]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("sub", sorted(HELP_FLAGS), ids=lambda s: s or "rotor")
def test_every_flag_is_documented(sub: str) -> None:
    documented = set().union(*(flags.get(sub, set()) for flags, _ in TABLES.values()))
    missing = HELP_FLAGS[sub] - documented - {"--help"}
    assert not missing, f"`{_cmd(sub)}` flags that no docs table documents: {sorted(missing)}"


# --- links and paths ----------------------------------------------------------------

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def slugs(doc: Doc) -> set[str]:
    """GitHub's anchors for the doc's headings."""
    seen: dict[str, int] = {}
    out = set()
    for line in doc.prose.split("\n"):
        m = re.match(r"#{1,6} (.*)", line)
        if not m:
            continue
        text = re.sub(r"`([^`]*)`", r"\1", m.group(1))
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


DOC_BY_PATH = {d.path: d for d in DOC_FILES}


@pytest.mark.parametrize("doc", DOC_FILES, ids=DOC_IDS)
def test_links_resolve(doc: Doc) -> None:
    broken = []
    # code spans blanked, lengths kept, so offsets still give line numbers
    text = _SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), doc.prose)
    for m in _LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        file = (doc.path.parent / path).resolve() if path else doc.path
        where = f"{doc.name}:{doc.line_of(m.start())}: {target}"
        if not file.exists():
            broken.append(f"{where}: no such file")
        elif anchor and file.suffix == ".md":
            linked = DOC_BY_PATH.get(file) or read_doc(file)
            if anchor not in slugs(linked):
                broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)


_TOP = ("src", "tests", "benchmarks", "docs", ".ci")
_PACKAGES = tuple(p.name for p in (ROOT / "src" / "rotor").iterdir() if p.is_dir())
_FILE_EXT = {
    "py",
    "md",
    "sh",
    "html",
    "jinja",
    "toml",
    "json",
    "jsonl",
    "txt",
    "yaml",
    "yml",
    "proto",
}


def _path_exists(text: str) -> bool:
    bases = (ROOT, ROOT / "src" / "rotor")
    last = text.rstrip("/").rsplit("/", 1)[-1]
    stem, dot, ext = last.rpartition(".")
    if dot and ext not in _FILE_EXT:  # module.Name: the module's file
        text = text[: len(text) - len(last)] + stem + ".py"
    return any((base / text).exists() for base in bases)


@pytest.mark.parametrize("doc", DOC_FILES, ids=DOC_IDS)
def test_named_paths_exist(doc: Doc) -> None:
    missing = []
    for line, text in spans(doc):
        if not re.fullmatch(r"\.?[\w-]+/[\w./-]*", text):
            continue
        if text.split("/", 1)[0] not in _TOP + _PACKAGES:
            continue  # bench-results/…, models/…: not the repository's
        if not _path_exists(text):
            missing.append(f"{doc.name}:{line}: {text}")
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


# --- the front door -------------------------------------------------------------------


def test_readme_is_a_front_door() -> None:
    readme = DOC_FILES[0]
    assert len(readme.lines) - (readme.lines[-1] == "") <= README_MAX_LINES
    language, _, block = readme.blocks[0]  # the first thing to run, unchanged
    assert (language, block) == ("bash", [SERVE_COMMAND])


def test_readme_test_command_is_where_ci_reads_it() -> None:
    """.ci/run runs the first line of the bash block after the marker."""
    lines = DOC_FILES[0].lines
    assert lines.count(TEST_MARKER) == 1
    after = lines[lines.index(TEST_MARKER) + 1 :]
    assert after[0] == "```bash", "the marker must sit right above the test command's block"
    assert "pytest" in after[1]


def test_readme_links_every_doc() -> None:
    linked = {m.group(1).partition("#")[0] for m in _LINK.finditer(DOC_FILES[0].prose)}
    pages = {d.name for d in DOC_FILES[1:]}
    assert pages - linked == set()


def test_shell_lines_are_cut_into_commands() -> None:
    line = (
        "X=1 rotor run --port 0 > out.log 2>&1 & rotor bench --server-pid $(pgrep -f 'rotor run')"
    )
    cut = [_rotor_words(c) for c in _shell_commands(line)]
    assert cut == [["run", "--port", "0"], ["bench", "--server-pid", "1"]]
    assert _rotor_words(["python", "-m", "rotor.cli", "nats"]) == ["nats"]
    assert _rotor_words(["pgrep", "-f", "rotor run"]) is None


def test_a_wrong_flag_or_path_is_caught() -> None:
    """The checks themselves: a doc that names what does not exist fails."""
    bad = read_doc(ROOT / "docs" / "cli.md")
    bad = Doc(bad.path, bad.lines, bad.blocks, bad.prose + "\n`rotor run --no-such-flag`\n")
    assert any("--no-such-flag" in p for c in span_commands(bad) for p in command_problems(c))
    assert command_problems(Command("x", ["run", "out=nothing"], False))
    assert command_problems(Command("x", ["autoscale"], False))
    assert command_problems(Command("x", ["bench", "--concurrency", "many"], True))
    assert not _path_exists("pipeline/no_such_stage.py") and _path_exists("pipeline/decode.py")
