"""``lowerer targets``: the runtime targets ``--for`` takes, with the opset and IR version each release loads."""

from __future__ import annotations

from typing import Any

import click

from lowerer.cli.epilog import EPILOG
from lowerer.cli.exits import guard
from lowerer.cli.groups import OutputArgs, VerbosityArgs

__all__ = ["targets", "targets_table"]


@click.command(epilog=EPILOG)
@OutputArgs.options("as_json")
@VerbosityArgs.options()
@guard
def targets(as_json: bool) -> None:
    """List the runtime targets of --for: per release, the highest opset and IR version it loads, and the source.

    onnxruntime's releases also have kernel tables (docs/OperatorKernels.md at each release's tag):
    --for onnxruntime==X goes to the highest opset at which X has a kernel of every op the model
    holds. 'not confirmed' marks limits that were not confirmed in their source. A target's op entries
    (what it cannot run, and lowerer's form for it) are listed by 'lowerer inspect MODEL --for NAME'.
    """
    found = targets_table()
    if as_json:
        import json

        click.echo(json.dumps(found, indent=2))
        return
    for line in targets_lines(found):
        click.echo(line)


def targets_table() -> list[dict[str, Any]]:
    """Every backend: name, aliases, provider, op entry count, load limits per release, the runtimes witnessing it."""
    from lowerer.backends.kernel_tables import kernel_table, shipped_releases
    from lowerer.backends.profile import BACKENDS, aliases_of, load_profile, load_rows
    from lowerer.backends.runtimes import witnesses_for

    kernels = []
    for release in shipped_releases():
        found = kernel_table(release)
        if found is not None:
            kernels.append({"release": found.version, "providers": list(found.providers()), "source": found.source})
    table = []
    for name in BACKENDS:
        profile = load_profile(name)
        rows = [row.to_dict() for row in load_rows(name)]
        runs_ort = bool(rows) and rows[0]["runtime"] == "onnxruntime"
        table.append({"name": name, "aliases": aliases_of(name), "provider": profile.provider,
                      "entries": len(profile.entries), "loads": rows,
                      "kernel_tables": kernels if runs_ort else [],
                      "witnesses": [{"runtime": r.label, "install": r.install, "budget": r.budget}
                                    for r in witnesses_for(name)]})
    return table


def targets_lines(table: list[dict[str, Any]]) -> list[str]:
    """The text of ``lowerer targets``: a line per backend, then one per release row, then the sources."""
    lines: list[str] = []
    sources: list[str] = []
    shown: dict[str, str] = {}
    for target in table:
        names = ", ".join([target["name"], *target["aliases"]])
        lines.append(f"{names} ({target['provider']}; {target['entries']} op entries)")
        if target.get("witnesses"):
            lines.append("  witnessed by " + "; ".join(f"{w['runtime']} ({w['install']})" for w in target["witnesses"]))
        key = repr(target["loads"])
        if target["loads"] and key in shown:
            lines.append(f"  loads what {shown[key]} loads (its versions are {target['loads'][0]['runtime']}'s)")
            continue
        shown[key] = target["name"]
        for row in target["loads"]:
            if row["source"] not in sources:
                sources.append(row["source"])
            opset = "any" if row["max_opset"] is None else str(row["max_opset"])
            ir = "any" if row["max_ir"] is None else str(row["max_ir"])
            sure = "" if row["confirmed"] else "  not confirmed"
            lines.append(f"  {row['runtime']} {row['version']}+".ljust(26) +
                         f"opset <= {opset:<4} IR <= {ir:<4} [{sources.index(row['source']) + 1}]{sure}")
        tables = target.get("kernel_tables") or []
        if tables:
            refs = []
            for t in tables:
                if t["source"] not in sources:
                    sources.append(t["source"])
                refs.append(f"{t['release']} [{sources.index(t['source']) + 1}]")
            lines.append("  kernel tables (--for onnxruntime==X takes the model to an opset X has kernels for): "
                         + ", ".join(refs))
    lines.extend(f"[{i}] {s}" for i, s in enumerate(sources, 1))
    return lines
