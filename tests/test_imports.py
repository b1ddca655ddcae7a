"""The package graph that docs/architecture.md draws ("Packages depend
downwards only"), as pyproject.toml's import-linter contracts state it
([tool.importlinter]): `lint-imports` over this tree's src/rotor. A broken
contract fails the test with import-linter's own report, which names the
contract and each offending import chain (`importer -> imported (l.N)`).

`lint-imports` runs in a child process with this tree's src/ first on
PYTHONPATH, so it reads the code beside this file, whatever rotor the
environment has installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(src: Path) -> tuple[int, str]:
    """`lint-imports` with pyproject.toml's contracts over the `rotor` under `src`:
    its exit status and its report (what follows the logo)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(src), env.get("PYTHONPATH"))))
    env["COLUMNS"] = "200"  # a chain on one line, whatever the terminal
    run = subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache"],  # no cache written in the tree
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    start = out.find("Contracts")
    return run.returncode, out[start:] if start >= 0 else out


def broken(report: str) -> str:
    """The report's broken contracts: each one's name, then its import chains."""
    start = report.find("Broken contracts")
    return report[start:] if start >= 0 else report


def test_the_package_graph_holds() -> None:
    status, report = lint_imports(ROOT / "src")
    if status != 0:
        pytest.fail(
            "an import breaks the package graph (pyproject.toml [tool.importlinter], "
            f"docs/architecture.md):\n\n{broken(report)}",
            pytrace=False,
        )
    assert "0 broken" in report, report


def test_a_forbidden_import_fails_naming_its_contract_and_chain(tmp_path: Path) -> None:
    """The check can fail: a copy of the tree whose frontend imports the router
    (the frontend's stack reaches engines only through serve) breaks that
    contract, and the report names it and the chain from the HTTP API."""
    shutil.copytree(
        ROOT / "src" / "rotor",
        tmp_path / "rotor",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    frontend = tmp_path / "rotor" / "frontend.py"
    frontend.write_text(frontend.read_text() + "\nfrom rotor.router.modes import Router\n")
    status, report = lint_imports(tmp_path)
    assert status != 0, report
    failures = broken(report)
    assert "The frontend's stack reaches engines only through" in failures, failures
    assert "rotor.api is not allowed to import rotor.router" in failures, failures
    assert "rotor.frontend -> rotor.router.modes" in failures, failures
    assert "rotor's packages depend downwards only" not in failures, failures
