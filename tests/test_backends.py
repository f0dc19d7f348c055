"""The backend seam: a compiled schedule is plain data that pickles, a second backend runs every
sample through it with the same bits, and a pass that breaks the graph is named."""

from __future__ import annotations

import glob
import os
import pickle

import numpy as np
import pytest

import gradir
from gradir.backends.base import BACKENDS
from gradir.transforms.passes.pipeline import PASSES, register_pass
from gradir.cli.run import demo_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*.gir")))


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_the_schedule_pickles(path):
    plan = gradir.compile(path).plan
    again = pickle.loads(pickle.dumps(plan))
    assert again.describe() == plan.describe()
    assert [s.op for s in again.steps] == [s.op for s in plan.steps]
    assert [s.kernel.name for s in again.steps] == [s.kernel.name for s in plan.steps]


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_the_reference_backend_gives_the_same_bits(path):
    g = gradir.load(path)
    feeds = demo_inputs(g, seed=3)
    ref = gradir.compile(g, backend="reference").run(feeds)
    for threads in (1, 2):
        got = gradir.compile(g, threads=threads).run(feeds)
        assert list(got) == list(ref)
        for k in ref:
            assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape
            assert got[k].tobytes() == ref[k].tobytes(), (path, k, threads)


def test_backends_are_named_and_checked():
    assert {"cpu", "reference"} <= set(BACKENDS)
    exe = gradir.compile("input t0 : Float32 [2]\nt1 = Relu(t0)\noutput t1\n", backend="reference")
    np.testing.assert_array_equal(exe.run({"t0": np.array([-1, 2], np.float32)})["t1"], [0, 2])
    with pytest.raises(gradir.ArgumentError, match="unknown backend 'gpu'; the backends are cpu, reference"):
        gradir.compile("input t0 : Float32 [2]\noutput t0\n", backend="gpu")


def test_a_pass_that_breaks_the_graph_is_named(monkeypatch):
    @register_pass("drop-first-op", "a broken pass (test only)")
    def drop(p):
        p.ops = p.ops[1:]
        return "dropped one op"
    try:
        with pytest.raises(gradir.CompileError, match="the compiler pass 'drop-first-op' left an invalid graph: "
                                                      "op 0 \\(Exp\\) reads t1 before any op defines it"):
            gradir.compile("input t0 : Float32 [2]\nt1 = Relu(t0)\nt2 = Exp(t1)\noutput t2\n",
                           passes=["cse", "drop-first-op"])
    finally:
        del PASSES["drop-first-op"]


def test_a_graph_changed_after_validation_is_validated_again() -> None:
    g = gradir.parse("input t0 : Float32 [3]\nt1 = Neg(t0) : Float32 [3]\noutput t1\n")
    assert g.validated
    bad = gradir.OPS["Relu"](["t2"], ["t9"])  # t9 is defined nowhere
    g.ops.append(bad)
    g.outputs = ["t2"]
    assert not g.validated
    with pytest.raises(gradir.VerifyError, match="t9"):
        gradir.compile(g)
    g.ops[-1] = gradir.OPS["Relu"](["t2"], ["t1"])
    assert gradir.compile(g).run({"t0": np.ones(3, np.float32)})["t2"].tolist() == [0, 0, 0]
    assert g.validated


def test_kernels_are_registered_per_backend() -> None:
    """A backend names its kernel table; the plan's steps call that table's kernels, and an op without
    a kernel there is a compile error for that backend only."""
    from gradir.backends.cpu.kernels import TABLES, kernel
    from gradir.backends.reference.backend import ReferenceExecutable
    calls = []

    @kernel("Neg", backend="test-negonly")
    def neg(x, out=None):  # type: ignore[no-untyped-def]
        calls.append(x.shape)
        return np.negative(x, out=out)

    class NegOnly:
        name = "test-negonly"
        kernels = "test-negonly"

        def lower(self, graph, program, plan, threads):  # type: ignore[no-untyped-def]
            return ReferenceExecutable(graph, program, plan, 1)

    BACKENDS["test-negonly"] = NegOnly()
    try:
        exe = gradir.compile("input t0 : Float32 [2]\nt1 = Neg(t0) : Float32 [2]\noutput t1\n", backend="test-negonly")
        assert exe.run({"t0": np.array([1, -2], np.float32)})["t1"].tolist() == [-1, 2]
        assert calls == [(2,)]
        assert pickle.loads(pickle.dumps(exe.plan)).steps[0].kernel.fn is neg
        with pytest.raises(gradir.GradirError, match="op 'Relu' has no kernel yet"):
            gradir.compile("input t0 : Float32 [2]\nt1 = Relu(t0) : Float32 [2]\noutput t1\n", backend="test-negonly")
        gradir.compile("input t0 : Float32 [2]\nt1 = Relu(t0) : Float32 [2]\noutput t1\n")  # cpu has it
    finally:
        del BACKENDS["test-negonly"]
        del TABLES["test-negonly"]
