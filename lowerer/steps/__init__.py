"""Version steps: what changed at each boundary of every default-domain op, and how to cross it.

* :mod:`.changes`: the vocabulary (``Types``, ``AttrAdded``, ``AttrToInput`` ...);
* :mod:`.table`: every step of every op in ``onnx.defs``, classified;
* :mod:`.schemas`: schema facts (histories, diffs, allowed types).
"""
