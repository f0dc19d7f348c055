"""The ONNX importer's general machinery (gradir/interop/onnx: folding.py, patterns.py, unsupported.py): shape
arithmetic on values known at import time, the ``--dim`` message of a symbolic dimension, the one error that
lists every node that cannot be imported (those downstream of another included), the tanh-GELU fused into
``FastGelu``, and PyTorch's exports of transformer layers (scripts/ort_fixtures/torch_models/layer_*.onnx)."""

from __future__ import annotations

import glob
import math
import os

import numpy as np
import pytest

import gradir
from gradir.interop.onnx import import_onnx
from gradir.interop.onnx.folding import FOLDABLE
from gradir.interop.onnx.import_ops import handlers

import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import onnx_models as M
from cli_runner import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = sorted(glob.glob(os.path.join(ROOT, "scripts", "ort_fixtures", "torch_models", "layer_*.onnx")))
I64 = np.int64


def _i64(*v: int) -> np.ndarray:
    return np.array(v, I64)


def _folded(nodes: list, out: str, inits: dict, x_shape: tuple = (2, 3, 4), out_type: int = T.INT64) -> np.ndarray:
    """The value of ``out``, computed from ``x``'s shape and ``inits`` at import time: the imported graph is
    one ``Constant`` (nothing computed when it runs)."""
    m = M.make(nodes, [M.vi("x", list(x_shape))], [h.make_tensor_value_info(out, out_type, None)], inits)
    want = ReferenceEvaluator(m).run(None, {"x": np.zeros(x_shape, np.float32)})[0]  # only for the output's shape
    m = M.make(nodes, [M.vi("x", list(x_shape))], [h.make_tensor_value_info(out, out_type, want.shape)], inits)
    g = import_onnx(m).graph
    assert [op.op_name for op in g.ops] == ["Constant"], g.to_text()
    return gradir.compile(g).run({"x": np.zeros(x_shape, np.float32)})[out]


# -- shape arithmetic folded at import ---------------------------------------------------------------------
def test_shape_gather_of_a_shape_and_size_fold() -> None:
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i"], ["d"], axis=0)]
    assert _folded(nodes, "d", {"i": np.array(-1, I64)}).tolist() == 4
    assert _folded(nodes, "d", {"i": _i64(2, 0)}).tolist() == [4, 2]
    nodes = [h.make_node("Shape", ["x"], ["s"], start=1, end=-1)]
    assert _folded(nodes, "s", {}).tolist() == [3]
    assert _folded([h.make_node("Size", ["x"], ["n"])], "n", {}).tolist() == 24


@pytest.mark.parametrize("fmod,a,b,want", [
    (0, [7, -7, 7, -7], [3, 3, -3, -3], [1, 2, -2, -1]),  # the sign of the divisor (Python's %)
    (1, [7, -7, 7, -7], [3, 3, -3, -3], [1, -1, 1, -1]),  # the sign of the dividend (C's fmod)
])
def test_mod_of_two_constants_folds_with_onnx_signs(fmod: int, a: list, b: list, want: list) -> None:
    """nn.MultiheadAttention's TorchScript export computes ``Mod`` of two constants (it was refused: gradir has
    no Mod op)."""
    nodes = [h.make_node("Mod", ["a", "b"], ["r"], fmod=fmod)]
    assert _folded(nodes, "r", {"a": _i64(*a), "b": _i64(*b)}).tolist() == want


def test_integer_div_truncates_toward_zero_exactly() -> None:
    nodes = [h.make_node("Div", ["a", "b"], ["q"])]
    assert _folded(nodes, "q", {"a": _i64(7, -7, 7, -7, 6), "b": _i64(2, 2, -2, -2, 3)}).tolist() == [3, -3, -3, 3, 2]
    big = 2 ** 53 + 1  # not a float64: an evaluation in floats is off by one
    assert _folded(nodes, "q", {"a": _i64(big, -big), "b": _i64(1, 1)}).tolist() == [big, -big]
    # the shape arithmetic of a head split: Shape -> Gather -> Div
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i"], ["d"], axis=0),
             h.make_node("Div", ["d", "two"], ["half"])]
    assert _folded(nodes, "half", {"i": np.array(2, I64), "two": np.array(2, I64)}).tolist() == 2


