"""The shipped onnxruntime kernel tables (lowerer.backends.kernel_tables) against the sources they came from.

Rows checked here were read in ``docs/OperatorKernels.md`` at the tags named (1.15 .. 1.24), or listed by
``get_all_opkernel_def()`` of the PyPI CPU wheel (1.25 ..); the last test compares the installed
onnxruntime's table (when one of its MAJOR.MINOR is shipped) with the kernels its binary registers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import resources

import pytest

from lowerer.backends.kernel_tables import KernelTable, kernel_table, nearest_table, shipped_releases

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
INT_MAX = 2**31 - 1


def _table(release: str) -> KernelTable:
    table = kernel_table(release)
    assert table is not None, release
    return table


def _from_wheel(table: KernelTable) -> bool:
    """Whether the table is a PyPI wheel's own registry (CPU only), not a release's kernel doc."""
    return table.source.startswith(f"onnxruntime {table.version}'s own kernel registry: ")


def test_releases_shipped_oldest_first() -> None:
    releases = shipped_releases()
    assert releases[:8] == ("1.15", "1.16", "1.17", "1.18", "1.19", "1.20", "1.21", "1.22")
    assert list(releases) == sorted(releases, key=lambda r: tuple(map(int, r.split("."))))
    assert shipped_releases("tensorrt") == ()


@pytest.mark.parametrize("release", shipped_releases())
def test_every_shipped_file_parses_and_cites_its_source(release: str) -> None:
    table = _table(release)
    assert table.runtime == "onnxruntime"
    assert table.version.startswith(release + ".")
    if _from_wheel(table):
        # the CPU wheel's registry: its file name and hash; the limits probed in that wheel
        v = re.escape(table.version)
        assert re.fullmatch(rf"onnxruntime {v}'s own kernel registry: get_all_opkernel_def\(\) of the PyPI wheel "
                            rf"onnxruntime=={v} \(onnxruntime-{v}-\S+\.whl, sha256 [0-9a-f]{{16}}\)", table.source)
        assert table.versioning_source == (f"probed in onnxruntime=={table.version}: the highest opset and IR "
                                           "version a one-node model opens at")
        assert table.max_opset is not None and table.max_ir is not None
        assert table.providers() == (CPU,)
        assert {"Reshape", "Add", "Conv", "MatMul"} <= table.ops(CPU)
        assert {"com.microsoft", "ai.onnx.ml"} <= set(table._rows[CPU])
        return
    # a tag, or (no tag could be had) the upstream release-branch commit whose VERSION_NUMBER is the version
    tag = f"docs/OperatorKernels.md @ v{table.version} (commit "
    branch = "docs/OperatorKernels.md @ commit "
    assert table.source.startswith("microsoft/onnxruntime "), table.source
    assert tag in table.source or (branch in table.source and f"VERSION_NUMBER {table.version}" in table.source)
    assert re.search(r"[0-9a-f]{40}", table.source)
    assert (table.max_opset is None) == (table.max_ir is None) == (table.versioning_source is None)
    assert {CPU, CUDA} <= set(table.providers())
    assert {"Reshape", "Add", "Conv", "MatMul"} <= table.ops(CPU) & table.ops(CUDA)
    for provider in table.providers():
        for op in table.ops(provider):
            for low, high, types in table.ranges(provider, op):
                assert low >= 1 and (high is None or high >= low)
                # NonMaxSuppression is registered with no type constraints (the doc leaves it out; see _UNDOCUMENTED)
                assert (types and all(types.values())) or op == "NonMaxSuppression"


def test_file_layout_shares_type_lists() -> None:
    name = "onnxruntime-1.15.json"
    data = json.loads(resources.files("lowerer.backends.kernels").joinpath(name).read_text(encoding="utf-8"))
    assert data["source"] == (
        "microsoft/onnxruntime docs/OperatorKernels.md @ v1.15.1 (commit baeece44ba075009c6bfe95891a8c1b3d4571cb3)"
    )
    row = data["providers"][CPU][""]["Hardmax"][0]
    assert row[:2] == [13, None]
    assert data["type_lists"][row[2]["T"]] == ["tensor(float)"]


def test_version_matrix_rows() -> None:
    # docs/reference/compatibility.md @ gh-pages: "| 1.15 | **1.14** | 19 | 3 | 8 |", "| 1.16 | ... | 19 | 3 | 9 |",
    # "| 1.20 | **1.16.1** | 21 | 4 | 10 |"; no row after 1.20 (docs/Versioning.md at the tags stops at 1.3.1)
    assert (_table("1.15").max_opset, _table("1.15").max_ir) == (19, 8)
    assert (_table("1.16").max_opset, _table("1.16").max_ir) == (19, 9)
    assert (_table("1.17").max_opset, _table("1.17").max_ir) == (20, 9)
    assert (_table("1.20").max_opset, _table("1.20").max_ir) == (21, 10)
    assert _table("1.22").max_opset is None and _table("1.22").versioning_source is None
    assert "compatibility.md @ gh-pages" in (_table("1.15").versioning_source or "")
    # probed in each PyPI wheel: 1.25.1 .. 1.31.1 open an opset-26 Identity model at IR 13 ("Current official
    # support for domain ai.onnx is till opset 26", "max supported IR version: 13"); 1.32.0 opset 28 at IR 14
    for release in ("1.25", "1.26", "1.27", "1.28", "1.29", "1.30", "1.31"):
        assert (_table(release).max_opset, _table(release).max_ir) == (26, 13), release
    assert (_table("1.32").max_opset, _table("1.32").max_ir) == (28, 14)


def test_reshape_cpu_15_vs_16() -> None:
    # v1.15.1: |Reshape|...|14+| , |||13| , |||[5, 12]| , |||[1, 4]|  (no row of its own for Reshape-19,
    # and the open 14+ row serves 14 only: onnxruntime 1.15.1 refuses Reshape-19); v1.16.3: |Reshape|...|19+| ...
    t15, t16 = _table("1.15"), _table("1.16.3")
    assert [r[:2] for r in t15.ranges(CPU, "Reshape")] == [(14, None), (13, 13), (5, 12), (1, 4)]
    assert [r[:2] for r in t16.ranges(CPU, "Reshape")] == [(19, None), (14, 18), (13, 13), (5, 12), (1, 4)]
    assert not any(low == 19 for low, _, _ in t15.ranges(CPU, "Reshape"))
    assert not t15.has_kernel(CPU, "Reshape", 19)  # VerifyVersion: an open row matches its start only
    assert t15.has_kernel(CPU, "Reshape", 14) and t15.has_kernel(CPU, "Reshape", 5)
    assert t16.has_kernel(CPU, "Reshape", 19)
    assert not t15.has_kernel(CPU, "Reshape", 0)
    types16 = t16.types(CPU, "Reshape", 19)
    assert types16 is not None and "tensor(float)" in types16["T"] and types16["shape"] == {"tensor(int64)"}


def test_hardmax_cpu_types() -> None:
    # every release: |Hardmax|...|13+|**T** = tensor(float)| , |||[11, 12]| , |||[1, 10]|, all tensor(float)
    for release in shipped_releases():
        table = _table(release)
        assert [r[:2] for r in table.ranges(CPU, "Hardmax")] == [(13, None), (11, 12), (1, 10)]
        assert table.types(CPU, "Hardmax", 13) == {"T": frozenset({"tensor(float)"})}
        assert table.types(CPU, "Hardmax", 1) == {"T": frozenset({"tensor(float)"})}
    assert _table("1.15").types(CPU, "Hardmax", 0) is None


def test_cuda_rows() -> None:
    # v1.15.1 CUDA: |Softmax|...|13+|**T** = tensor(bfloat16), tensor(double), tensor(float), tensor(float16)|
    t15 = _table("1.15")
    assert t15.types(CUDA, "Softmax", 13) == {
        "T": frozenset({"tensor(bfloat16)", "tensor(double)", "tensor(float)", "tensor(float16)"})
    }
    # CUDA has no Hardmax kernel (no row in any shipped doc); contrib ops sit in their own domain
    assert all(not _table(r).has_kernel(CUDA, "Hardmax", 13) for r in shipped_releases())
    assert "Gelu" in t15.ops(CUDA, "com.microsoft") and "Gelu" not in t15.ops(CUDA)
    assert t15.ops(CUDA, "no.such.domain") == frozenset()
    assert t15.ranges("NoSuchExecutionProvider", "Add") == ()


def test_release_lookup() -> None:
    assert kernel_table("1.15.1") is kernel_table("1.15")  # cached
    assert kernel_table("1.14") is None and kernel_table("2.0") is None
    assert kernel_table("1.15.0+cu118") is kernel_table("1.15")
    with pytest.raises(ValueError):
        kernel_table("fifteen")
    exact = nearest_table("1.16.1")
    assert exact is not None and exact[1] and exact[0].version == "1.16.3"
    newest = shipped_releases()[-1]
    later = nearest_table("9.0")
    assert later is not None and not later[1] and later[0] is kernel_table(newest)
    assert nearest_table("1.14.1") is None


def test_wheel_rows_as_registered() -> None:
    # get_all_opkernel_def of onnxruntime 1.25.1: Reshape 25+ (INT_MAX end), one kernel per range; LpNormalization
    # split at 22 (1.24's doc: 1+ alone); NonMaxSuppression registered with no type constraint, and kept so
    t25 = _table("1.25")
    assert [r[:2] for r in t25.ranges(CPU, "Reshape")][:3] == [(25, None), (24, 24), (23, 23)]
    assert [r[:2] for r in t25.ranges(CPU, "LpNormalization")] == [(22, None), (1, 21)]
    assert [r[:2] for r in _table("1.24").ranges(CPU, "LpNormalization")] == [(1, None)]
    assert list(t25.ranges(CPU, "NonMaxSuppression")) == [(11, None, {}), (10, 10, {})]
    assert "BitCast" in t25.ops(CPU) and "BitCast" not in _table("1.24").ops(CPU)
    # the registry's one row per type is merged into one row per range (the union per constraint)
    types = t25.types(CPU, "Abs", 13)
    assert types is not None and {"tensor(float)", "tensor(double)", "tensor(int8)"} <= types["T"]
    # 1.32 split the open rows at opset 28 (Cast 25-27 and 28+)
    assert [r[:2] for r in _table("1.32").ranges(CPU, "Cast")][:2] == [(28, None), (25, 27)]


# The child prints {"version": ..., "kernels": [[domain, op, low, high, {constraint: [types]}], ...]} for the
# CPU provider, every domain, one entry per registered kernel (a typed kernel is one entry per type).
_CHILD = r"""
import json
import onnxruntime
from onnxruntime.capi import _pybind_state as C
rows = [["" if k.domain == "ai.onnx" else k.domain, k.op_name, k.version_range[0], k.version_range[1],
         {n: list(v) for n, v in k.type_constraints.items()}]
        for k in C.get_all_opkernel_def() if k.provider == "CPUExecutionProvider"]
