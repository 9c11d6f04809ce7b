"""``lowerer inspect``: a model at a glance, and what a conversion would do (a dry run of ``convert``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from lowerer.cli.epilog import EPILOG
from lowerer.cli.exits import guard
from lowerer.cli.groups import ConversionArgs, OutputArgs, VerbosityArgs, in_order
from lowerer.cli.verbosity import verbosity

__all__ = ["inspect"]

#: What ``--target-opset``, ``--decompose``, ``--for`` and ``--ir-version`` mean for ``inspect``.
_HELPS = {
    "target_opset": "Show what converting to N would do.",
    "decompose": "Show what these decompositions would do.",
    "for_backend": "Show what convert --for BACKEND would do: the opset it picks, the nodes BACKEND cannot run "
                   "(per its profile) and what lowerer would do with each, and the conversion's other rewrites; "
                   "exit 2 with convert's refusal when convert --for BACKEND would refuse.",
    "allow_fallback": "With --for: as convert --allow-fallback (nodes no exact form replaces are kept, not "
                      "refused).",
    "ir_version": "Show what converting to IR version N would do.",
    "no_loops": "Show what convert --no-loops would do: refuse the forms that turn one node into a Loop over its "
                "data.",
    "fold_dequantize": "Show what convert --fold-dequantize would do: DequantizeLinear nodes of constants the "
                       "target cannot express folded into float constants.",
}


@in_order("input_path", "target_opset", "decompose", "reach", "as_json", "for_backend", "allow_fallback",
          "ir_version", "no_loops", "fold_dequantize", "verbose", "quiet")
@click.command(epilog=EPILOG)
@click.argument("input_path", metavar="IN.onnx", type=click.Path(path_type=Path))
@ConversionArgs.options("target_opset", "decompose", "for_backend", "allow_fallback", "ir_version", "no_loops",
                        "fold_dequantize", helps=_HELPS)
@click.option("--reach", is_flag=True, help="Also find the lowest and highest opsets the model converts to.")
@OutputArgs.options("as_json")
@VerbosityArgs.options()
@guard
def inspect(input_path: Path, reach: bool, **values: Any) -> None:
    """Show IN.onnx at a glance and what a conversion would do (writes nothing).

    The model: IR version, opset imports, inputs and outputs (names, types, shapes), how many
    nodes and which ops, by count. With --target-opset, --decompose or --ir-version it is a dry
    run of convert with the same options (without verification): the rewrites it would make,
    grouped by op and rewrite (-v: the nodes of each group); exit 2 with convert's refusal when
    it would refuse. With --for, what convert --for BACKEND would do: the opset it picks, the
    nodes BACKEND cannot run and what lowerer would do with each, the other rewrites, and the
    exit convert would have.
    """
    from lowerer.cli.inspect_report import inspect_model

    as_json, conversion = OutputArgs.take(values)["as_json"], ConversionArgs.take(values)
    if conversion["allow_fallback"] and conversion["for_backend"] is None:
        raise click.UsageError("--allow-fallback goes with --for BACKEND")
    if conversion["for_backend"] is not None:  # inspect --for BACKEND (lowerer.backends)
        _inspect_backend(input_path, conversion, as_json)
        return
    info = inspect_model(input_path, target_opset=conversion["target_opset"], decompose=conversion["decompose"],
                         reach=reach, ir_version=conversion["ir_version"], no_loops=bool(conversion["no_loops"]),
                         fold_dequantize=bool(conversion["fold_dequantize"]))
    refused = info.get("plan", {}).get("refused")
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        _print_text(input_path, info)
    if refused:
        raise _would_refuse(refused, as_json)


def _inspect_backend(input_path: Path, conversion: dict[str, Any], as_json: bool) -> None:
    """``inspect --for``: the table of what lowerer would do, then convert's refusal (exit 2) when it would refuse."""
    from lowerer.backends.lowering import backend_table
    from lowerer.cli.inspect_report import inspect_backend

    found = inspect_backend(input_path, conversion["for_backend"], target_opset=conversion["target_opset"],
                            decompose=conversion["decompose"], allow_fallback=bool(conversion["allow_fallback"]),
                            ir_version=conversion["ir_version"], no_loops=bool(conversion["no_loops"]))
    refused = found["refused"]
    if as_json:
        click.echo(json.dumps(found, indent=2))
    else:
        lines = backend_table({**found, "refused": None})
        plan = found["plan"]
        if plan["target_opset"] is not None and plan["target_opset"] != plan["source_opset"]:
            if conversion["target_opset"] is None:
                lines[0] += f"; opset {plan['source_opset']} -> {plan['target_opset']} (the opset convert --for " \
                            f"{found['spec']} picks)"
            else:
                lines[0] += f" (from opset {plan['source_opset']})"
        for line in lines if found["nodes"] or not refused else lines[:1]:
            click.echo(line)
        if plan["rewrites"]:
            click.echo("the conversion would also rewrite " + _rewrites_head(plan))
            for line in _group_lines(plan["groups"]):
                click.echo(line)
    if refused:
        raise _would_refuse(refused, as_json)


def _would_refuse(refused: str, as_json: bool) -> Exception:
    """The refusal ``convert`` would give: printed in full (text output; JSON holds it), then as the error line."""
    from lowerer.cli.exits import ERROR_PREFIX
    from lowerer.core.errors import ConversionError
    from lowerer.core.remedies import REFUSAL_LINE_MAX, refusal_line

    prefix = "would refuse: "
    short = refusal_line(refused, REFUSAL_LINE_MAX - len(ERROR_PREFIX) - len(prefix),
                         "in full: the JSON's refused" if as_json else "in full above")
    if short != refused and not as_json:
        click.echo(f"convert would refuse: {refused}")
    return ConversionError(prefix + short)


