"""What would work instead: the remedy every refusal ends with.

A refusal says why lowerer cannot convert something and then what would work: the opset closest to
the one asked for that the node converts to (computed by the step engine, which tries the node alone
at each opset in between), type or shape information and how to get it, a static export, an option
that changes the outcome. The engine appends the opset to every refusal of a node
(:func:`with_reach`); refusals that know a more specific remedy name it themselves, with the phrases
kept here so that the same advice reads the same everywhere.
"""

from __future__ import annotations

import re

__all__ = [
    "ADD_SHAPES",
    "ADD_SHAPES_STATIC",
    "ADD_TYPES",
    "ALLOW_UNVERIFIED",
    "FALLBACK",
    "FOLD_FIRST",
    "MAKE_CONSTANT",
    "MAKE_CONSTANT_STATIC",
    "REACHED",
    "REMEDY",
    "ends_with_remedy",
    "for_static_inputs",
    "generated_shapes_remedy",
    "inputs_static",
    "last_clause",
    "reach_clause",
    "with_reach",
]

#: How to give lowerer a value's type: onnx's own inference, or the model from before onnxruntime fused it.
ADD_TYPES = ("add type information (value_info) for it: onnx.shape_inference.infer_shapes(model) states "
             "what onnx can infer, and a model saved by onnxruntime's optimizer (com.microsoft ops onnx "
             "cannot infer) converts from the model it was optimized from")
#: How to give lowerer a value's shape: static dims, which its shape computations then fold.
ADD_SHAPES = ("add shape information (value_info) for it, or make the input shapes static (export with "
              "static shapes, or python -m onnxruntime.tools.make_dynamic_shape_fixed)")
#: How to make a run-time value a constant: static input shapes fold the shape computations it comes from.
MAKE_CONSTANT = ("make it a constant: export with static input shapes (or python -m "
                 "onnxruntime.tools.make_dynamic_shape_fixed) so that the shape computation it comes from folds")
#: :data:`ADD_SHAPES` for a model whose input shapes are static already.
#: Folding the model's constants first: what makes sizes computed from static input shapes known.
FOLD_FIRST = ("fold the model's constants first (onnxscript.optimizer.optimize(model), or onnxsim, before lowerer: "
              "--optimize runs after)")
ADD_SHAPES_STATIC = ("the model's input shapes are static already, and onnx's shape inference does not carry them to "
                     f"this value: {FOLD_FIRST}, or add shape information (value_info) for it")
#: :data:`MAKE_CONSTANT` for a model whose input shapes are static already.
MAKE_CONSTANT_STATIC = ("it is not a constant although the model's input shapes are static (it is computed from the "
                        f"input data, or by ops lowerer does not fold: {FOLD_FIRST})")
#: What keeps a node a backend profile names but no exact form replaces (``--for``).
FALLBACK = "--allow-fallback (API: allow_fallback=True) keeps it for onnxruntime's fallback"

#: What lets a whole-model check that cannot run pass: when nothing about the inputs would make it run.
ALLOW_UNVERIFIED = "allow that with --allow-unverified (API: allow_unverified=True)"


def generated_shapes_remedy(inputs: dict[str, tuple[int | str, ...]]) -> str:
    """The remedy for a model that ran on none of the generated inputs, whose dynamic dims were generated.

    ``inputs``: each input whose dims lowerer bound (to 1, then 2), with its dims (a str: a dynamic
    dim's name). The sizes it needs are the model's: ``--input-shapes`` gives them, ``--load-inputs``
    gives real inputs.
    """
    shown = [f"{name}:{'x'.join(str(d) for d in dims)}" for name, dims in list(inputs.items())[:2]]
    example = " ".join(f"--input-shapes {s}" for s in shown) + (" ..." if len(inputs) > 2 else "")
    return (f"its dynamic dims were generated as 1, then 2: give sizes it takes with {example} (names replaced "
            "by sizes; API: ModelCheckOptions.input_shapes) or real inputs with --load-inputs IN.npz")