@pytest.mark.parametrize("op", ["Div", "Mod"])
def test_integer_division_by_zero_is_a_located_error(op: str) -> None:
    m = M.make([h.make_node(op, ["a", "b"], ["r"], name="bad")], [M.vi("x", [2])], [M.vi("r", [2], T.INT64)],
               {"a": _i64(1, 2), "b": _i64(1, 0)})
    with pytest.raises(gradir.OnnxError, match=f"node 'bad' \\(ai.onnx {op}\\): .*integers by zero"):
        import_onnx(m)


def test_range_constant_of_shape_and_concat_of_shapes_fold() -> None:
    nodes = [h.make_node("Range", ["s0", "lim", "step"], ["r"])]
    assert _folded(nodes, "r", {"s0": np.array(1, I64), "lim": np.array(8, I64), "step": np.array(3, I64)}).tolist() \
        == [1, 4, 7]
    nodes = [h.make_node("Shape", ["x"], ["s"], end=2), h.make_node("Concat", ["s", "m1"], ["c"], axis=0)]
    assert _folded(nodes, "c", {"m1": _i64(-1)}).tolist() == [2, 3, -1]
    nodes = [h.make_node("Shape", ["x"], ["s"], start=1),
             h.make_node("ConstantOfShape", ["s"], ["z"], value=h.make_tensor("v", T.INT64, [1], [7]))]
    assert _folded(nodes, "z", {}).tolist() == [[7] * 4] * 3


def test_unsqueeze_squeeze_cast_equal_where_slice_expand_of_known_values_fold() -> None:
    """The mask and head-size plumbing PyTorch writes, on values known at import time."""
    s = [h.make_node("Shape", ["x"], ["s"])]
    assert _folded(s + [h.make_node("Unsqueeze", ["s", "ax"], ["u"])], "u", {"ax": _i64(0)}).tolist() == [[2, 3, 4]]
    assert _folded([h.make_node("Squeeze", ["v", "ax"], ["q"])], "q", {"v": _i64(5).reshape(1, 1), "ax": _i64(0)}
                   ).tolist() == [5]
    assert _folded(s + [h.make_node("Cast", ["s"], ["f"], to=T.FLOAT)], "f", {}, out_type=T.FLOAT).tolist() == \
        [2.0, 3.0, 4.0]
    eq = s + [h.make_node("Equal", ["s", "m"], ["e"]), h.make_node("Where", ["e", "one", "s"], ["w"])]
    assert _folded(eq, "w", {"m": _i64(2, -1, 4), "one": _i64(1)}).tolist() == [1, 3, 1]
    sl = s + [h.make_node("Slice", ["s", "st", "en", "ax", "sp"], ["t"])]
    assert _folded(sl, "t", {"st": _i64(-1), "en": _i64(-(2 ** 63)), "ax": _i64(0), "sp": _i64(-1)}).tolist() == \
        [4, 3, 2]
    ex = [h.make_node("Expand", ["v", "shape"], ["y"])]
    assert _folded(ex, "y", {"v": _i64(1, 2), "shape": _i64(2, 1)}).tolist() == [[1, 2], [1, 2]]