def _shape(dims: list[int | str | None] | None) -> str:
    if dims is None:
        return "rank unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _print_text(input_path: Path, info: dict[str, Any]) -> None:
    """The inspection as text: the model at a glance, the reachable opsets, the grouped rewrites of a dry run."""
    imports = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in info["opset_imports"].items())
    click.echo(f"model: {input_path} (IR version {info['ir_version']})")
    click.echo(f"opset imports: {imports or 'none'}")
    for title in ("inputs", "outputs"):
        values = info[title]
        click.echo(f"{title}: {len(values)}")
        rows = [(v["name"], v["type"], _shape(v["dims"])) for v in values]
        widths = [max((len(r[i]) for r in rows), default=0) for i in range(2)]
        for name, kind, shape in rows:
            click.echo(f"  {name.ljust(widths[0])}  {kind.ljust(widths[1])}  {shape}")
    nodes = info["nodes"]
    where = [f"{nodes[k]} {word}" for k, word in (("graph", "in the main graph"), ("subgraphs", "in subgraphs"),
                                                   ("functions", "in model-local functions")) if nodes[k]]
    detail = f" ({', '.join(where)})" if nodes["subgraphs"] or nodes["functions"] else ""
    click.echo(f"nodes: {nodes['total']}{detail}")
    if info["functions"]:
        click.echo(f"model-local functions: {', '.join(info['functions'])}")
    ops = info["ops"]
    if ops:
        click.echo(f"ops: {len(ops)} distinct, by count:")
        for line in _wrapped([f"{op} {count}" for op, count in ops.items()]):
            click.echo(f"  {line}")
    if "reachable_opsets" in info:
        r = info["reachable_opsets"]
        click.echo(f"converts to opsets {r['lowest']} .. {r['highest']}")
        for key, word in (("lowest_limit", "lowest"), ("highest_limit", "highest")):
            click.echo(f"  {word}: {_limit_line(r[key])}")
    plan = info.get("plan")
    if plan is not None and not plan["refused"]:
        if plan["rewrites"]:
            click.echo("would rewrite " + _rewrites_head(plan))
            for line in _group_lines(plan["groups"]):
                click.echo(line)
        else:
            click.echo("would rewrite no node" + _target_words(plan))


def _wrapped(items: list[str], width: int = 100) -> list[str]:
    """``items`` joined with commas into lines of at most ``width`` characters (an item is never split)."""
    lines: list[str] = []
    line = ""
    for k, item in enumerate(items):
        piece = item + ("," if k < len(items) - 1 else "")
        if line and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    return [*lines, line] if line else lines


def _target_words(plan: dict[str, Any]) -> str:
    target, source = plan["target_opset"], plan["source_opset"]
    return "" if target is None or target == source else f" (opset {source} -> {target})"


def _rewrites_head(plan: dict[str, Any]) -> str:
    """``12 node(s) (opset 23 -> 17), 8 by expanding a function body, in 3 groups (op, rewrite):``."""
    rewrites = plan["rewrites"]
    expanded = sum(1 for r in rewrites if r["rule"] == "function-expansion")
    by_body = f", {expanded} by expanding a function body" if expanded else ""
    groups = len(plan["groups"])
    return (f"{len(rewrites)} node(s){_target_words(plan)}{by_body}, in {groups} group{'s' if groups != 1 else ''} "
            "(op, rewrite):")


#: Ops a shortened list of emitted ops always names (a loop or branch decides what the rewrite costs).
_CONTROL_FLOW = ("Loop", "Scan", "If")


def _emitted(ops: list[str]) -> str:
    """``ops`` joined, or the first five, ``...``, and every control-flow op after them (``+ ... + Loop (8 ops)``)."""
    if len(ops) <= 6:
        return " + ".join(ops)
    kept = [op for op in ops[5:] if op in _CONTROL_FLOW]
    return " + ".join([*ops[:5], "...", *kept]) + f" ({len(ops)} ops)"


def _group_lines(groups: list[dict[str, Any]]) -> list[str]:
    """One line per group of rewrites: count, op-version, how, what it becomes; with -v the nodes of each."""
    rows = [(str(g["count"]), f"{g['op_type']}-{g['from_version']}", g["how"], _emitted(g["emitted"])) for g in groups]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    detailed = verbosity() >= 1
    lines = []
    for g, (count, op, how, emitted) in zip(groups, rows, strict=True):
        lines.append(f"  {count.rjust(widths[0])} x {op.ljust(widths[1])}  {how.ljust(widths[2])}  -> {emitted}")
        if detailed:
            lines.append(f"  {' ' * widths[0]}   nodes: {', '.join(g['nodes'])}")
    return lines


def _limit_line(found: dict[str, Any] | None) -> str:
    """What limits one end of the reach: the node and its refusal, or that no opset is left to try."""
    if found is None:
        return "every opset lowerer knows in that direction"
    if found["node"] is None:
        return f"opset {found['opset']} is refused: {found['refusal']}"
    return f"limited by node {found['node']} ({found['op_type']}-{found['version']}, in {found['scope']}), " \
           f"refused at opset {found['opset']}: {found['refusal']}"
