"""The formula language (gradir/ir/formula.py) and what is generated from an op's FORMULA
(gradir/backends/cpu/kernels/generated.py): a new element-wise op defined by its class alone runs in both
dtypes, on any thread count, in place, and fused with its neighbours with the unfused bits; a
broken definition is an OpDefinitionError naming the op and its file; each hand-written kernel
agrees with its formula."""

from __future__ import annotations

import numpy as np
import pytest

import gradir
from gradir.ir import formula
from gradir.errors import GradirError, OpDefinitionError
from gradir.ir.op import OPS
from gradir.backends.cpu.kernels import KERNELS, get_kernel, parallel
from gradir.ops import Attr, ElementwiseOp, Operand
from gradir.ops.fused import FusedElementwiseOp
from gradir.transforms.passes import elementwise
from gradir.ir.traits import evaluate_formula


SOFTSIGN = "X / (1 + abs(X))"
BLEND = "maximum(A, B) * beta + minimum(A, B) - exp(-abs(A - B))"


@pytest.fixture(scope="module")
def user_ops():
    """Two ops defined as a user would (registered for this module only): Softsign, one operand;
    Blend, two broadcasting operands and an attribute, calling a transcendental function."""

    class SoftsignOp(ElementwiseOp):
        """x / (1 + |x|)."""

        OPERANDS = (Operand("X"),)
        FORMULA = SOFTSIGN

    class BlendOp(ElementwiseOp):
        """max(a, b) beta + min(a, b) - exp(-|a - b|)."""

        OPERANDS = (Operand("A"), Operand("B"))
        ATTRS = (Attr("beta", "float", 0.5, doc="weight of the larger"),)
        FORMULA = BLEND

    try:
        yield SoftsignOp, BlendOp
    finally:
        OPS.pop("Softsign", None)
        OPS.pop("Blend", None)


def _bits(a: np.ndarray) -> bytes:
    a = np.array(a)
    a[np.isnan(a)] = np.nan  # LLVM keeps no NaN's sign or payload
    return a.tobytes()


TOL = {np.float32: dict(rtol=2e-6, atol=2e-6), np.float64: dict(rtol=1e-13, atol=1e-13)}


# -- the language --------------------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ("X +", "is not a valid expression"),
    ("X * Z", "unknown name 'Z'"),
    ("exp(X, X)", "exp() takes 1 argument"),
    ("X.real", "is not part of the formula language"),
    ("X if X > 0 else 0", "is not part of the formula language"),
    ("exp + X", "function 'exp' is used without calling it"),
    ("X // 2", "operator FloorDiv is not part of the formula language"),
    ("open(X)", "'open' is not a function of the formula language"),
    ("'a'", "constant 'a' is not a number"),
])
def test_check_names_what_is_wrong(text, message):
    with pytest.raises(OpDefinitionError) as e:
        formula.check(text, {"X"}, where="op Foo: FORMULA", filename="my.py", line=7)
    assert isinstance(e.value, GradirError)
    assert str(e.value).startswith("my.py:7:1: error: op Foo: FORMULA: ") and message in str(e.value)


def test_check_without_a_file_says_only_where():
    with pytest.raises(OpDefinitionError) as e:
        formula.check("X +", {"X"}, where="op Foo: VJP['X']")
    assert str(e.value).startswith("error: op Foo: VJP['X']: 'X +' is not a valid expression")
    with pytest.raises(OpDefinitionError, match="must be a non-empty string"):
        formula.check(3, {"X"}, where="op Foo: FORMULA")


def test_free_names_and_evaluate():
    assert formula.free_names(BLEND) == {"A", "B", "beta"}
    assert formula.is_transcendental(BLEND) and not formula.is_transcendental(SOFTSIGN)
    x = np.array([-2.0, 0.5], np.float32)
    assert formula.evaluate("X * 0.1 + pi", {"X": x}, np.float32).dtype == np.float32  # numbers in the dtype
    np.testing.assert_allclose(formula.evaluate(SOFTSIGN, {"X": np.array([-3.0, 1.0])}), [-0.75, 0.5])