def test_a_folded_shape_feeds_a_reshape() -> None:
    """Shape -> Gather -> Div -> Concat -> Reshape, as a head split writes it: one Reshape with the sizes."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i"], ["d"], axis=0),
             h.make_node("Div", ["d", "two"], ["half"]), h.make_node("Unsqueeze", ["half", "ax"], ["u"]),
             h.make_node("Concat", ["lead", "two1", "u"], ["shape"], axis=0),
             h.make_node("Reshape", ["x", "shape"], ["y"], name="split")]
    m = M.make(nodes, [M.vi("x", [2, 3, 4])], [M.vi("y", [2, 3, 2, 2])],
               {"i": np.array(-1, I64), "two": np.array(2, I64), "ax": _i64(0), "lead": _i64(0, 0), "two1": _i64(2)})
    g = import_onnx(m).graph
    assert [op.op_name for op in g.ops] == ["Reshape"] and "shape=[2, 3, 2, 2]" in g.to_text()


# -- a symbolic dimension ------------------------------------------------------------------------------------
def test_a_shape_that_needs_a_symbolic_dimension_names_it_and_the_dim_option(tmp_path, capsys) -> None:
    """The message names the dimension the computation needs, as ONNX's shape inference carries it through
    the graph (here through a Transpose, to dimension 1), and the ``--dim`` that gives it a size."""
    nodes = [h.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]), h.make_node("Shape", ["xt"], ["s"], name="sh"),
             h.make_node("Reshape", ["xt", "s"], ["y"])]
    m = M.make(nodes, [M.vi("x", ["batch", 3, 4])], [M.vi("y", [3, "batch", 4])], {})
    with pytest.raises(gradir.OnnxError, match=r"node 'sh' \(ai.onnx Shape\): the shape of its input \(Float32 "
                                               r"\[3, \?, 4\]\) is not known at import time: its dimension 1 is the "
                                               r"symbolic dimension 'batch'; .* --dim batch=SIZE"):
        import_onnx(m)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    rc, _, err = run_cli(["import", path], capsys)
    assert rc == 1 and "--dim batch=SIZE" in err and "Traceback" not in err
    rc, out, err = run_cli(["import", path, "--dim", "batch=2"], capsys)
    assert rc == 0, err
    assert "Reshape(" in out and "shape=[3, 2, 4]" in out


def test_shape_of_part_of_a_shape_needs_only_that_part() -> None:
    nodes = [h.make_node("Shape", ["x"], ["s"], name="sh", start=1)]
    m = M.make(nodes, [M.vi("x", ["b", "t", 4])], [M.vi("s", [2], T.INT64)], {})
    with pytest.raises(gradir.OnnxError, match=r"its dimension 1 is the symbolic dimension 't'; .* --dim t=SIZE"):
        import_onnx(m)


# -- every unsupported node in one error -------------------------------------------------------------------
def _unsupported_chain() -> onnx.ModelProto:
    """``Hardmax`` (no gradir op) feeding another op gradir lacks, an op it has (fine), and an op it has that
    refuses what it is given (a Reshape of 9 elements to 16), which feeds another op gradir lacks."""
    nodes = [h.make_node("Hardmax", ["x"], ["u"], name="first"),
             h.make_node("Det", ["u"], ["d"], name="after_first"),
             h.make_node("Relu", ["u"], ["r"], name="fine"),
             h.make_node("Reshape", ["r", "shape"], ["rs"], name="bad_reshape"),
             h.make_node("Hardmax", ["rs"], ["u2"], name="after_bad"),
             h.make_node("Tanh", ["u2"], ["t"], name="fine_too")]
    return M.make(nodes, [M.vi("x", [3, 3])], [M.vi("d", []), M.vi("t", [4, 4])], {"shape": _i64(4, 4)})


def test_every_unsupported_node_is_listed_including_those_downstream_of_another(tmp_path, capsys) -> None:
    with pytest.raises(gradir.OnnxError) as e:
        import_onnx(_unsupported_chain())
    lines = [d.message for d in e.value.diagnostics]
    assert lines[0] == "4 nodes cannot be imported:"
    assert lines[1] == "node 'first' (ai.onnx Hardmax): gradir has no equivalent op"
    assert lines[2] == "node 'after_first' (ai.onnx Det): gradir has no equivalent op"
    assert lines[3].startswith("node 'bad_reshape' (ai.onnx Reshape): ")
    assert lines[4] == "node 'after_bad' (ai.onnx Hardmax): gradir has no equivalent op"
    path = tmp_path / "m.onnx"
    onnx.save(_unsupported_chain(), str(path))
    rc, _, err = run_cli(["import", path], capsys)
    assert rc == 1 and "Traceback" not in err and err.count(f"{path}: error: node ") == 4


def test_a_refusal_that_may_come_from_an_unsupported_input_says_where_the_input_comes_from() -> None:
    """Reshape's shape is a value an unsupported node computes (gradir's Reshape needs it at import): the
    Reshape is listed, saying so.  (Pow was the example before it became a gradir op with a tensor exponent.)"""
    nodes = [h.make_node("ArgMax", ["e0"], ["e"], name="first", keepdims=1),
             h.make_node("Reshape", ["x", "e"], ["y"], name="reshape")]
    m = M.make(nodes, [M.vi("x", [3]), M.vi("e0", [1])], [M.vi("y", [3])], {})
    with pytest.raises(gradir.OnnxError) as e:
        import_onnx(m)
    msg = str(e.value)
    assert "2 nodes cannot be imported" in msg
    assert "its input 'e' comes from node 'first' (ai.onnx ArgMax), which cannot be imported" in msg


# -- the tanh-GELU as FastGelu -----------------------------------------------------------------------------
def _gelu_nodes(cube: str, end: str, swap: bool) -> tuple[list, dict]:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) over ``x``, the cube written ``cube``, the 0.5 applied
    as ``end``; ``swap`` puts each constant on the other side of its Mul/Add."""
    def op(t: str, a: str, b: str, out: str) -> object:
        return h.make_node(t, [b, a] if swap else [a, b], [out], name=out)
    inits = {"three": np.array(3.0, np.float32), "k": np.array(0.044715, np.float32),
             "c": np.array(math.sqrt(2 / math.pi), np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32)}
    if cube == "x*(1+k*x*x)":  # ORT's second form of the polynomial
        nodes = [h.make_node("Mul", ["x", "x"], ["x2"], name="x2"), op("Mul", "x2", "k", "kx2"),
                 op("Add", "kx2", "one", "p1"), op("Mul", "x", "p1", "inner")]
    elif cube == "pow":
        nodes = [h.make_node("Pow", ["x", "three"], ["x3"], name="x3")]
    elif cube == "x*(x*x)":
        nodes = [h.make_node("Mul", ["x", "x"], ["x2"], name="x2"), op("Mul", "x", "x2", "x3")]
    else:
        nodes = [h.make_node("Mul", ["x", "x"], ["x2"], name="x2"), op("Mul", "x2", "x", "x3")]
    if cube != "x*(1+k*x*x)":
        nodes += [op("Mul", "x3", "k", "kx3"), op("Add", "x", "kx3", "inner")]
    nodes += [op("Mul", "inner", "c", "scaled"), h.make_node("Tanh", ["scaled"], ["t"], name="t"),
              op("Add", "t", "one", "onet")]
    if end == "(x*(1+t))*0.5":
        nodes += [op("Mul", "x", "onet", "xo"), op("Mul", "xo", "half", "y")]
    elif end == "(x*0.5)*(1+t)":
        nodes += [op("Mul", "x", "half", "xh"), op("Mul", "xh", "onet", "y")]
    else:
        nodes += [op("Mul", "onet", "half", "ho"), op("Mul", "x", "ho", "y")]
    return nodes, inits


