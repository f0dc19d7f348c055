"""The logic family, the extremes, Pow and ORT's training cross-entropies (docs/ops.md) beyond what the
conformance suite checks on each op's example: Bool values in .gir text, Cast's edge cases, ties in
Max/Min/ReduceMax gradients (ORT's builders), Pow's exponent gradient, Where's gradient reduced to
broadcast operands, type errors located at the op's line, and the importer's Pow with an integer exponent.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradir
from gradir import ExecutionError, VerifyError


def _run(text: str, **feed: np.ndarray) -> dict:
    return gradir.compile(gradir.parse(text, "t.gir")).run(feed)


def test_bool_values_print_parse_and_run() -> None:
    text = ("input t0 : Bool [2, 3]\ninput t1 : Float32 [2, 3]\ninput t2 : Float32 [3]\n"
            "t3 = Where(t0, t1, t2)\nt4 = Less(t1, t2)\nt5 = And(t0, t4)\nt6 = Not(t5)\n"
            "t7 = Equal(t0, t6)\noutput t3, t6, t7\n")
    g = gradir.parse(text, "t.gir")
    assert g.types["t6"].dtype.value == "Bool" and g.types["t3"].dtype.value == "Float32"
    assert gradir.parse(g.to_text(), "again.gir").to_text() == g.to_text()
    c = np.array([[True, False, True], [False, True, False]])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    y = np.array([0.5, -1.0, 3.0], np.float32)
    got = _run(text, t0=c, t1=x, t2=y)
    np.testing.assert_array_equal(got["t3"], np.where(c, x, y))
    want6 = ~(c & (x < y))
    np.testing.assert_array_equal(got["t6"], want6)
    assert got["t6"].dtype == np.bool_
    np.testing.assert_array_equal(got["t7"], c == want6)


def test_comparisons_of_float32_operands_give_bool_on_the_compiled_path_too() -> None:
    """The generated kernel of a comparison takes the NumPy path for a Bool result (its compiled loop is of one
    float dtype): the result is Bool, not 0.0/1.0."""
    a = np.linspace(-1, 1, 300 * 300, dtype=np.float32).reshape(300, 300)
    got = _run("input t0 : Float32 [300, 300]\ninput t1 : Float32 [300]\nt2 = Greater(t0, t1)\noutput t2\n",
               t0=a, t1=a[0])
    assert got["t2"].dtype == np.bool_
    np.testing.assert_array_equal(got["t2"], a > a[0])


@pytest.mark.parametrize("src, to, values, want", [
    ("Float32", "Int32", [-2.7, -2.5, -0.5, 0.49, 2.5, 3.99], [-2, -2, 0, 0, 2, 3]),  # toward zero, as ONNX Runtime
    ("Float64", "Int64", [-1e12 - 0.5, 1e12 + 0.75], [-1000000000000, 1000000000000]),
    ("Float32", "Bool", [0.0, -0.0, 1e-30, np.nan, -np.inf], [False, False, True, True, True]),
    ("Int64", "Int32", [2 ** 32 + 5, -1, 2 ** 31], [5, -1, -(2 ** 31)]),  # the low 32 bits
    ("Bool", "Float64", [True, False], [1.0, 0.0]),
    ("Int64", "Float32", [16777217], [16777216.0]),  # rounded to nearest
])
def test_cast_edge_cases(src: str, to: str, values: list, want: list) -> None:
    x = np.array(values, dtype=gradir.DType(src).numpy)
    got = _run(f'input t0 : {src} [{len(values)}]\nt1 = Cast(t0, to="{to}")\noutput t1\n', t0=x)["t1"]
    assert got.dtype == gradir.DType(to).numpy
    np.testing.assert_array_equal(got, np.array(want, gradir.DType(to).numpy))


def _grads(text: str, wrt: list[str], feed: dict, dy: np.ndarray) -> list[np.ndarray]:
    back = gradir.grad(gradir.parse(text, "f.gir"), wrt=wrt)
    cot = back.inputs[-1].name
    got = gradir.compile(back).run({**feed, cot: dy})
    return [got[o] for o in back.outputs]


def test_max_and_min_split_dy_evenly_among_tied_operands_as_ort() -> None:
    """ORT's builder: mask_i = Cast(Equal(X_i, Y)), dY / Sum(masks) * mask_i; b is broadcast, so its share is
    summed over the rows."""
    a = np.array([[1.0, 5.0, 2.0], [3.0, 3.0, 3.0]])
    b = np.array([3.0, 5.0, 1.0])
    dy = np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])
    for op, pick in (("Max", np.maximum), ("Min", np.minimum)):
        text = f"input t0 : Float64 [2, 3]\ninput t1 : Float64 [3]\nt2 = {op}(t0, t1)\noutput t2\n"
        da, db = _grads(text, ["t0", "t1"], {"t0": a, "t1": b}, dy)
        y = pick(a, b)
        ma, mb = (a == y).astype(float), (b == y).astype(float)
        np.testing.assert_array_equal(da, dy / (ma + mb) * ma)
        np.testing.assert_array_equal(db, (dy / (ma + mb) * mb).sum(axis=0))
        if op == "Max":  # the tie at [0, 1] (5 and 5): half of dY each; b also wins [1, 1] whole
            assert da[0, 1] == 1.0 and db[1] == 1.0 + 16.0


def test_reduce_max_gives_every_tied_position_the_whole_dy_as_ort() -> None:
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]])
    text = "input t0 : Float64 [2, 3]\nt1 = ReduceMax(t0, axes=[1])\noutput t1\n"
    (dx,) = _grads(text, ["t0"], {"t0": x}, np.array([10.0, 7.0]))
    np.testing.assert_array_equal(dx, [[0.0, 10.0, 10.0], [7.0, 0.0, 0.0]])


def test_pow_exponent_gradient_is_log_x_times_y_where_x_is_positive_else_zero() -> None:
    x = np.array([2.0, 0.0, -2.0, 0.5])
    p = np.array([1.5, 2.0, 2.0, -1.0])
    text = "input t0 : Float64 [4]\ninput t1 : Float64 [4]\nt2 = Pow(t0, t1)\noutput t2\n"
    dx, dp = _grads(text, ["t0", "t1"], {"t0": x, "t1": p}, np.ones(4))
    np.testing.assert_allclose(dx, p * x ** (p - 1), rtol=1e-15)
    np.testing.assert_allclose(dp, [np.log(2.0) * 2.0 ** 1.5, 0.0, 0.0, np.log(0.5) / 0.5], rtol=1e-15)


def test_where_gradient_is_summed_back_to_a_broadcast_operand() -> None:
    c = np.array([[True, False], [False, False], [True, True]])
    text = "input t0 : Bool [3, 2]\ninput t1 : Float64 [3, 2]\ninput t2 : Float64 [2]\nt3 = Where(t0, t1, t2)\n" \
           "output t3\n"
    dy = np.arange(6.0).reshape(3, 2) + 1
    dx, dz = _grads(text, ["t1", "t2"], {"t0": c, "t1": np.zeros((3, 2)), "t2": np.zeros(2)}, dy)
    np.testing.assert_array_equal(dx, np.where(c, dy, 0))
    np.testing.assert_array_equal(dz, np.where(c, 0, dy).sum(axis=0))


@pytest.mark.parametrize("line, expected", [
    ("t2 = Where(t0, t0, t1)", r"t\.gir:3:\d+: error: .*condition \(t0\) has dtype Float32; expected Bool"),
    ("t2 = And(t0, t1)", r"t\.gir:3:\d+: error: .*operand A \(t0\) has dtype Float32; expected Bool"),
    ("t2 = Not(t1)", r"t\.gir:3:\d+: error: .*operand X \(t1\) has dtype Float32; expected Bool"),
    ('t2 = Cast(t0, to="Float16")', r"t\.gir:3:\d+: error: .*to"),
    ("t2 = Less(t0, t1)", None),
])
def test_type_errors_are_located_at_the_op(line: str, expected) -> None:
    text = f"input t0 : Float32 [2, 3]\ninput t1 : Float32 [3]\n{line}\noutput t2\n"
    if expected is None:
        gradir.parse(text, "t.gir")
        return
    with pytest.raises(gradir.GradirError, match=expected):
        gradir.parse(text, "t.gir")


def test_sparse_softmax_cross_entropy_refuses_a_label_out_of_range_at_run_time() -> None:
    text = ("input t0 : Float32 [2, 3]\ninput t1 : Int64 [2]\n"
            't2, t3 = SparseSoftmaxCrossEntropy(t0, t1, reduction="sum")\noutput t2\n')
    with pytest.raises(ExecutionError, match=r"label 3 at labels\[1\] is out of range: expected 0\.\.2"):
        _run(text, t0=np.zeros((2, 3), np.float32), t1=np.array([0, 3]))


def test_softmax_cross_entropy_none_gives_one_loss_per_row() -> None:
    """ORT's schema infers one loss per row for "none" (its CPU kernel writes one number: gradir follows the
    schema)."""
    x = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    lab = np.array([[0.0, 1.0, 0.0], [0.25, 0.25, 0.5]])
    text = ('input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 3]\nt2, t3 = SoftmaxCrossEntropy(t0, t1, '
            'reduction="none")\noutput t2, t3\n')
    got = _run(text, t0=x, t1=lab)
    lp = x - x.max(axis=1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(got["t2"], -(lab * lp).sum(axis=1), rtol=1e-14)
    np.testing.assert_allclose(got["t3"], lp, rtol=1e-14)


def test_sparse_cross_entropy_gradient_is_ort_grad_op_and_matches_finite_differences() -> None:
    text = ("input t0 : Float64 [3, 4]\ninput t1 : Int64 [3]\ninput t2 : Float64 [3]\n"
            "t3, t4 = SparseSoftmaxCrossEntropy(t0, t1, t2)\noutput t3\n")
    g = gradir.parse(text, "f.gir")
    back = gradir.grad(g, wrt=["t0"])
    assert [op.op_name for op in back.ops] == ["SparseSoftmaxCrossEntropy", "SparseSoftmaxCrossEntropyGrad"]
    rng = np.random.default_rng(0)
    feed = {"t0": rng.standard_normal((3, 4)), "t1": np.array([0, 3, 1]), "t2": np.array([0.5, 1.0, 2.0])}
    report = gradir.gradcheck(g, ["t0"], seed=0, inputs=feed)
    assert report.ok, report.table()


def test_an_onnx_pow_with_an_integer_exponent_imports_through_a_cast() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper as h
    node = h.make_node("Pow", ["x", "p"], ["y"], name="pow")
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, [3])],
                         [h.make_tensor_value_info("y", T.FLOAT, [3])],
                         [onnx.numpy_helper.from_array(np.array(3, np.int64), "p")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    im = gradir.import_onnx(model)
    assert [op.op_name for op in im.graph.ops if op.op_name in ("Cast", "Pow")] == ["Cast", "Pow"]
    x = np.array([-2.0, 0.5, 3.0], np.float32)
    got = gradir.compile(im.graph).run({im.graph.inputs[0].name: x, **im.inputs})
    np.testing.assert_allclose(list(got.values())[0], x ** 3, rtol=1e-6)


def test_cast_to_a_dtype_gradir_lacks_is_refused_naming_it() -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper as h
    node = h.make_node("Cast", ["x"], ["y"], name="half", to=T.FLOAT16)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, [3])],
                         [h.make_tensor_value_info("y", T.FLOAT16, [3])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(gradir.OnnxError, match=r"node 'half' \(ai.onnx Cast\): to=FLOAT16: gradir's dtypes are"):
        gradir.import_onnx(model)


def test_a_where_with_an_int_condition_is_a_verify_error_from_the_builder() -> None:
    b = gradir.GraphBuilder()
    c = b.input("Int32", [2])
    x = b.input("Float32", [2])
    with pytest.raises((VerifyError, gradir.BuilderError), match="expected Bool"):
        b.Where(c, x, x)
