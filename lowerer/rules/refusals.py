"""Documented refusals: version steps whose meaning changed and that lowerer does not cross.

Each is a registry entry of kind ``refusal`` with the reason given to the user. Going down, the
engine still tries the op's function body where its schema has one. Steps with an exact form that
lowerer does not write yet say so and what would work; the others say why none exists.
"""

from __future__ import annotations

from lowerer.steps.registry import DOWN, REGISTRY, UP

__all__: list[str] = []

_OLD_OPSET = "only opset 1 has this form; take the model from or to an opset where both sides have the op's newer form"

for _op, _version, _why in (
    ("GRU", 3, "GRU-1's `direction` default was misspelled 'foward' and Y_h was required; lowerer has no adapter "
               f"for it yet: {_OLD_OPSET}"),
    ("GlobalLpPool", 2, f"`p` changed from float to int; lowerer has no adapter for it yet: {_OLD_OPSET}"),
    ("LpPool", 2, "`p` changed from float to int and kernel_shape became required (LpPool-1 without it had no "
                  f"defined window); lowerer has no adapter for it yet: {_OLD_OPSET}"),
    ("Pad", 2, "Pad-1's `paddings` layout contradicts its own example (the order of begins and ends is ambiguous), "
               "so no form is provably the same; re-export at opset >= 2"),
    ("Split", 2, f"Split-1 took lengths from an input or the attribute, with no default axis; {_OLD_OPSET}"),
    ("Tile", 6, "Tile-1 tiled one axis given at run time (input 2); lowerer has no adapter for it yet: "
                f"{_OLD_OPSET}"),
):
    for _direction in (DOWN, UP):
        REGISTRY.refusal(_op, _version, _direction, _why)

REGISTRY.refusal("GroupNormalization", 21, DOWN, "scale and bias are per channel at 21 and per group at 18, and "
                 "GroupNormalization-18 is deprecated (onnx.checker rejects it at opsets 18-20): the node is "
                 "expanded into its function body instead")