def _check_gelu(m: onnx.ModelProto, fused: bool) -> None:
    x = np.linspace(-4, 4, 24, dtype=np.float32).reshape(4, 6)
    im = import_onnx(m)
    ops = [op.op_name for op in im.graph.ops]
    assert ("FastGelu" in ops) == fused and ("Tanh" in ops) != fused, im.graph.to_text()
    got = gradir.compile(im.graph).run({"x": x, **im.inputs})
    for k, want in zip([o.name for o in m.graph.output], ReferenceEvaluator(m).run(None, {"x": x})):
        np.testing.assert_allclose(got[k], want, rtol=0, atol=1e-6 * np.abs(want).max(), err_msg=k)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("end", ["(x*(1+t))*0.5", "(x*0.5)*(1+t)", "x*(0.5*(1+t))"])
@pytest.mark.parametrize("cube", ["pow", "x*(x*x)", "(x*x)*x", "x*(1+k*x*x)"])
def test_the_tanh_gelu_is_fused_into_fast_gelu_in_each_form(cube: str, end: str, swap: bool) -> None:
    nodes, inits = _gelu_nodes(cube, end, swap)
    m = M.make(nodes, [M.vi("x", [4, 6])], [M.vi("y", [4, 6])], inits)
    _check_gelu(m, fused=True)
    assert any("tanh-written GELU into FastGelu" in n for n in import_onnx(m).notes)


