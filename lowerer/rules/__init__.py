"""The rule catalogue: one module per op family.

* :mod:`lowerer.rules.argmax`: ArgMax/ArgMin across versions 1, 11, 12, 13;
* :mod:`lowerer.rules.hardmax`: Hardmax/Softmax/LogSoftmax across versions 1, 11, 13;
* :mod:`lowerer.rules.hardmax_decomposition`: Hardmax → ArgMax + one-hot (``decompose=hardmax``);
* :mod:`lowerer.rules.global_max_pool`: GlobalMaxPool → ReduceMax (``decompose=globalmaxpool``).
"""

from __future__ import annotations

from lowerer.rules.argmax import ArgExtremumRule
from lowerer.rules.base import Emitter, Rule
from lowerer.rules.global_max_pool import GlobalMaxPoolDecomposition
from lowerer.rules.hardmax import CoercedAxisRule
from lowerer.rules.hardmax_decomposition import HardmaxDecomposition

__all__ = [
    "CONVERSION_RULES",
    "DECOMPOSITIONS",
    "ArgExtremumRule",
    "CoercedAxisRule",
    "Emitter",
    "GlobalMaxPoolDecomposition",
    "HardmaxDecomposition",
    "Rule",
    "rule_for",
]

#: Version-conversion rules; every op they list is owned by lowerer, never left to onnx's converter.
CONVERSION_RULES: tuple[Rule, ...] = (ArgExtremumRule(), CoercedAxisRule())

#: Decomposition rules by the name users pass to ``decompose``.
DECOMPOSITIONS: dict[str, Rule] = {
    "hardmax": HardmaxDecomposition(),
    "globalmaxpool": GlobalMaxPoolDecomposition(),
}

_BY_OP: dict[str, Rule] = {op: rule for rule in CONVERSION_RULES for op in rule.op_types}


def rule_for(op_type: str, decompose: frozenset[str]) -> Rule | None:
    """The rule that handles a default-domain ``op_type`` (decompositions first), or None."""
    for name in decompose:
        rule = DECOMPOSITIONS[name]
        if op_type in rule.op_types:
            return rule
    return _BY_OP.get(op_type)
