"""The compiled kernels (gradir.backends.cpu.kernels.jit): the switch, and agreement with the NumPy path."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gradir.backends.cpu.kernels import KERNELS, jit

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
    code = "from gradir.backends.cpu.kernels import jit; print(jit.enabled(), jit.load('act') is None)"
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
from gradir.backends.cpu.kernels import jit
act = jit.load("act")
assert not act.gelu_grad.signatures and not act.sigmoid.signatures
gradir.compile("input t0 : Float32 [4, 8]\\ninput t1 : Float32 [4, 8]\\nt2 = GeluGrad(t0, t1)\\noutput t2\\n")
print(len(act.gelu_grad.signatures), len(act.sigmoid.signatures))
gradir.compile("input t0 : Float64 [4, 8]\\nt1 = Sigmoid(t0)\\noutput t1\\n")
print(len(act.sigmoid.signatures))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "0", "0"]


# -- numba's cache follows _jit_core.py ---------------------------------------------------------
def test_core_stamp_empties_a_stale_kernel_cache(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """numba keys its cache on a kernel's own file; jit stamps each module's cache with
    _jit_core.py's digest and empties it when the digest changes."""
    import importlib

    (tmp_path / "stampmod.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("stampmod")
    index = mod.twice._cache._cache_file
    assert mod.twice(3) == 6
    assert index._load_index()  # cached
    # beside numba's cache: the module's __pycache__, or NUMBA_CACHE_DIR's tree where that is set
    stamp = Path(mod.twice._cache._cache_path) / "stampmod.core-sha256"
    jit._check_core_stamp(mod)  # no stamp yet: the cache may predate it, so it is emptied
    assert not index._load_index() and stamp.read_text().strip() == jit.core_digest()
    mod.twice.recompile()
    assert index._load_index()
    jit._check_core_stamp(mod)  # same core: kept
    assert index._load_index()
    monkeypatch.setattr(jit, "core_digest", lambda: "0" * 64)
    jit._check_core_stamp(mod)  # core edited: emptied
    assert not index._load_index() and stamp.read_text().strip() == "0" * 64


def test_eager_kernels_compile_after_the_stamp_check(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that compiles its variants up front (``compile_eager``, as _jit_goto) is
    compiled after the stamp check: compiled at import, its fresh cache would be emptied by the
    check on a new machine, and the next process would compile it all again (10 s for
    _jit_goto)."""
    import importlib

    (tmp_path / "_jit_eagermod.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n\n"
        "def compile_eager():\n    twice.compile('float64(float64)')\n    twice.disable_compile()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from types import SimpleNamespace
    monkeypatch.setattr(jit, "importlib", SimpleNamespace(import_module=lambda name: importlib.import_module(
        "_jit_eagermod" if name.endswith("_jit_eagermod") else name)))
    monkeypatch.delitem(jit._modules, "eagermod", raising=False)
    mod = jit._import("eagermod")
    assert mod is not None and mod.twice(2.0) == 4.0
    index = mod.twice._cache._cache_file
    assert index._load_index()  # the variant compiled after the check is still cached
    assert len(mod.twice.signatures) == 1
    assert mod.twice(3) == 6 and len(mod.twice.signatures) == 1  # an int takes the one variant


def test_disabled_blocks_overlapping_across_threads() -> None:
    import threading

    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def a() -> None:
        with jit.disabled():
            a_in.set()
            b_in.wait()
        a_out.set()

    def b() -> None:
        a_in.wait()
        with jit.disabled():
            b_in.set()
            a_out.wait()
            seen.append(jit.enabled())  # A has left, B is still inside

    ts = [threading.Thread(target=f) for f in (a, b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert seen == [False]
    assert jit.enabled()


# -- read-only arrays ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["GeluGrad", "SoftmaxGrad_13", "LeakyRelu"])
def test_read_only_operands_take_the_compiled_kernel_as_is(name: str) -> None:
    """Read-only operands run the same compiled code (no new numba signature mid-run)."""
    act = jit.load("act")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 9)).astype(np.float32)
    dy = rng.standard_normal((6, 9)).astype(np.float32)
    want = _call(name, dy, x)
    dispatchers = [getattr(act, n) for n in dir(act) if hasattr(getattr(act, n), "signatures")]
    before = {d: len(d.signatures) for d in dispatchers}
    ro = []
    for a in (dy, x):
        r = np.frombuffer(a.tobytes(), np.float32).reshape(a.shape)
        assert not r.flags.writeable
        ro.append(r)
    got = _call(name, *ro)
    np.testing.assert_array_equal(got, want)
    assert {d: len(d.signatures) for d in dispatchers} == before


@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_read_only_out_is_a_clear_error(path: str) -> None:
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    out = np.empty_like(x)
    out.flags.writeable = False
    for name, args in (("GeluGrad", (x, x)), ("Softmax", (x,))):
        if path == "numpy":
            with jit.disabled(), pytest.raises(ValueError, match="read-only"):
                KERNELS[name].fn(*args, out=out)
        else:
            with pytest.raises(ValueError, match="read-only"):
                KERNELS[name].fn(*args, out=out)


# -- edge semantics shared by both paths -------------------------------------------------------
NONFINITE = [-np.inf, -3.0, -1.0, -0.0, 0.0, 1.0, 3.0, np.inf, np.nan, -1e38, 1e38]


@pytest.mark.parametrize("alpha", [0.01, 0.0, -0.5, 1.0, 2.0, 1e30, 1e38, -1e38])
def test_leaky_relu_is_exactly_one_branch(alpha: float) -> None:
    """``x if x > 0 else alpha·x`` bit for bit (signed zeros, inf and NaN included), on
    both paths and in both dtypes; LeakyReluGrad likewise with ``dY``."""
    for dtype in (np.float32, np.float64):
        x = np.array(NONFINITE, dtype)
        dy = np.array(NONFINITE[::-1], dtype)
        with np.errstate(all="ignore"):
            a = dtype(alpha)
            want_f = np.array([v if v > 0 else a * v for v in x], dtype)
            want_g = np.array([d if v > 0 else a * d for d, v in zip(dy, x)], dtype)
        for ctx in (jit.disabled, contextlib.nullcontext):
            with ctx(), np.errstate(all="ignore"):  # inf·0 and 1e38·1e30 are real NaN/overflow
                got_f = KERNELS["LeakyRelu"].fn(x, alpha=alpha)
                got_g = KERNELS["LeakyReluGrad"].fn(dy, x, alpha=alpha)
            itype = np.int32 if dtype == np.float32 else np.int64
            np.testing.assert_array_equal(got_f.view(itype), want_f.view(itype), err_msg=f"{dtype} {ctx}")
            np.testing.assert_array_equal(got_g.view(itype), want_g.view(itype), err_msg=f"{dtype} {ctx}")


@pytest.mark.parametrize("alpha", [1.702, -1.702, 1e-38, -1e-38, 1e-45, 1e38, -1e38])
def test_quick_gelu_paths_agree_at_extreme_inputs_and_alphas(alpha: float) -> None:
    x = np.array(NONFINITE, np.float32)
    dy = np.ones_like(x)
    for name in ("QuickGelu", "QuickGeluGrad"):
        args = (x,) if name == "QuickGelu" else (dy, x)
        fast = KERNELS[name].fn(*args, alpha=alpha)
        with jit.disabled():
            slow = KERNELS[name].fn(*args, alpha=alpha)
        np.testing.assert_allclose(fast, slow, rtol=8 * EPS32, atol=1e-30, err_msg=name)
        assert np.isnan(fast).tolist() == np.isnan(x).tolist(), name  # NaN only from NaN


def test_exp2_32_accuracy_and_special_values() -> None:
    from numba import njit

    from gradir.backends.cpu.kernels._jit_core import exp2_32

    @njit
    def apply(t, out):  # type: ignore[no-untyped-def]
        for j in range(t.shape[0]):
            out[j] = exp2_32(t[j])

    t = np.concatenate([np.linspace(-126, 127, 2_000_001), [0.0, 0.5, -0.5]]).astype(np.float32)
    got = np.empty_like(t)
    apply(t, got)
    ref = np.exp2(t.astype(np.float64))
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    assert float(np.max(np.abs(got - ref) / ulp)) < 1.25
    special = np.array([np.nan, -np.inf, np.inf, -127.0, -200.0], np.float32)
    out = np.empty_like(special)
    apply(special, out)
    assert np.isnan(out[0]) and out[1] == 0.0 and np.isfinite(out[2]) and out[3] == 0.0 and out[4] == 0.0


def test_compile_builds_the_lstm_kernels_so_runs_compile_nothing() -> None:
    """gradir.compile warms LSTMTraining/LSTMGrad (forward step, whole-loop and per-step
    backward) and the cell kernels; running the samples afterwards adds no numba signature."""
    code = """
import numpy as np, gradir
from gradir.backends.cpu.kernels import jit
from gradir.backends.cpu.kernels.lstm import common as L
lstm = jit.load("lstm")
names = ("bptt", "bptt_step", "forward_step", "cell_forward", "cell_backward", "cell_forward_small",
         "cell_grads_small", "forward_loop")
gemm = jit.load("gemm")  # called from Python too (the forward's steps, LSTMGrad's dX)
exes = [gradir.compile(open(f"samples/{s}.gir").read()) for s in ("lstm_bptt", "lstm_cell_backward")]
before = [len(getattr(lstm, n).signatures) for n in names] + [len(gemm.gemm.signatures)]
rng = np.random.default_rng(0)
whole = L.WHOLE_LOOP_MAX
for exe in exes:
    inputs = {i.name: rng.standard_normal(i.type.shape).astype(np.float32) for i in exe.graph.inputs}
    exe.run(inputs)
    L.WHOLE_LOOP_MAX = 0  # the per-step path too
    exe.run(inputs)
    L.WHOLE_LOOP_MAX = whole
after = [len(getattr(lstm, n).signatures) for n in names] + [len(gemm.gemm.signatures)]
print(before, after)
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    before, after = (json.loads(part) for part in out.stdout.strip().replace("] [", "]\n[").split("\n"))
    # Every LSTM kernel and the GEMM hold a machine-code variant once compile returns, and the runs
    # add none.  How many each holds depends on the cache's state, not on gradir: a variant compiled
    # now for a contiguous array and then called with a strided one compiles a second variant, while
    # one loaded from a full cache for the strided call first also serves the contiguous call (numba
    # converts the argument's layout), so a fresh cache can show 2 where a warm one shows 1.
    assert min(before) >= 1 and after == before, out.stdout


def test_numba_ssa_warnings_of_every_kernel_module_are_kept_off_stderr() -> None:
    """numba attributes its pedantic SSA warning to the kernel file it compiles (the file name without
    ``.py`` as the module): the filter must match the kernels where they live, gradir/backends/cpu/kernels.
    (The filter itself is installed when _jit_core is imported; pytest restores the filters after each test,
    so the pattern is checked here, and the filter in a fresh process.)"""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from gradir.backends.cpu.kernels import _jit_core, jit

    kernels = Path(_jit_core.__file__).parent
    for name in ("_jit_gru", "_jit_conv", "_jit_lstm", "_jit_core"):
        assert re.match(_jit_core.SSA_WARNING_MODULES, str(kernels / name)), name
    code = ("import warnings, gradir.backends.cpu.kernels._jit_core as c\n"
            "from numba.core.errors import NumbaIRAssumptionWarning as W\n"
            "assert any(f[0] == 'ignore' and f[2] is W and f[3].pattern == c.SSA_WARNING_MODULES "
            "for f in warnings.filters)\n")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    assert "_jit_lstm.py" in jit._BLOCKS  # _jit_gru inlines _jit_lstm's tanh: an edit must empty its cache