@pytest.mark.parametrize("other", ["x2", "x3", "inner", "t", "onet", "xo"])
def test_the_tanh_gelu_is_not_fused_when_an_intermediate_has_another_reader(other: str) -> None:
    nodes, inits = _gelu_nodes("x*(x*x)", "(x*(1+t))*0.5", False)
    nodes.append(h.make_node("Neg", [other], ["other"], name="other_reader"))
    m = M.make(nodes, [M.vi("x", [4, 6])], [M.vi("y", [4, 6]), M.vi("other", [4, 6])], inits)
    _check_gelu(m, fused=False)
    # an intermediate that is a graph output is read too
    nodes, inits = _gelu_nodes("x*(x*x)", "x*(0.5*(1+t))", True)
    m = M.make(nodes, [M.vi("x", [4, 6])], [M.vi("y", [4, 6]), M.vi("x2", [4, 6])], inits)
    _check_gelu(m, fused=False)
    nodes, inits = _gelu_nodes("x*(1+k*x*x)", "(x*0.5)*(1+t)", False)
    nodes.append(h.make_node("Neg", ["p1"], ["other"], name="other_reader"))
    _check_gelu(M.make(nodes, [M.vi("x", [4, 6])], [M.vi("y", [4, 6]), M.vi("other", [4, 6])], inits), fused=False)


def test_a_gelu_with_other_constants_is_not_fused() -> None:
    nodes, inits = _gelu_nodes("(x*x)*x", "(x*0.5)*(1+t)", False)
    inits["k"] = np.array(0.05, np.float32)
    _check_gelu(M.make(nodes, [M.vi("x", [4, 6])], [M.vi("y", [4, 6])], inits), fused=False)


# -- PyTorch's exports of transformer layers -----------------------------------------------------------------
# ops that only compute shapes, masks' sizes and scales in these exports: each must fold, never be listed
PLUMBING = {"Shape", "Size", "Mod", "Div", "Range", "ConstantOfShape", "Concat", "Unsqueeze", "Squeeze", "Cast",
            "Equal", "Where", "Slice", "Expand", "Reshape", "Constant", "Sqrt", "Gather"}


def _expected_unsupported(m: onnx.ModelProto) -> set[str]:
    """The nodes an import must list: those computing something not known at import time, of an op type no
    handler imports (a simple re-derivation of what folds: constants, shapes (every shape is static once the
    inputs' are), foldable ops of known values)."""
    have = handlers()
    known = {t.name for t in m.graph.initializer if t.data_type in (T.INT64, T.INT32) or
             np.prod(t.dims, dtype=np.int64) <= 1}
    out = set()
    for n in m.graph.node:
        if n.op_type == "Constant" or n.op_type in ("Shape", "Size") or \
                n.op_type in FOLDABLE and all(i in known for i in n.input if i):
            known.update(n.output)
        elif (n.domain or "", n.op_type) not in have:
            out.add(n.name)
    return out


