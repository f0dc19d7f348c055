"""User ops go through the suite too: ``GRADIR_OPS=cube.py pytest tests/conformance`` checks every op the
file defines by every concern, and names a place the file leaves out."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from .conftest import OPS_ENV, ROOT, load_user_ops

# A complete user op, written as docs/extending.md says (its class is all of it), and one whose VJP is
# wrong (the derivative of X*X is 2 X dY, not X dY).
USER_OPS = textwrap.dedent('''
    """Two user ops for the conformance suite's own test."""
    from gradir.ops import Attr, CompositeOp, ElementwiseOp, Operand


    class ConformanceSwishOp(CompositeOp):
        """x * sigmoid(alpha x), a composite op as docs/extending.md writes one."""

        OPERANDS = (Operand("X"),)
        ATTRS = (Attr("alpha", "float", 1.0),)

        @staticmethod
        def decompose(b, X, *, alpha):
            return b.Mul(X, b.Sigmoid(b.Scale(X, factor=alpha)))


    class ConformanceCubeOp(ElementwiseOp):
        """x ** 3, written as a user would."""

        OPERANDS = (Operand("X"),)
        FORMULA = "X * X * X"
        VJP = {"X": "3 * dY * X * X"}


    class ConformanceBadGradOp(ElementwiseOp):
        """x ** 2, but its file gets the gradient wrong."""

        OPERANDS = (Operand("X"),)
        FORMULA = "X * X"
        VJP = {"X": "dY * X"}
''')


def test_gradir_ops_runs_the_suite_over_user_ops(tmp_path):
    path = tmp_path / "cube.py"
    path.write_text(USER_OPS, encoding="utf-8")
    env = dict(os.environ, **{OPS_ENV: str(path)}, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-m", "pytest", os.path.join(ROOT, "tests", "conformance", "test_ops.py"),
                          "-q", "-p", "no:cacheprovider", "-k", "ConformanceCube or ConformanceBadGrad or ConformanceSwish", "-rf"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    # the op with the wrong VJP fails its gradient concern, naming itself and the concern; nothing else fails
    # (its own generated backward op, ConformanceBadGradGrad, computes what its formula says)
    assert failed and all("ConformanceBadGrad" in line and "test_gradient" in line for line in failed), out
    assert "ConformanceBadGrad: gradient: " in out
    # every concern of the three ops and of the generated backward ops ran, and all but that one passed
    assert "ConformanceSwish" not in "".join(failed)
    passed = int(out.rsplit(" passed", 1)[0].rsplit(" ", 1)[-1])
    assert passed >= 4 * 8, out


def test_without_gradir_ops_there_are_no_user_ops(user_ops):
    assert user_ops == [] or os.environ.get(OPS_ENV)


def test_load_user_ops_reports_what_a_file_registered(tmp_path):
    path = tmp_path / "one.py"
    path.write_text("from gradir.ops import ElementwiseOp, Operand\n\n\nclass ConformanceLoadedOp(ElementwiseOp):\n"
                    '    """x."""\n    OPERANDS = (Operand("X"),)\n    FORMULA = "X"\n', encoding="utf-8")
    from gradir import OPS
    try:
        assert load_user_ops(str(path)) == ["ConformanceLoaded"]
    finally:
        OPS.pop("ConformanceLoaded", None)
