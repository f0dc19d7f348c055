"""The algebraic rewrite passes (simplify, fold-transpose-matmul, flatten-batched-matmul,
fold-product-transpose) and the
FusedMatMul op they make: each rewrite shows in the plan, gives the unrewritten graph's numbers
(the same bits where the arithmetic is the same, else within a stated bound), and the same bits
for 1 and 2 threads; outputs, aliases and labels survive."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradir
from gradir.backends.cpu.kernels import KERNELS
from gradir.ops.matmul_layout import operand_perm, perm_to_flags
from gradir.transforms.passes.simplify import exact_product

REWRITES = ["simplify", "fold-transpose-matmul", "flatten-batched-matmul", "fold-product-transpose"]


def _feeds(g, seed=0):
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal(i.type.shape).astype(i.type.dtype.numpy) for i in g.inputs}


def _compile(text, **kw):
    return gradir.compile(text, **kw)


def _ops(exe):
    return [s.op.op_name for s in exe.plan.steps]


def _log(exe):
    return dict(exe.plan.pass_log)


def _run_all(text, seed=0):
    """(rewritten results for threads 1 and 2, unrewritten results, the rewritten executable)."""
    g = gradir.parse(text)
    feeds = _feeds(g, seed)
    on = [_compile(text, threads=t) for t in (1, 2)]
    off = _compile(text, disable=REWRITES)
    r1, r2 = (e.run(feeds) for e in on)
    for k in r1:  # the promise: bits independent of the thread count
        assert r1[k].tobytes() == r2[k].tobytes(), k
    return r1, off.run(feeds), on[0]


def _same_bits(a, b):
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        assert a[k].tobytes() == b[k].tobytes(), k


def _close_products(text, got, want, k):
    """A graph whose outputs are products (sums of K products each) of its inputs: the rewritten and
    unrewritten sums of the same products, in another order, differ by at most 2·K·eps·Σ|a·b|
    (Σ|a·b|: the unrewritten graph run on the inputs' absolute values)."""
    g = gradir.parse(text)
    mag = _compile(text, disable=REWRITES).run({n: np.abs(v) for n, v in _feeds(g).items()})
    for name in got:
        eps = np.finfo(got[name].dtype).eps
        bound = 2 * k * eps * np.abs(mag[name])
        assert np.all(np.abs(got[name] - want[name]) <= bound), name


# -- FusedMatMul itself -----------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fused_matmul_kernel_is_the_laid_out_product(data):
    """Every layout: the kernel gives alpha · (transposed copies @ ...), reading the operands in place."""
    import strategies
    types, attrs = strategies.OP_EXAMPLES["FusedMatMul"](data.draw)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in types)
    full = {"alpha": 1.0, "transA": 0, "transB": 0, "transBatchA": 0, "transBatchB": 0, **attrs}
    got = KERNELS["FusedMatMul"].fn(a, b, out=None, **full)
    pa = operand_perm(a.ndim, bool(full["transA"]), bool(full["transBatchA"]))
    pb = operand_perm(b.ndim, bool(full["transB"]), bool(full["transBatchB"]))
    ac = a if pa is None else np.ascontiguousarray(a.transpose(pa))
    bc = b if pb is None else np.ascontiguousarray(b.transpose(pb))
    want = np.asarray(np.matmul(ac, bc))
    want = want * want.dtype.type(full["alpha"])
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if a.dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_batch_times_a_matrix_is_one_product_over_its_rows(dtype):
    """MatMul and FusedMatMul run [S, B, K] @ [K, N] as one [S·B, K] @ [K, N] product (a view, no
    copy), into ``out`` when given; a batch whose rows do not merge (a transposed view) still works."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 1, 20, 30)).astype(dtype)
    w = rng.standard_normal((40, 30)).astype(dtype)
    want = np.matmul(a, np.ascontiguousarray(w.T))
    for got in (KERNELS["MatMul"].fn(a, np.ascontiguousarray(w.T)), KERNELS["FusedMatMul"].fn(a, w, transB=1)):
        assert got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    out = np.empty(want.shape, dtype)
    assert KERNELS["FusedMatMul"].fn(a, w, transB=1, alpha=2.0, out=out) is out
    np.testing.assert_allclose(out, 2 * want, rtol=1e-5, atol=1e-5)
    at = np.ascontiguousarray(a.transpose(0, 1, 3, 2))  # [6, 1, 30, 20]: transA reads it as a's batch
    np.testing.assert_allclose(KERNELS["FusedMatMul"].fn(at, w, transA=1, transB=1), want, rtol=1e-5, atol=1e-5)


def test_perm_to_flags_inverts_operand_perm():
    for rank in (2, 3, 4):
        for t in (0, 1):
            for tb in ((0, 1) if rank >= 3 else (0,)):
                assert perm_to_flags(operand_perm(rank, bool(t), bool(tb))) == (t, tb)
    assert perm_to_flags([1, 0, 2]) == (0, 1) and perm_to_flags([2, 0, 1]) is None


@pytest.mark.parametrize("text,message", [
    ("input t0 : Float32 [3, 4]\ninput t1 : Float32 [4, 5]\nt2 = FusedMatMul(t0, t1, transBatchA=1)\noutput t2\n",
     "transBatchA=1 needs an operand of rank >= 3, but t0 has shape [3, 4]"),
    ("input t0 : Float32 [3, 4]\ninput t1 : Float32 [4, 5]\nt2 = FusedMatMul(t0, t1, transA=1)\noutput t2\n",
     "inner dimensions differ: [4, 3] @ [4, 5] as laid out (A is [3, 4]) (3 vs 4)"),
    ("input t0 : Float32 [3, 4]\ninput t1 : Float32 [4, 5]\nt2 = FusedMatMul(t0, t1, transB=2)\noutput t2\n",
     "transB"),
    ("input t0 : Int32 [3, 4]\ninput t1 : Int32 [4, 5]\nt2 = FusedMatMul(t0, t1)\noutput t2\n", "Int32"),
])
def test_fused_matmul_errors_are_located(text, message):
    with pytest.raises(gradir.VerifyError) as e:
        gradir.parse(text)
    assert message in str(e.value)
    assert ":3:" in str(e.value)  # on the op's line


# -- fold-transpose-matmul ------------------------------------------------------------
FOLD = """input t0 : Float32 [64, 48]
input t1 : Float32 [64, 32]
input t2 : Float32 [5, 32, 48]
t3 = Transpose(t0)
t4 = MatMul(t3, t1)
t5 = Transpose(t2, perm=[0, 2, 1])
t9 = Transpose(t1)
t6 = MatMul(t5, t9)
t7 = Transpose(t2, perm=[1, 0, 2])
t8 = MatMul(t7, t3)
output t4, t6, t8
"""


def test_transposes_fold_into_the_products():
    got, want, exe = _run_all(FOLD)
    assert "Transpose" not in _ops(exe)
    assert _ops(exe).count("FusedMatMul") == 3
    assert _log(exe)["fold-transpose-matmul"] == "folded 5 Transposes"
    assert "fold-transpose-matmul: folded 5 Transposes" in exe.plan.describe()
    _close_products(FOLD, got, want, 64)
    # the MatMul of a Transpose of a batch: transBatchA
    ops = {s.results[0]: s.op for s in exe.plan.steps}
    assert str(ops["t8"]).startswith("t8 = FusedMatMul(t2, t0, transB=1, transBatchA=1) :")
    assert str(ops["t6"]).startswith("t6 = FusedMatMul(t2, t1, transA=1, transB=1) :")


def test_a_transpose_read_elsewhere_stays_and_integers_keep_it():
    text = ("input t0 : Float32 [4, 3]\ninput t1 : Float32 [4, 5]\ninput t2 : Int32 [4, 3]\ninput t3 : Int32 [4, 5]\n"
            "t4 = Transpose(t0)\nt5 = MatMul(t4, t1)\nt6 = Transpose(t2)\nt7 = MatMul(t6, t3)\noutput t5, t4, t7\n")
    exe = _compile(text)
    assert _ops(exe).count("Transpose") == 2 and _ops(exe).count("FusedMatMul") == 1


def test_the_gelu_mlp_gradient_makes_no_transposed_copy():
    b = gradir.GraphBuilder("mlp")
    x = b.input("Float32", [32, 64])
    w1, b1 = b.input("Float32", [64, 128]), b.input("Float32", [128])
    w2, b2 = b.input("Float32", [128, 16]), b.input("Float32", [16])
    b.output(b.LogSoftmax(b.Gelu(x @ w1 + b1) @ w2 + b2))
    text = gradir.grad(b.build()).to_text()
    got, want, exe = _run_all(text)
    assert "Transpose" not in _ops(exe) and _ops(exe).count("FusedMatMul") == 4
    # products, GeluGrad and a softmax gradient in a chain: compared with a stated tolerance
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
    ref = _compile(text, backend="reference").run(_feeds(gradir.parse(text)))
    _same_bits(got, ref)


# -- flatten-batched-matmul -------------------------------------------------------------
def test_a_summed_batched_product_is_one_2d_product():
    """The weight gradient of [S, B, K] @ [K, N]: S products summed by ReduceSumTo become one."""
    text = ("input t0 : Float64 [6, 5, 8]\ninput t1 : Float64 [8, 3]\nt2 = MatMul(t0, t1)\noutput t2\n")
    gtext = gradir.grad(gradir.parse(text)).to_text()
    assert "ReduceSumTo" in gtext
    got, want, exe = _run_all(gtext)
    assert _log(exe)["flatten-batched-matmul"] == "flattened 1 batched product"
    assert "ReduceSumTo" not in _ops(exe) and _ops(exe).count("Reshape") == 2
    _close_products(gtext, got, want, 30)
    dw = [s.op for s in exe.plan.steps if s.op.op_name == "FusedMatMul" and s.op.attrs["transA"]]
    assert len(dw) == 1 and exe.plan.types[dw[0].operands[0]].shape == (30, 8)


@pytest.mark.parametrize("a,b,attrs,like,flattens", [
    ("[4, 3, 5]", "[4, 3, 2]", "transA=1", "[5, 2]", True),          # storage [b, j, m], [b, j, n]
    ("[5, 4, 3]", "[2, 4, 3]", "transBatchA=1, transBatchB=1, transB=1", "[5, 2]", True),  # [m, b, j], [n, b, j]
    ("[4, 3, 5]", "[4, 3, 2]", "transA=1", "[1, 5, 2]", True),       # a kept leading 1
    ("[4, 5, 3]", "[4, 3, 2]", "", "[5, 2]", False),                 # [b, m, j]: no contiguous flattening
    ("[4, 3, 5]", "[1, 3, 2]", "transA=1", "[5, 2]", False),         # broadcast batch
    ("[4, 3, 5]", "[4, 3, 2]", "transA=1", "[4, 1, 2]", False),      # not summed over the batch
])
def test_which_summed_products_flatten(a, b, attrs, like, flattens):
    text = (f"input t0 : Float64 {a}\ninput t1 : Float64 {b}\ninput t2 : Float64 {like}\n"
            f"t3 = FusedMatMul(t0, t1, alpha=0.5{', ' + attrs if attrs else ''})\nt4 = ReduceSumTo(t3, t2)\n"
            "output t4\n")
    got, want, exe = _run_all(text)
    assert ("ReduceSumTo" not in _ops(exe)) == flattens
    _close_products(text, got, want, 12)


# -- fold-product-transpose --------------------------------------------------------------
def test_a_tied_embeddings_gradient_is_written_transposed_without_a_copy():
    """h [N, C] · Transpose(W [V, C]): W's gradient was hᵀ·dY [C, V] copied by a Transpose to [V, C];
    now one product dYᵀ·h, the same sums (within the bound), no Transpose in the plan."""
    text = ("input t0 : Float32 [40, 24]\ninput t1 : Float32 [56, 24]\nt2 = Transpose(t1, perm=[1, 0])\n"
            "t3 = MatMul(t0, t2)\noutput t3\n")
    gtext = gradir.grad(gradir.parse(text)).to_text()
    got, want, exe = _run_all(gtext)
    assert _log(exe)["fold-product-transpose"] == "folded 1 transposed product"
    assert "Transpose" not in _ops(exe)
    dw = [s for s in exe.plan.steps if s.op.op_name == "FusedMatMul" and exe.plan.types[s.results[0]].shape == (56, 24)]
    assert len(dw) == 1 and dw[0].op.attrs.get("transA") == 1 and not dw[0].op.attrs.get("transB")
    _close_products(gtext, got, want, 40)


@pytest.mark.parametrize("a,b,attrs,perm,folds", [
    ("[6, 4]", "[4, 5]", "", "[1, 0]", True),
    ("[4, 6]", "[5, 4]", "transA=1, transB=1", "[1, 0]", True),
    ("[3, 6, 4]", "[3, 4, 5]", "", "[0, 2, 1]", True),            # batched: each matrix transposed
    ("[3, 6, 4]", "[4, 5]", "", "[0, 2, 1]", True),               # a broadcast matrix
    ("[3, 6, 4]", "[3, 4, 5]", "", "[1, 0, 2]", False),           # not the last two axes
    ("[6, 3, 4]", "[3, 4, 5]", "transBatchA=1", "[0, 2, 1]", False),
    ("[4]", "[4, 5]", "", None, False),                          # a 1-D operand
])
def test_which_transposed_products_fold(a, b, attrs, perm, folds):
    tr = f"t3 = Transpose(t2, perm={perm})\n" if perm else "t3 = Neg(t2)\n"
    text = (f"input t0 : Float64 {a}\ninput t1 : Float64 {b}\n"
            f"t2 = FusedMatMul(t0, t1, alpha=0.5{', ' + attrs if attrs else ''})\n{tr}output t3\n")
    got, want, exe = _run_all(text)
    assert ("Transpose" not in _ops(exe) and perm is not None) == folds
    _close_products(text, got, want, 4)


def test_a_product_read_elsewhere_keeps_its_transpose():
    text = ("input t0 : Float32 [6, 4]\ninput t1 : Float32 [4, 5]\nt2 = MatMul(t0, t1)\n"
            "t3 = Transpose(t2, perm=[1, 0])\noutput t3, t2\n")
    got, want, exe = _run_all(text)
    assert "Transpose" in _ops(exe) and _log(exe)["fold-product-transpose"] == "folded 0 transposed products"
    _same_bits(got, want)


def _storage(logical, perm):
    """The stored shape of an operand that ``perm`` lays out as ``logical``."""
    shape = [0] * len(perm)
    for k, p in enumerate(perm):
        shape[p] = logical[k]
    return shape


def _merges(perm, kept, contracted):
    """The batch axes then the contracted one are adjacent and in order, the kept axis at one end."""
    r = len(perm)
    run = list(perm[:-2]) + [perm[contracted]]
    return (perm[kept] == 0 and run == list(range(1, r))) or (perm[kept] == r - 1 and run == list(range(r - 1)))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=2), st.integers(1, 4), st.integers(1, 4),
       st.integers(1, 4), st.lists(st.booleans(), min_size=4, max_size=4), st.booleans())
def test_random_summed_products_flatten_where_the_rows_merge(batch, m, j, n, flags, lead):
    ta, tb, tba, tbb = (int(f) for f in flags)
    r = len(batch) + 2
    pa, pb = operand_perm(r, bool(ta), bool(tba)), operand_perm(r, bool(tb), bool(tbb))
    sa, sb = _storage(batch + [m, j], pa), _storage(batch + [j, n], pb)
    like = [1, m, n] if lead else [m, n]
    attrs = ", ".join(f"{k}=1" for k, v in zip(["transA", "transB", "transBatchA", "transBatchB"], flags) if v)
    text = (f"input t0 : Float64 {sa}\ninput t1 : Float64 {sb}\ninput t2 : Float64 {like}\n"
            f"t3 = FusedMatMul(t0, t1{', ' + attrs if attrs else ''})\nt4 = ReduceSumTo(t3, t2)\noutput t4\n")
    got, want, exe = _run_all(text)
    k = j
    for d in batch:
        k *= d
    _close_products(text, got, want, k)
    assert ("ReduceSumTo" not in _ops(exe)) == (_merges(pa, -2, -1) and _merges(pb, -1, -2))


def test_a_product_read_elsewhere_is_not_flattened():
    text = ("input t0 : Float32 [4, 3, 5]\ninput t1 : Float32 [4, 3, 2]\ninput t2 : Float32 [5, 2]\n"
            "t3 = FusedMatMul(t0, t1, transA=1)\nt4 = ReduceSumTo(t3, t2)\noutput t4, t3\n")
    assert "ReduceSumTo" in _ops(_compile(text))


# -- simplify ---------------------------------------------------------------------------------
SIMPLE = """input t0 : Float32 [4, 1, 6]
input t1 : Float32 [6, 3]
t2 = Identity(t0)
t3 = Reshape(t2, shape=[4, 1, 6])
t4 = Transpose(t3, perm=[0, 1, 2])
t5 = Neg(t4)
t6 = Neg(t5)
t7 = Scale(t6, factor=1)
t8 = Scale(t7, factor=0.5)
t9 = Scale(t8, factor=3)
t10 = MatMul(t9, t1)
t11 = Scale(t10, factor=-2)
t12 = Transpose(t11, perm=[0, 2, 1])
t13 = Transpose(t12, perm=[0, 2, 1])
t14 = Reshape(t13, shape=[4, 3])
t15 = Reshape(t14, shape=[12])
output t15
"""


def test_simplify_drops_what_computes_nothing_with_the_same_bits():
    got, want, exe = _run_all(SIMPLE)
    _same_bits(got, want)
    # 0.5·3 merges (0.5 a power of two); -2 is the product's alpha
    assert _ops(exe) == ["Scale", "FusedMatMul", "Reshape"], exe.plan.describe()
    steps = [s.op for s in exe.plan.steps]
    assert steps[0].attrs["factor"] == 1.5 and steps[0].operands == ["t0"]
    assert steps[1].attrs["alpha"] == -2.0
    assert steps[2].attrs["shape"] == (12,) and steps[2].results == ["t15"]
    assert _log(exe)["simplify"].startswith("simplified ")


def test_scale_of_scale_merges_only_when_exact():
    assert exact_product(0.5, 3.0, np.dtype(np.float32)) == 1.5
    assert exact_product(0.1, 3.0, np.dtype(np.float32)) is None  # neither a power of two
    assert exact_product(2.0 ** -100, 2.0 ** -100, np.dtype(np.float32)) is None  # underflows
    text = "input t0 : Float32 [8]\nt1 = Scale(t0, factor=0.1)\nt2 = Scale(t1, factor=3)\noutput t2\n"
    assert _ops(_compile(text)) == ["Scale", "Scale"]
    # a factor Float32 cannot hold stays as written, without a warning from the compiler
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = "input t0 : Float32 [8]\nt1 = Scale(t0, factor=1e300)\nt2 = Scale(t1, factor=0.5)\noutput t2\n"
        assert _ops(_compile(text)) == ["Scale", "Scale"]


def test_mul_by_a_constant_is_a_scale_and_neg_of_scale_one_scale():
    text = ("input t0 : Float64 [3, 4]\nt1 = Constant(value=0.25) : Float64 [3, 4]\nt2 = Mul(t1, t0)\n"
            "t3 = Neg(t2)\nt4 = Constant(value=1) : Float64 []\nt5 = Mul(t3, t4)\noutput t5\n")
    got, want, exe = _run_all(text)
    _same_bits(got, want)
    assert _ops(exe) == ["Scale"] and exe.plan.steps[0].op.attrs["factor"] == -0.25


def test_neg_of_a_product_is_its_alpha():
    text = ("input t0 : Float32 [3, 4]\ninput t1 : Float32 [4, 5]\nt2 = MatMul(t0, t1)\nt3 = Neg(t2)\n"
            "t4 = Scale(t3, factor=0.25)\noutput t4\n")
    got, want, exe = _run_all(text)
    _same_bits(got, want)
    assert [str(s.op) for s in exe.plan.steps] == ["t4 = FusedMatMul(t0, t1, alpha=-0.25) : Float32 [3, 5]"]


@settings(max_examples=40, deadline=None)
@given(st.permutations([0, 1, 2]), st.permutations([0, 1, 2]), st.sampled_from(["Float32", "Float64"]))
def test_random_transposes_fold_where_a_layout_says_the_same(pa, pb, dtype):
    """A [2, 3, 4]-shaped product of two transposed batches: folded exactly when FusedMatMul has
    the layout, with the unrewritten numbers (to rounding) either way."""
    want_a, want_b = [2, 3, 4], [2, 4, 5]
    sa = [0] * 3
    sb = [0] * 3
    for k, p in enumerate(pa):
        sa[p] = want_a[k]
    for k, p in enumerate(pb):
        sb[p] = want_b[k]
    text = (f"input t0 : {dtype} {sa}\ninput t1 : {dtype} {sb}\nt2 = Transpose(t0, perm={list(pa)})\n"
            f"t3 = Transpose(t1, perm={list(pb)})\nt4 = MatMul(t2, t3)\noutput t4\n")
    got, want, exe = _run_all(text)
    _close_products(text, got, want, 4)
    moved = [list(p) for p in (pa, pb) if list(p) != [0, 1, 2]]  # an identity goes in simplify
    folds = sum(perm_to_flags(p) is not None for p in moved)
    assert _ops(exe).count("Transpose") == len(moved) - folds
    assert _ops(exe).count("FusedMatMul" if folds else "MatMul") == 1


def test_outputs_keep_their_names_labels_and_never_become_inputs():
    text = ('input t0 "x" : Float32 [2, 3]\nt1 = Identity(t0)\nt2 = Exp(t0)\nt3 = Identity(t2)\n'
            't4 = Neg(t2)\nt5 = Neg(t4)\noutput t1 "copy", t3 "e", t5 "e2", t2\n')
    g = gradir.parse(text)
    feeds = _feeds(g)
    exe = _compile(text)
    assert _ops(exe) == ["Identity", "Exp"]  # the Identity of an input stays: an output is never the input
    got, want = exe.run(feeds), _compile(text, disable=REWRITES).run(feeds)
    assert list(got) == ["copy", "e", "e2", "t2"]
    _same_bits(got, want)
    assert not np.shares_memory(got["copy"], feeds["t0"])
    assert "outputs computed by merged values: t3 = t2, t5 = t2" in exe.plan.describe()


def test_each_rewrite_can_be_switched_off():
    for name in REWRITES:
        exe = _compile(FOLD if name != "simplify" else SIMPLE, disable=[name])
        assert name not in _log(exe)
    assert "Transpose" in _ops(_compile(FOLD, disable=["fold-transpose-matmul"]))


# -- random chains: simplify keeps the bits ------------------------------------------------
_STEPS = st.sampled_from(["Identity", "Neg", "Scale1", "Scale2", "ScaleX", "T", "TT", "R", "Exp"])


@settings(max_examples=40, deadline=None)
@given(st.lists(_STEPS, min_size=1, max_size=8), st.sampled_from(["Float32", "Float64"]),
       st.lists(st.booleans(), min_size=8, max_size=8))
def test_random_chains_simplify_to_the_same_bits(steps, dtype, outs):
    lines = [f"input t0 : {dtype} [1, 1, 4]"]
    shape, cur, n, outputs = [1, 1, 4], "t0", 1, []
    for step, out in zip(steps, outs):
        r = f"t{n}"
        n += 1
        if step == "Identity":
            lines.append(f"{r} = Identity({cur})")
        elif step == "Neg":
            lines.append(f"{r} = Neg({cur})")
        elif step.startswith("Scale"):
            f = {"Scale1": "1", "Scale2": "0.5", "ScaleX": "-0.3"}[step]
            lines.append(f"{r} = Scale({cur}, factor={f})")
        elif step == "Exp":
            lines.append(f"{r} = Tanh({cur})")
        elif step == "T":  # moves only size-1 axes: a no-op where the shape stays
            perm = [1, 0, 2] if shape[0] == 1 else [0, 2, 1] if shape[2] == 1 else [2, 1, 0]
            shape = [shape[k] for k in perm]
            lines.append(f"{r} = Transpose({cur}, perm={perm})")
        elif step == "TT":
            shape = [shape[k] for k in (2, 1, 0)]
            lines.append(f"{r} = Transpose({cur})")
        else:
            lines.append(f"{r} = Reshape({cur}, shape=[{', '.join(map(str, shape))}])")
        cur = r
        if out:
            outputs.append(r)
    if cur not in outputs:
        outputs.append(cur)
    text = "\n".join(lines) + f"\noutput {', '.join(outputs)}\n"
    got, want, _ = _run_all(text)
    _same_bits(got, want)


def test_the_command_line_lists_shows_and_switches_the_rewrites(tmp_path, capsys):
    from gradir.cli.main import main
    assert main(["plan", "--list-passes"]) == 0
    names = [line.split(":")[0] for line in capsys.readouterr().out.splitlines()]
    assert names.index("cse") < names.index("simplify") < names.index("fold-transpose-matmul") \
        < names.index("flatten-batched-matmul") < names.index("fold-product-transpose") < names.index("dce")
    f = tmp_path / "fold.gir"
    f.write_text(FOLD)
    assert main(["plan", str(f)]) == 0
    out = capsys.readouterr().out
    assert "#   fold-transpose-matmul: folded 5 Transposes" in out and "= Transpose" not in out
    assert main(["plan", str(f), "--disable", "fold-transpose-matmul"]) == 0
    out = capsys.readouterr().out
    assert "fold-transpose-matmul" not in out and "= Transpose" in out
    assert main(["run", str(f), "--disable", "simplify,fold-transpose-matmul,flatten-batched-matmul"]) == 0