@pytest.mark.parametrize("path", LAYERS, ids=[os.path.basename(p)[6:-5] for p in LAYERS])
def test_pytorch_layer_exports_import_up_to_exactly_the_ops_gradir_lacks(path: str) -> None:
    """Every shape computation folds; what is listed is exactly the nodes of ops gradir lacks (none once
    they are all there: then the model runs as ONNX's reference computes it)."""
    m = onnx.load(path)
    dims = {"batch": 2} if "dynbatch" in path else {}
    want = _expected_unsupported(m)
    try:
        im = import_onnx(path, dims=dims)
    except gradir.OnnxError as e:
        listed = e.value.diagnostics if hasattr(e, "value") else e.diagnostics
        lines = [d.message for d in listed[1:]]
        assert all(line.endswith("): gradir has no equivalent op") for line in lines), lines
        names = {line.split("'")[1] for line in lines}
        types = {line.split(" (")[1].split(")")[0].split()[-1] for line in lines}
        assert not types & PLUMBING - {"Gather"}, types  # a Gather of data (an embedding, q/k/v) is no plumbing
        assert names == want
        return
    assert not want
    if any(n.op_type == "Dropout" for n in m.graph.node) and "_train" in path:
        return  # a random mask: the dropout slice's tests compare it
    rng = np.random.default_rng(0)
    feed = {}
    for vi in m.graph.input:
        shape = [d.dim_value or dims[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        feed[vi.name] = rng.integers(0, 5, shape).astype(np.int64) if vi.type.tensor_type.elem_type == T.INT64 \
            else rng.standard_normal(shape).astype(np.float32)
    want_out = ReferenceEvaluator(m).run(None, feed)
    got = gradir.compile(im.graph).run({**feed, **im.inputs})
    for o, w in zip(m.graph.output, want_out):
        np.testing.assert_allclose(got[o.name], w, rtol=0, atol=1e-5 * max(np.abs(w).max(), 1e-30), err_msg=o.name)


def test_the_transformer_encoder_export_needs_only_the_dim_of_its_batch() -> None:
    """With a symbolic batch, the TorchScript export's shape arithmetic says which dimension to give."""
    path = next(p for p in LAYERS if p.endswith("layer_encoder_ts_dynbatch.onnx"))
    with pytest.raises(gradir.OnnxError) as e:
        import_onnx(path)
    shapes = [d.message for d in e.value.diagnostics if "(ai.onnx Shape)" in d.message]
    assert shapes and all("symbolic dimension 'batch'" in s and "--dim batch=SIZE" in s for s in shapes)


def test_the_erf_gelu_with_its_half_applied_to_one_plus_erf_is_fused_too() -> None:
    """``x * (0.5 * (1 + erf(x / sqrt 2)))``: the grouping the dynamo exporter writes for the tanh one."""
    nodes = [h.make_node("Div", ["x", "r2"], ["d"]), h.make_node("Erf", ["d"], ["e"]),
             h.make_node("Add", ["e", "one"], ["a"]), h.make_node("Mul", ["half", "a"], ["ha"]),
             h.make_node("Mul", ["x", "ha"], ["y"])]
    inits = {"r2": np.array(math.sqrt(2), np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32)}
    im = import_onnx(M.make(nodes, [M.vi("x", [4, 6])], [M.vi("y", [4, 6])], inits))
    assert [op.op_name for op in im.graph.ops] == ["Gelu"]


def test_a_node_after_a_refused_op_the_importer_also_folds_is_still_listed() -> None:
    """``Reshape`` folds when its input is known; refused on a value the graph computes, what it computes is no
    value that might have been known at import time: the ``Mod`` after it (which only folds) is listed."""
    nodes = [h.make_node("Reshape", ["x", "shape"], ["r"], name="bad"),
             h.make_node("Mod", ["r", "r"], ["m"], name="mod", fmod=1)]
    m = M.make(nodes, [M.vi("x", [3])], [M.vi("m", [4])], {"shape": _i64(4)})
    with pytest.raises(gradir.OnnxError) as e:
        import_onnx(m)
    msg = str(e.value)
    assert "2 nodes cannot be imported" in msg and "node 'bad' (ai.onnx Reshape)" in msg
    assert "node 'mod' (ai.onnx Mod): gradir has no equivalent op" in msg


def test_a_handler_that_cannot_take_a_placeholder_leaves_the_listing_as_it_was(monkeypatch) -> None:
    """A placeholder only serves the listing: a handler failing on one in a way of its own (not a refusal) makes
    the node one skipped, not a crash of the import."""
    from gradir.interop.onnx import import_ops

    def fragile(ctx, node, attrs):
        raise ValueError("a handler's assumption")
    monkeypatch.setitem(import_ops.HANDLERS, ("", "Relu"), fragile)
    nodes = [h.make_node("Hardmax", ["x"], ["u"], name="first"), h.make_node("Relu", ["u"], ["r"], name="relu")]
    m = M.make(nodes, [M.vi("x", [3, 3])], [M.vi("r", [3, 3])], {})
    with pytest.raises(gradir.OnnxError, match="1 node cannot be imported"):
        import_onnx(m)