#: Phrasings of a remedy (searched for in a message's last clause, case-insensitive).
REMEDY = re.compile(
    r"(lowest|highest) opset (this node can be taken to|that works|for this node) is \d+"
    r"|target(ing)? opset (>=|<=|\d)|target (>=|<=) \d|choose a target opset|keep (the model at |an )?opset"
    r"|re-export|re-quantize|export with|static (input )?shapes|--[a-z][a-z-]+"
    r"|add (type|shape) information|value_info|make_dynamic_shape_fixed"
    r"|inline the function|give (the node |literal )|please report it|convert(s)? from the model",
    re.IGNORECASE)

#: The opset :func:`reach_clause` names (group 1).
REACHED = re.compile(r"(?:lowest|highest) opset this node can be taken to is (\d+)")


def for_static_inputs(message: str) -> str:
    """``message`` without advice to make the input shapes static, for a model whose input shapes are static."""
    return message.replace(ADD_SHAPES, ADD_SHAPES_STATIC).replace(MAKE_CONSTANT, MAKE_CONSTANT_STATIC)


def inputs_static(graph: object) -> bool:
    """Whether every input of ``graph`` (an ``onnx.GraphProto``) is a tensor whose dims are all known numbers."""
    for value in getattr(graph, "input", ()):
        tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
        if tensor is None or not tensor.HasField("shape"):
            return False
        if any(not d.HasField("dim_value") for d in tensor.shape.dim):
            return False
    return True


def last_clause(message: str) -> str:
    """The text after the last ``"; "`` of ``message`` (the whole message when it has none)."""
    return message.rsplit("; ", 1)[-1]


def ends_with_remedy(message: str) -> bool:
    """Whether the last clause of ``message`` says what would work (see :data:`REMEDY`)."""
    return REMEDY.search(last_clause(message)) is not None


def reach_clause(source: int, target: int, reached: int, *, how: bool = True) -> str:
    """The remedy naming the opset closest to ``target`` that a node at ``source`` converts to.

    Args:
        source: the opset the node is at.
        target: the opset asked for.
        reached: the closest opset to ``target`` (between ``source`` and ``target``, ``source``
            itself when no other) that the node converts to.
        how: when ``reached`` is ``source``, also say how to get further (a re-export).
    """
    down = target < source
    clause = f"the {'lowest' if down else 'highest'} opset this node can be taken to is {reached}"
    if reached == source and how:
        clause += f" (its own: re-export the model at opset {target} from its framework to get there)"
    return clause


def with_reach(message: str, source: int, target: int, reached: int) -> str:
    """``message`` ending with :func:`reach_clause`, unless its own remedy already names ``reached``."""
    own = ends_with_remedy(message)
    clause = reach_clause(source, target, reached, how=not own)
    if clause.split(" (", 1)[0] in message:
        return message
    last = last_clause(message)
    if own and re.search(rf"\b{reached}\b", last) and "opset" in last:
        return message
    return f"{message}; {clause}"


#: The longest refusal line a command prints (``lowerer: error:`` included): the full text is in the report
#: (``--report``) and in ``lowerer inspect``.
REFUSAL_LINE_MAX = 200
#: Where a shortened refusal's full text is.
IN_FULL = "in full: --report, inspect"
_MORE_NODES = re.compile(r" \(and (\d+) more (nodes?) that cannot be converted: [^()]*\)$")
#: The room a shortened line keeps for the reason's start before the remedy's (half of it at least, or none).
_AT_LEAST = 30
#: An option a remedy names, with its number (``--target-opset 15``, ``--fold-dequantize``).
_OPTION = re.compile(r"--[a-z][a-z-]*(?: \d+)?")
#: :func:`reach_clause`'s words, and their short form's (group 1: lowest/highest, group 2: the opset).
_SHORT_REACH = re.compile(r"the (lowest|highest) opset (?:this node can be taken to|for this node) is (\d+)")
#: The main graph's scope in a node's label (the short line leaves it out).
_IN_GRAPH = re.compile(r"\(([A-Za-z0-9_]+-\d+), in graph\)")