print(json.dumps({"version": onnxruntime.__version__, "kernels": rows}))
"""

_Key = tuple[str, str, int, int | None]


def _binary_rows() -> tuple[str, dict[_Key, dict[str, set[str]]]]:
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300)
    if proc.returncode < 0:
        pytest.skip(f"get_all_opkernel_def died by signal {-proc.returncode}")
    if proc.returncode != 0:
        pytest.skip(f"onnxruntime kernel listing unavailable: {proc.stderr[-300:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    rows: dict[_Key, dict[str, set[str]]] = {}
    for domain, op, low, high, types in data["kernels"]:
        row = rows.setdefault((domain, op, low, None if high >= INT_MAX else high), {})
        for name, allowed in types.items():
            row.setdefault(name, set()).update(allowed)
    return data["version"], rows


def test_installed_release_matches_its_table() -> None:
    """The installed release's table against its binary: CPU.

    A table read from the release's PyPI wheel (1.25 ..; the 1.32.0 installed here) is its registry: every
    domain, exactly, the untyped kernels included. A doc table (run with onnxruntime 1.22.1 and 1.24.4 put
    first on PYTHONPATH) is compared in the default domain: every doc row is a registered kernel of the same
    range with the same types per constraint, and every registered kernel is a doc row except those
    registered with no type constraint at all, which the doc generator leaves out (NonMaxSuppression 10 and
    11+, which the loader adds back).
    """
    pytest.importorskip("onnxruntime")
    version, binary = _binary_rows()
    table = kernel_table(version)
    if table is None:
        pytest.skip(f"no shipped kernel table for onnxruntime {version}")
    exact = _from_wheel(table)
    if exact:
        assert table.version == version, (table.version, version)
    domains = sorted(table._rows.get(CPU, {})) if exact else [""]
    if not exact:
        binary = {key: types for key, types in binary.items() if key[0] == ""}
    doc = {
        (domain, op, low, high): {name: set(allowed) for name, allowed in types.items()}
        for domain in domains
        for op in table.ops(CPU, domain)
        for low, high, types in table.ranges(CPU, op, domain)
    }
    untyped = set() if exact else {key for key, types in binary.items() if not types}
    assert set(doc) - untyped == set(binary) - untyped, (sorted(set(doc) - set(binary)),
                                                         sorted(set(binary) - set(doc)))
    differing = {key: (doc[key], binary[key]) for key in doc if key in binary and doc[key] != binary[key]}
    assert not differing, differing
