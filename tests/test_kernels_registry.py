"""The kernel tables (gradir/backends/cpu/kernels/__init__.py): keyed by op class, generated kernels for ops with
a formula, and the seam the compiler's middle goes through instead of importing the kernels
(gradir/backends/base.py: ``kernel_info``, ``fusion``)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import gradir
from gradir.backends import base as backends
from gradir.ir.op import OPS
from gradir.backends.cpu.kernels import KERNELS, TABLES, KernelInfo, get_kernel, kernel
from gradir.ops import ElementwiseOp, Operand
from gradir.ops.fused import FusedElementwiseOp

ROOT = Path(__file__).resolve().parent.parent / "gradir"
MIDDLE = [str(p.relative_to(ROOT)) for d in ("transforms", "autodiff") for p in sorted((ROOT / d).rglob("*.py"))]


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (function-level imports too), made absolute."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    package = list(rel.parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


@pytest.mark.parametrize("name", MIDDLE)
def test_the_middle_does_not_import_the_kernels(name):
    """Passes, the schedule and the cost model ask the backend (``gradir.backends.base``) what its
    kernels can do; an import of ``gradir.backends.cpu.kernels`` there (even inside a function) fails here."""
    bad = sorted(m for m in _imported(ROOT / name) if m == "gradir.backends.cpu.kernels" or m.startswith("gradir.backends.cpu.kernels."))
    assert not bad, f"gradir/{name} imports {bad}: ask the backend (gradir.backends.base.kernel_info / fusion)"


def test_the_import_check_sees_a_kernel_import():
    p = ROOT / "transforms" / "passes" / "constfold.py"
    assert "gradir.backends.cpu.kernels" not in _imported(p)
    assert "gradir.backends.cpu.kernels" in _imported(ROOT / "backends" / "reference" / "backend.py")


def test_tables_are_keyed_by_op_class():
    relu = OPS["Relu"]
    info = KERNELS[relu]
    assert info.op is relu and info.name == "Relu"
    assert KERNELS[relu(["t1"], ["t0"])] is info  # an op instance
    assert KERNELS["Relu"] is info and get_kernel("Relu") is info  # the deprecated alias
    assert get_kernel(FusedElementwiseOp).op is FusedElementwiseOp  # not in OPS, still a class key
    assert all(isinstance(k, type) for k in KERNELS)
    assert TABLES is backends.TABLES and backends.kernel_info("cpu", relu) is info
    assert get_kernel(OPS["Softmax"], backend="no-such-backend") is None
    with pytest.raises(ValueError, match="registered twice"):
        kernel(relu)(lambda x, out=None: x)


def test_a_deleted_kernel_is_not_generated_again(monkeypatch):
    """Deleting an op's kernel means it has none (a formula does not bring one back) until one is
    set again."""
    exp = OPS["Exp"]
    monkeypatch.delitem(KERNELS, exp)
    assert exp not in KERNELS and get_kernel(exp) is None
    monkeypatch.setitem(KERNELS, exp, KernelInfo("Exp", np.exp))
    assert KERNELS[exp].fn is np.exp


def test_a_backend_without_fused_loops_gets_no_fusion_and_its_own_kernels():
    """What a backend can do is asked of it: ``fusion()`` None means the fuse-elementwise pass
    leaves every op alone; its kernel table says which ops run."""
    from gradir.backends.reference.backend import ReferenceExecutable

    class Plain:
        name = "test-plain"
        kernels = "cpu"

        def fusion(self):  # type: ignore[no-untyped-def]
            return None

        def lower(self, graph, program, plan, threads):  # type: ignore[no-untyped-def]
            return ReferenceExecutable(graph, program, plan, 1)

    text = "input t0 : Float32 [128, 256]\nt1 = Neg(t0)\nt2 = Add(t1, t0)\nt3 = Mul(t2, t1)\noutput t3\n"
    backends.BACKENDS["test-plain"] = Plain()
    try:
        exe = gradir.compile(text, backend="test-plain")
        assert not any(isinstance(st.op, FusedElementwiseOp) for st in exe.plan.steps)
        assert dict(exe.plan.pass_log)["fuse-elementwise"] == "nothing to fuse: the backend has no fused loops"
        x = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)
        assert exe.run({"t0": x})["t3"].tobytes() == gradir.compile(text).run({"t0": x})["t3"].tobytes()
    finally:
        del backends.BACKENDS["test-plain"]


def test_constant_folding_runs_a_generated_kernel():
    class CubeOp(ElementwiseOp):
        """x^3 (a test op)."""

        OPERANDS = (Operand("X"),)
        FORMULA = "X * X * X"

    try:
        exe = gradir.compile("t0 = Constant(value=[1.0, 2.0]) : Float32 [2]\nt1 = Cube(t0)\noutput t1\n")
        assert [op.op_name for op in exe.program.ops] == ["Constant"]
        assert exe.run({})["t1"].tolist() == [1.0, 8.0]
        assert get_kernel(CubeOp).generated
    finally:
        OPS.pop("Cube", None)
