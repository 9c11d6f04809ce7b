"""Every measured probe run (lowerer/backends/measured/*.json) follows tests/measured.schema.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _json_schema import validate

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "tests" / "measured.schema.json").read_text(encoding="utf-8"))
RUNS = sorted((ROOT / "lowerer" / "backends" / "measured").glob("*.json"))


def test_there_are_runs() -> None:
    assert len(RUNS) >= 3


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_run_follows_the_schema(path: Path) -> None:
    run = json.loads(path.read_text(encoding="utf-8"))
    errors = validate(run, SCHEMA)
    assert not errors, "\n".join(errors[:20])
    assert path.name == f"{run['runtime']}-{run['version']}.json"


def test_the_schema_refuses_what_it_should() -> None:
    run = json.loads(RUNS[0].read_text(encoding="utf-8"))
    first = next(iter(run["results"]))
    bad = json.loads(json.dumps(run))
    bad["results"][first]["status"] = "maybe"
    assert validate(bad, SCHEMA)
    bad = json.loads(json.dumps(run))
    del bad["date"]
    assert validate(bad, SCHEMA)
    bad = json.loads(json.dumps(run))
    bad["summary"]["total"]["unknown"] = 1
    assert validate(bad, SCHEMA)