@pytest.mark.parametrize("name", sorted(n for n, f in formula.FUNCTIONS.items() if f.arity is not None))
def test_each_function_compiles_to_its_numpy_meaning(name, kernel_path):
    """Every function of the language, through a generated kernel (compiled, then NumPy), against
    its NumPy definition in float64; NaN propagates through maximum/minimum from either side."""
    fn = formula.FUNCTIONS[name]
    args = ["X", "Y", "Z"][:fn.arity]
    text = f"{name}({', '.join(args)})" if name != "where" else "where(X > Y, Y, Z)"

    class _FnOp(ElementwiseOp):
        OPERANDS = tuple(Operand(a) for a in args)
        FORMULA = text

    try:
        rng = np.random.default_rng(1)
        arrays = [rng.uniform(0.1, 0.9, (4, 7)) for _ in args]
        arrays[0][0, :3] = [np.nan, 0.0, -0.0]
        if len(arrays) > 1:
            arrays[1][0, 3] = np.nan
        got = KERNELS[_FnOp].fn(*arrays)
        want = formula.evaluate(text, dict(zip(args, arrays)))
        np.testing.assert_allclose(np.broadcast_to(want, got.shape), got, rtol=1e-14, atol=1e-300)
    finally:
        OPS.pop("_Fn", None)


# -- definitions -----------------------------------------------------------------------------------
def test_a_broken_op_is_an_error_naming_the_op_and_its_file():
    with pytest.raises(OpDefinitionError) as e:
        class BadOp(ElementwiseOp):  # noqa: F841
            OPERANDS = (Operand("X"),)
            FORMULA = "X / (1 + abs(Y))"
    text = str(e.value)
    assert text.startswith(__file__) and "op Bad: FORMULA" in text and "unknown name 'Y'" in text
    assert "Bad" not in OPS  # not registered: fixing the class and defining it again works

    with pytest.raises(OpDefinitionError, match=r"op Bad2: VJP has an entry for 'W', which is not an operand"):
        class Bad2Op(ElementwiseOp):  # noqa: F841
            OPERANDS = (Operand("X"),)
            FORMULA = "X"
            VJP = {"W": "dY"}
    with pytest.raises(OpDefinitionError, match=r"op Bad3: VJP\['X'\] uses 'Q', which is not an operand"):
        class Bad3Op(ElementwiseOp):  # noqa: F841
            OPERANDS = (Operand("X"),)
            FORMULA = "X"
            VJP = {"X": "dY * Q"}
    assert not {"Bad2", "Bad3"} & set(OPS)


def test_element_wise_defaults(user_ops):
    softsign, blend = user_ops
    assert softsign.ELEMENTWISE == "same" and not softsign.BROADCASTS
    assert blend.ELEMENTWISE == "broadcast" and blend.BROADCASTS
    assert OPS["Softsign"] is softsign and softsign.op_name == "Softsign"
    g = gradir.parse("input t0 : Float32 [3, 1]\ninput t1 : Float32 [4]\nt2 = Blend(t0, t1)\noutput t2\n")
    assert str(g.types["t2"]) == "Float32 [3, 4]"
    with pytest.raises(gradir.VerifyError, match="has dtype Float64 but A"):
        gradir.parse("input t0 : Float32 [3]\ninput t1 : Float64 [3]\nt2 = Blend(t0, t1)\noutput t2\n")
    with pytest.raises(gradir.VerifyError, match="expected Float32 or Float64"):
        gradir.parse("input t0 : Int64 [3]\nt1 = Softsign(t0)\noutput t1\n")


# -- generated kernels ---------------------------------------------------------------------------
def _run_text(dtype: str, shape: str) -> str:
    return (f"input t0 : {dtype} {shape}\ninput t1 : {dtype} [{shape.split(', ')[-1]}\n"
            "t2 = Softsign(t0)\nt3 = Blend(t2, t1, beta=0.25)\nt4 = Add(t3, t0)\noutput t4, t2\n")