def _clauses(text: str) -> list[str]:
    """``text`` split at ``"; "`` outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0 and text.startswith("; ", i):
            parts.append(text[start:i])
            start = i + 2
    parts.append(text[start:])
    return parts


def _without_parentheticals(text: str) -> str:
    """``text`` without its parenthesized asides (nested ones included)."""
    out, depth = [], 0
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")" and depth:
            depth -= 1
        elif depth == 0:
            out.append(c)
    return re.sub(r"\s+([,;:])", r"\1", re.sub(r" {2,}", " ", "".join(out))).strip()


def _cut(text: str, room: int) -> str:
    """``text`` in at most ``room`` characters, cut at a space (never mid-word), ``…`` marking the cut."""
    if len(text) <= room:
        return text
    head = text[:max(room - 1, 0)]
    cut = head.rsplit(" ", 1)[0] if " " in head else ""
    return cut.rstrip(",;: ") + "…" if cut else ""


def refusal_line(message: str, room: int, pointer: str = IN_FULL) -> str:
    """A refusal ``message`` as the line a command prints, in at most ``room`` characters.

    A message that fits is kept whole. Otherwise: the node, its op and versions (the text before the
    first ``": "``), the first clause of the reason without its asides, the remedy (the last clause,
    see :func:`ends_with_remedy`, without its asides), how many more nodes refuse, and where the full
    text is (``pointer``); a reason or remedy that still does not fit is cut at a space.
    """
    if len(message) <= room:
        return message
    more_match = _MORE_NODES.search(message)
    body = message[:more_match.start()] if more_match else message
    more = f"; {more_match.group(1)} more {more_match.group(2)} refused" if more_match else ""
    head, _, reason = body.partition(": ") if body.startswith("node ") else ("", "", body)
    clauses = _clauses(reason)
    first = _without_parentheticals(clauses[0])
    lead = _IN_GRAPH.sub(r"(\1)", head) + ": " if head else ""
    tail = f"{more} ({pointer})" if pointer else more
    free = room - len(lead) - len(tail)
    remedy = _remedy(clauses[1:], free - _AT_LEAST // 2 - 2)
    if len(first) + len(remedy) + 2 > free:  # the remedy whole where it fits, the reason's start in the rest
        if len(remedy) + 2 > free:  # a remedy that fits stays whole; the reason's start takes what is left
            options = list(dict.fromkeys(_OPTION.findall(remedy)))
            # the options it names, at least, whole; else the remedy's start beside the reason's
            remedy = f"try {' or '.join(options)}" if options else _cut(remedy, free - min(len(first), _AT_LEAST) - 2)
        left = free - (len(remedy) + 2 if remedy else 0)
        first = _cut(first, left) if left >= _AT_LEAST // 2 else ""
    line = lead + "; ".join(p for p in (first, remedy) if p) + tail
    return line if len(line) <= room else _cut(line, room)


def _remedy(clauses: list[str], room: int) -> str:
    """The remedy of a shortened line: the last one or two clauses that say what would work, without asides.

    Both where they fit in ``room`` (an option and the opset the node reaches, say); else the one that
    names an option (``--fold-dequantize``), else the last.
    """
    found = [_SHORT_REACH.sub(r"\1 opset it converts to: \2", _without_parentheticals(c))
             for c in clauses[-2:] if REMEDY.search(c)]
    if not found or not REMEDY.search(clauses[-1]):
        return ""
    joined = "; ".join(found)
    if len(joined) <= room or len(found) == 1:
        return joined
    return next((c for c in found if "--" in c), found[-1])
