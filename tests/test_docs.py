"""The docs: generated reference pages current, the mkdocs site building strictly, the README short."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_current() -> None:
    # In a fresh process: what other tests register or patch in this one (rules, options) stays out of the pages.
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "generate.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (f"{done.stdout}{done.stderr}regenerate them with `python docs/generate.py` and "
                                  "commit the result")


def test_stale_page_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generate = _generator()
    name = next(iter(generate.PAGES))
    (tmp_path / name).parent.mkdir(parents=True)
    (tmp_path / name).write_text(generate.PAGES[name]() + "a hand edit\n")
    monkeypatch.setattr(generate, "DOCS", tmp_path)
    assert name in generate.stale()
    assert generate.main(["--check"]) == 1


def test_docs_build_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path / "site")]
    done = subprocess.run(command,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "catalogue" / "index.html").exists()


def test_readme_is_short_and_starts_with_the_job() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250
    quick = next(i for i, line in enumerate(lines) if line.startswith("## Quick start"))
    assert quick < 30, "the quick start must be on the first screen"
    text = "\n".join(lines)
    # the two commands the project promises: install and run on a shipped model, and the tests (as .ci/run runs them)
    assert "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest" in text
    assert "examples/example_opset11.onnx" in text
    assert "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest" in (
        ROOT / ".ci" / "run").read_text()


def test_readme_links_resolve() -> None:
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text()):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
