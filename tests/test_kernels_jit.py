"""The compiled kernels (gradir.kernels.jit): the switch, and agreement with the NumPy path."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from gradir.kernels import KERNELS, jit

from test_kernels_activation import ALL_OPS, ALPHA_DEFAULTS, EDGE, EPS32, _call


def test_compiled_kernels_are_available_and_on_by_default() -> None:
    # numba is a core dependency: a missing or broken install must fail loudly here
    assert jit.available(), jit.why_unavailable()
    assert jit.enabled()
    assert jit.load("act") is not None


def test_switch_off_from_python_and_environment() -> None:
    with jit.disabled():
        assert not jit.enabled() and jit.load("act") is None
    assert jit.enabled()
    code = "from gradir.kernels import jit; print(jit.enabled(), jit.load('act') is None)"
    env = {**os.environ, "GRADIR_JIT": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("name", ALL_OPS)
def test_compiled_and_numpy_float32_agree(name: str) -> None:
    """The two Float32 implementations compute the same formulas, a few ulps apart (the
    compiled one fuses multiply-adds and has its own exp2)."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(3000) * 3, np.array(EDGE), rng.uniform(-20, 20, 500)])
    x = x.astype(np.float32).reshape(-1, 7)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    attrs: dict[str, Any] = {"alpha": ALPHA_DEFAULTS[name]} if name in ALPHA_DEFAULTS else {}
    fast = _call(name, dy, x, **attrs)
    with jit.disabled():
        slow = _call(name, dy, x, **attrs)
    assert fast.dtype == slow.dtype == np.float32
    scale = np.abs(slow.astype(np.float64)) + np.abs(dy) + (np.abs(x) if "Softmax" in name else 0)
    err = np.abs(fast.astype(np.float64) - slow)
    assert np.all(err <= 8 * EPS32 * scale + 1e-30), float(np.max(err / (scale + 1e-300)) / EPS32)


def test_every_activation_op_has_a_compiled_float32_kernel() -> None:
    """The compiled path really runs: each op's kernel calls its _jit_act function."""
    mod = jit.load("act")
    called: list[str] = []
    originals = {}
    for name in dir(mod):
        fn = getattr(mod, name)
        if hasattr(fn, "py_func") and not name.startswith("_") and getattr(fn, "__module__", "") == mod.__name__:
            originals[name] = fn

    class Spy:
        def __init__(self, name: str, fn: Any) -> None:
            self.name, self.fn = name, fn

        def __call__(self, *args: Any) -> Any:
            called.append(self.name)
            return self.fn(*args)

    try:
        for name, fn in originals.items():
            setattr(mod, name, Spy(name, fn))
        x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
        for op in ALL_OPS:
            before = len(called)
            attrs: dict[str, Any] = {"alpha": ALPHA_DEFAULTS[op]} if op in ALPHA_DEFAULTS else {}
            _call(op, x, x, **attrs)
            if op not in ("Relu", "Tanh"):  # NumPy's own SIMD ufunc is already one pass
                assert len(called) > before, op
    finally:
        for name, fn in originals.items():
            setattr(mod, name, fn)
    assert set(originals) == set(called)
    assert all(KERNELS[op] for op in ALL_OPS)


def test_compile_builds_the_compiled_kernels_a_plan_uses() -> None:
    """gradir.compile warms every compiled kernel of the plan (for its dtype), so the first
    run does not pay for numba; kernels the plan does not use stay unbuilt."""
    code = """
import gradir
from gradir.kernels import jit
act = jit.load("act")
assert not act.gelu_grad.signatures and not act.sigmoid.signatures
gradir.compile("input t0 : Float32 [4, 8]\\ninput t1 : Float32 [4, 8]\\nt2 = GeluGrad(t0, t1)\\noutput t2\\n")
print(len(act.gelu_grad.signatures), len(act.sigmoid.signatures))
gradir.compile("input t0 : Float64 [4, 8]\\nt1 = Sigmoid(t0)\\noutput t1\\n")
print(len(act.sigmoid.signatures))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "0", "0"]
