"""User ops go through the suite too: ``GRADIR_OPS=cube.py pytest tests/conformance`` checks every op the
file defines by every concern, and names a place the file leaves out."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from .conftest import OPS_ENV, ROOT, load_user_ops

# A complete user op and one without a kernel, with today's places: class, kernel, gradient rule (the
# shared design replaces the last two with FORMULA and VJP alone).
USER_OPS = textwrap.dedent('''
    """Two user ops for the conformance suite's own test."""
    import numpy as np

    from gradir.autodiff import rule
    from gradir.kernels import kernel
    from gradir.ops.common import UnaryOp


    class ConformanceCubeOp(UnaryOp):
        """x ** 3, written as a user would."""

        ELEMENTWISE = "same"
        FORMULA = "X * X * X"
        SHARDING = "elementwise"


    @kernel("ConformanceCube", inplace=True)
    def _cube(x, out=None):
        return np.multiply(x * x, x, out=out)


    @rule("ConformanceCube")
    def _cube_grad(e, op, cts, need):
        x = op.operands[0]
        return [e.Scale(e.Mul(e.Mul(cts[0], x), x), factor=3.0)]


    class ConformanceNoKernelOp(UnaryOp):
        """x ** 2, but its file forgets the kernel."""

        ELEMENTWISE = "same"
        FORMULA = "X * X"
        SHARDING = "elementwise"


    @rule("ConformanceNoKernel")
    def _square_grad(e, op, cts, need):
        x = op.operands[0]
        return [e.Scale(e.Mul(cts[0], x), factor=2.0)]
''')


def test_gradir_ops_runs_the_suite_over_user_ops(tmp_path):
    path = tmp_path / "cube.py"
    path.write_text(USER_OPS, encoding="utf-8")
    env = dict(os.environ, **{OPS_ENV: str(path)}, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-m", "pytest", os.path.join(ROOT, "tests", "conformance", "test_ops.py"),
                          "-q", "-p", "no:cacheprovider", "-k", "ConformanceCube or ConformanceNoKernel", "-rf"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    # the op without a kernel fails its kernel concern (both dtypes, both paths), naming itself and it, and
    # so every concern that runs it (gradient, fusion, sharding, ONNX), each named
    assert len(failed) == 10 and all("ConformanceNoKernel" in line for line in failed), out
    assert "ConformanceNoKernel: kernel: no kernel is registered for it" in out
    for what in ("gradient", "fusion", "sharding", "onnx"):
        assert f"ConformanceNoKernel: {what}: CompileError: " in out, what
    # the complete op passes every concern: type rule, kernel (4), gradient, fusion (2), sharding (2), onnx, docs;
    # the other its type rule and docs
    passed = int(out.rsplit(" passed", 1)[0].rsplit(" ", 1)[-1])
    assert passed == 12 + 2, out


def test_without_gradir_ops_there_are_no_user_ops(user_ops):
    assert user_ops == [] or os.environ.get(OPS_ENV)


def test_load_user_ops_reports_what_a_file_registered(tmp_path):
    path = tmp_path / "one.py"
    path.write_text("from gradir.ops.common import UnaryOp\n\n\nclass ConformanceLoadedOp(UnaryOp):\n"
                    '    """x."""\n    FORMULA = "X"\n', encoding="utf-8")
    from gradir import OPS
    try:
        assert load_user_ops(str(path)) == ["ConformanceLoaded"]
    finally:
        OPS.pop("ConformanceLoaded", None)