def _inputs(dtype, shape, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    x.reshape(-1)[:4] = [0.0, -0.0, np.inf, -np.inf]
    return {"t0": x, "t1": (rng.standard_normal(shape[-1:]) * 3).astype(dtype)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_new_op_runs_as_the_float64_formula_on_any_thread_count_fused_or_not(user_ops, dtype, kernel_path,
                                                                               monkeypatch):
    """``run`` of a graph of the two ops (after Softsign, Blend reads a broadcast row) matches the
    float64 formula; 1 and 2 threads give the same bits; the ops are fused with their element-wise
    neighbour into one loop that gives the unfused bits."""
    monkeypatch.setattr(elementwise, "MIN_ELEMENTS", 1)
    shape = (300, 1030)  # more than one row chunk and one loop unit (parallel_rows, fused.CHUNK)
    name = "Float32" if dtype == np.float32 else "Float64"
    text = _run_text(name, "[300, 1030]")
    x = _inputs(dtype, shape)
    fused = gradir.compile(text, threads=2)
    groups = [st.op.attrs["body"] for st in fused.plan.steps if isinstance(st.op, FusedElementwiseOp)]
    assert groups == [("t2 = Softsign(t0)", "t3 = Blend(t2, t1, beta=0.25)", "t4 = Add(t3, t0)")]
    unfused = gradir.compile(text, threads=2, disable=["fuse-elementwise"])
    runs = [fused.run(x), gradir.compile(text, threads=1).run(x), unfused.run(x),
            gradir.compile(text, threads=1, disable=["fuse-elementwise"]).run(x)]
    for r in runs[1:]:
        assert _bits(r["t4"]) == _bits(runs[0]["t4"]) and _bits(r["t2"]) == _bits(runs[0]["t2"])
    x64 = {k: v.astype(np.float64) for k, v in x.items()}
    t2 = formula.evaluate(SOFTSIGN, {"X": x64["t0"]})
    t4 = formula.evaluate(BLEND, {"A": t2, "B": x64["t1"], "beta": 0.25}) + x64["t0"]
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(runs[0]["t2"], t2, **TOL[dtype])
        np.testing.assert_allclose(runs[0]["t4"], t4, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_generated_kernels_write_into_out_even_when_it_is_an_operand(user_ops, dtype, kernel_path):
    softsign, blend = user_ops
    x = _inputs(dtype, (300, 300), 2)
    for cls, args, attrs in ((softsign, [x["t0"]], {}), (blend, [x["t0"], x["t0"][::-1].copy()], {"beta": 2.0})):
        info = get_kernel(cls)
        assert info.generated and info.inplace and info.splits and info.scalar is None
        want = info.fn(*args, **attrs)
        assert want.dtype == dtype and want.shape == args[0].shape
        for k in range(len(args)):
            ops = [a.copy() for a in args]
            assert info.fn(*ops, out=ops[k], **attrs) is ops[k]
            assert _bits(ops[k]) == _bits(want), (cls.op_name, k)
        saved = parallel.get_threads()
        parallel.set_threads(1)
        try:
            assert _bits(info.fn(*args, **attrs)) == _bits(want)
        finally:
            parallel.set_threads(saved)


def test_a_hand_kernel_overrides_the_generated_one():
    """Built-in ops keep their hand-written kernels (registered by class); an op without a formula
    gets none generated."""
    relu = OPS["Relu"]
    assert KERNELS[relu] is get_kernel(relu) is KERNELS["Relu"] and not KERNELS[relu].generated
    assert get_kernel(OPS["Softmax"]).op is OPS["Softmax"]
    assert OPS["Relu"] in set(KERNELS)


# -- each hand-written kernel against its formula, in both dtypes -------------------------------------
HAND = sorted(n for n, c in OPS.items() if c.FORMULA is not None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", HAND)
def test_each_hand_kernel_matches_its_formula_in_float64(name, dtype):
    """An override must compute its op's formula: each kernel in ``dtype`` against the formula in
    float64 (tolerance by dtype; the Float32 activations are clipped where the exact value is a
    denormal, hence the absolute tolerance)."""
    cls = OPS[name]
    arrays, attrs = cls.example(np.random.default_rng(11), np.float64)
    ops = {o.name: np.asarray(a).astype(dtype) for o, a in zip(cls.OPERANDS, arrays)}
    attrs = {**{a.name: a.default for a in cls.ATTRS if not a.required}, **attrs}
    got = KERNELS[cls].fn(*[ops[o.name] for o in cls.OPERANDS], out=None, **attrs)
    want = evaluate_formula(cls, {k: v.astype(np.float64) for k, v in ops.items()}, attrs)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, np.broadcast_to(want, np.shape(got)), **tol)
    assert got.dtype == (np.bool_ if np.asarray(want).dtype == np.bool_ else dtype)  # a comparison gives Bool
