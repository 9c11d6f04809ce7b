"""``lowerer inspect``: a model's opsets, the nodes lowerer owns, what a conversion would do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from lowerer.cli.epilog import EPILOG
from lowerer.cli.exits import guard
from lowerer.cli.groups import ConversionArgs, OutputArgs, VerbosityArgs, in_order

__all__ = ["inspect"]

#: What ``--target-opset``, ``--decompose`` and ``--for`` mean for ``inspect``.
_HELPS = {
    "target_opset": "Show what converting to N would do.",
    "decompose": "Show what these decompositions would do.",
    "for_backend": "List the nodes BACKEND cannot run (per its profile) and what lowerer would do with each; "
                   "exit 2 with convert's refusal when convert --for BACKEND would refuse.",
    "allow_fallback": "With --for: as convert --allow-fallback (nodes no exact form replaces are kept, not "
                      "refused).",
}


@in_order("input_path", "target_opset", "decompose", "reach", "as_json", "for_backend", "allow_fallback", "verbose",
          "quiet")
@click.command(epilog=EPILOG)
@click.argument("input_path", metavar="IN.onnx", type=click.Path(path_type=Path))
@ConversionArgs.options("target_opset", "decompose", "for_backend", "allow_fallback", helps=_HELPS)
@click.option("--reach", is_flag=True, help="Also find the lowest and highest opsets the model converts to.")
@OutputArgs.options("as_json")
@VerbosityArgs.options()
@guard
def inspect(input_path: Path, reach: bool, **values: Any) -> None:
    """Show IN.onnx's opsets, the nodes lowerer owns, and what a conversion would do (writes nothing).

    With --target-opset or --decompose it is a dry run of the conversion (without verification):
    each rewrite it would make (rule, or the function body a node would be expanded into, and why);
    exit 2 with the refusal when the conversion would be refused. With --for, the nodes BACKEND
    cannot run and what lowerer would do with each, and the exit convert --for would have: 2 with its
    refusal (a node no exact form replaces, unless --allow-fallback).
    """
    from lowerer.errors import ConversionError
    from lowerer.inspection import inspect_model

    as_json, conversion = OutputArgs.take(values)["as_json"], ConversionArgs.take(values)
    target_opset, decompose, for_backend = (conversion[k] for k in ("target_opset", "decompose", "for_backend"))
    if for_backend is not None:  # inspect --for BACKEND (lowerer.backends)
        _inspect_backend(input_path, conversion, as_json)
        return
    info = inspect_model(input_path, target_opset=target_opset, decompose=decompose, reach=reach)
    refused = info.get("plan", {}).get("refused")
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        _print_text(input_path, info, refused)
    if refused:
        raise ConversionError(f"would refuse: {refused}")


def _inspect_backend(input_path: Path, conversion: dict[str, Any], as_json: bool) -> None:
    """``inspect --for``: the table of what lowerer would do, then convert's refusal (exit 2) when it would refuse."""
    from lowerer.backends.lowering import backend_table
    from lowerer.errors import ConversionError
    from lowerer.inspection import inspect_backend

    found = inspect_backend(input_path, conversion["for_backend"], target_opset=conversion["target_opset"],
                            decompose=conversion["decompose"], allow_fallback=bool(conversion["allow_fallback"]))
    refused = found["refused"]
    lines = backend_table({**found, "refused": None})
    for line in ([json.dumps(found, indent=2)] if as_json else lines if found["nodes"] or not refused else lines[:1]):
        click.echo(line)
    if refused:
        raise ConversionError(f"would refuse: {refused}")


def _print_text(input_path: Path, info: dict[str, Any], refused: Any) -> None:
    """The inspection as text: opsets, owned nodes, reachable opsets and the rewrites a conversion would make."""
    click.echo(f"model: {input_path} (IR version {info['ir_version']})")
    click.echo("opset imports: " + ", ".join(f"{d or 'ai.onnx'}={v}" for d, v in info["opset_imports"].items()))
    click.echo(f"owned nodes: {len(info['nodes'])}")
    for n in info["nodes"]:
        attrs = " ".join(f"{k}={v}" for k, v in n["attributes"].items())
        click.echo(f"  {n['scope']}: {n['name']} {n['op_type']}-{n['version']} {attrs}".rstrip())
    if "reachable_opsets" in info:
        r = info["reachable_opsets"]
        click.echo(f"converts to opsets {r['lowest']} .. {r['highest']}")
        for key, word in (("lowest_limit", "lowest"), ("highest_limit", "highest")):
            click.echo(f"  {word}: {_limit_line(r[key])}")
    if "plan" in info and not refused:
        plan = info["plan"]
        expanded = [r for r in plan["rewrites"] if r["rule"] == "function-expansion"]
        click.echo(f"would rewrite {len(plan['rewrites'])} node(s), {len(expanded)} by expanding a function body:")
        for r in plan["rewrites"]:
            why = next((h.split(" (", 1)[1].rsplit("): rule", 1)[0] for h in r.get("steps", [])
                        if "function body" in h and " (" in h), None)
            how = f"expanded ({why})" if r["rule"] == "function-expansion" and why else f"rule {r['rule']}"
            click.echo(f"  {r['scope']}: {r['node']} {r['op_type']}-{r['from_version']} -> "
                       f"{' + '.join(r['emitted'])} (opset {r['to_opset']}, {how})")


def _limit_line(found: dict[str, Any] | None) -> str:
    """What limits one end of the reach: the node and its refusal, or that no opset is left to try."""
    if found is None:
        return "every opset lowerer knows in that direction"
    if found["node"] is None:
        return f"opset {found['opset']} is refused: {found['refusal']}"
    return f"limited by node {found['node']} ({found['op_type']}-{found['version']}, in {found['scope']}), " \
           f"refused at opset {found['opset']}: {found['refusal']}"
