"""The indexing, joining and shape ops (Gather*, Slice*, Split*, Concat*, Trilu, Expand, Squeeze) beyond what the
conformance suite checks on their examples: index edge cases, run-time errors, the gradients' ops, sharded
embeddings and the ONNX opset forms of import and export."""

from __future__ import annotations

import numpy as np
import pytest

import gradir
from gradir.errors import ExecutionError, GradirError, OnnxError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

from onnx_models import make, vi  # noqa: E402

I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def _run(text: str, **inputs: np.ndarray) -> dict:
    return gradir.compile(gradir.parse(text)).run(inputs)


def _ops(graph: gradir.Graph) -> list[str]:
    return [op.op_name for op in graph.ops]


def _import(nodes: list, inputs: list, outputs: list, inits: dict, opset: int = 17, ms: bool = False) -> gradir.Graph:
    return gradir.import_onnx(make(nodes, inputs, outputs, inits, opset=opset, ms=ms).SerializeToString()).graph


# -- Gather ---------------------------------------------------------------------------------------------------
def test_gather_takes_negative_and_scalar_int32_indices() -> None:
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    got = _run("input t0 : Float32 [4, 3]\ninput t1 : Int32 scalar\nt2 = Gather(t0, t1, axis=1)\noutput t2\n",
               t0=table, t1=np.array(-1, np.int32))
    np.testing.assert_array_equal(got["t2"], table[:, 2])
    assert got["t2"].shape == (4,)


def test_gather_out_of_range_index_is_a_runtime_error_naming_the_op() -> None:
    with pytest.raises(ExecutionError, match=r"Gather: index -5 at indices\[1\] is out of range for axis 0 of size 4"):
        _run("input t0 : Float32 [4, 3]\ninput t1 : Int64 [2]\nt2 = Gather(t0, t1)\noutput t2\n",
             t0=np.zeros((4, 3), np.float32), t1=np.array([3, -5]))


def test_gather_indices_must_be_integers_located_at_the_op() -> None:
    with pytest.raises(GradirError, match=r"g.gir:3:\d+: error: Gather: operand indices .* expected Int32 or Int64"):
        gradir.parse("input t0 : Float32 [4, 3]\ninput t1 : Float32 [2]\nt2 = Gather(t0, t1)\noutput t2\n", "g.gir")


def test_gather_grad_adds_repeated_indices_in_their_order_with_or_without_numba() -> None:
    from gradir.backends.cpu.kernels import jit
    from gradir.backends.cpu.kernels.index import gather_grad
    rng = np.random.default_rng(0)
    idx = np.array([2, -1, 2, 0, 2, 3])
    dy = (rng.standard_normal((6, 5)) * 1e4).astype(np.float32)
    want = np.zeros((4, 5), np.float32)
    for j, t in enumerate(idx % 4):
        want[t] += dy[j]
    got = gather_grad(idx, dy, shape=[4, 5], axis=0)
    with jit.disabled():
        plain = gather_grad(idx, dy, shape=[4, 5], axis=0)
    assert got.tobytes() == want.tobytes() == plain.tobytes()


def test_gather_grad_of_an_embedding_is_one_call_not_a_loop_per_index() -> None:
    from gradir.backends.cpu.kernels.index import gather_grad
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 8192, (8, 256))
    dy = rng.standard_normal((8, 256, 16)).astype(np.float32)
    got = gather_grad(idx, dy, shape=[8192, 16], axis=0)
    want = np.zeros((8192, 16), np.float32)
    np.add.at(want, idx.reshape(-1), dy.reshape(-1, 16))
    assert got.tobytes() == want.tobytes()


def test_gathers_differentiate_to_ort_gradient_ops() -> None:
    g = gradir.parse("input t0 : Float64 [5, 3]\ninput t1 : Int64 [4]\ninput t2 : Int64 [2, 3]\n"
                     "t3 = Gather(t0, t1)\nt4 = GatherElements(t0, t2, axis=0)\noutput t3, t4\n")
    names = _ops(gradir.grad(g, ["t0"]))
    assert "GatherGrad" in names and "GatherElementsGrad" in names


def test_an_embedding_sharded_along_the_tokens_has_the_unsharded_bits() -> None:
    text = ("input t0 \"table\" : Float32 [10, 3]\ninput t1 \"ids\" : Int64 [8, 2]\nt2 = Gather(t0, t1)\n"
            "t3 = ReduceSum(t2)\noutput t3\n")
    g = gradir.grad(gradir.parse(text), ["t0"])
    rng = np.random.default_rng(2)
    feed = {"t0": rng.standard_normal((10, 3)).astype(np.float32), "t1": rng.integers(-10, 10, (8, 2)),
            g.inputs[-1].name: np.array(1.0, np.float32)}
    want = gradir.compile(g).run(feed)
    sharded = gradir.shard(g, {"t1": 0})
    assert "GatherGrad" in _ops(g)
    for k in (2, 4):
        got = sharded.run(feed, shards=k, client="inline")
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-6)


# -- Slice ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("starts, ends, steps, want", [
    ([I64_MIN], [I64_MAX], [1], slice(None)),
    ([100], [I64_MIN], [-1], slice(None, None, -1)),
    ([-100], [3], [2], slice(0, 3, 2)),
    ([-2], [-100], [-2], slice(4, None, -2)),
])
def test_slice_clamps_as_onnx_says(starts: list, ends: list, steps: list, want: slice) -> None:
    x = np.arange(6, dtype=np.float64)
    got = _run(f"input t0 : Float64 [6]\nt1 = Slice(t0, starts={starts}, ends={ends}, steps={steps})\noutput t1\n",
               t0=x)
    np.testing.assert_array_equal(got["t1"], x[want])


def test_an_empty_slice_is_a_located_type_error() -> None:
    with pytest.raises(GradirError, match=r"s.gir:2:\d+: error: Slice: the slice 3:1:1 of axis 0 \(size 6\) is empty"):
        gradir.parse("input t0 : Float64 [6]\nt1 = Slice(t0, starts=[3], ends=[1])\noutput t1\n", "s.gir")


def test_slice_differentiates_to_slice_grad() -> None:
    g = gradir.parse("input t0 : Float64 [6, 4]\nt1 = Slice(t0, starts=[-1], ends=[0], axes=[1], steps=[-2])\n"
                     "output t1\n")
    d = gradir.grad(g)
    assert "SliceGrad" in _ops(d)
    assert gradir.gradcheck(g, seed=0).ok


def test_slice_imports_in_both_opset_forms() -> None:
    x = vi("x", [4, 6])
    old = _import([h.make_node("Slice", ["x"], ["y"], starts=[1], ends=[-1], axes=[1])], [x], [vi("y", [4, 4])], {},
                  opset=9)
    new = _import([h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], [x], [vi("y", [4, 2])],
                  {"s": np.array([-1]), "e": np.array([I64_MIN]), "a": np.array([1]), "st": np.array([-3])}, opset=13)
    assert old.ops[0].attrs["starts"] == (1,) and old.ops[0].attrs["axes"] == (1,)
    assert new.ops[0].attrs["steps"] == (-3,) and str(new.types[new.ops[0].results[0]]) == "Float32 [4, 2]"


# -- Split / Concat -------------------------------------------------------------------------------------------------
def test_split_num_outputs_has_a_smaller_last_part() -> None:
    x = np.arange(14, dtype=np.float32).reshape(2, 7)
    got = _run("input t0 : Float32 [2, 7]\nt1, t2, t3 = Split(t0, axis=1, num_outputs=3)\noutput t1, t2, t3\n", t0=x)
    assert [got[k].shape for k in ("t1", "t2", "t3")] == [(2, 3), (2, 3), (2, 1)]


def test_split_needs_exactly_one_of_split_and_num_outputs() -> None:
    with pytest.raises(GradirError, match="give exactly one of split and num_outputs"):
        gradir.parse("input t0 : Float32 [2, 6]\nt1, t2 = Split(t0, split=[3, 3], num_outputs=2)\noutput t1, t2\n")


@pytest.mark.parametrize("opset, form", [(11, "attribute"), (13, "input"), (18, "input")])
def test_split_imports_its_sizes_as_an_attribute_or_input(opset: int, form: str) -> None:
    if form == "attribute":
        node, inits = h.make_node("Split", ["x"], ["a", "b"], axis=1, split=[2, 4]), {}
    else:
        node, inits = h.make_node("Split", ["x", "s"], ["a", "b"], axis=1), {"s": np.array([2, 4])}
    g = _import([node], [vi("x", [3, 6])], [vi("a", [3, 2]), vi("b", [3, 4])], inits, opset=opset)
    assert g.ops[0].op_name == "Split" and g.ops[0].attrs["split"] == (2, 4)


def test_split_without_sizes_imports_equal_parts_and_num_outputs_uneven_ones() -> None:
    even = _import([h.make_node("Split", ["x"], ["a", "b"], axis=1)], [vi("x", [3, 6])],
                   [vi("a", [3, 3]), vi("b", [3, 3])], {}, opset=13)
    assert [str(even.types[r]) for r in even.ops[0].results] == ["Float32 [3, 3]", "Float32 [3, 3]"]
    uneven = _import([h.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)], [vi("x", [3, 7])],
                     [vi("a", [3, 3]), vi("b", [3, 3]), vi("c", [3, 1])], {}, opset=18)
    assert uneven.ops[0].attrs["num_outputs"] == 3
    with pytest.raises(OnnxError, match="into 2 equal parts"):
        _import([h.make_node("Split", ["x"], ["a", "b"], axis=1)], [vi("x", [3, 7])], [vi("a", []), vi("b", [])], {},
                opset=13)


@pytest.mark.parametrize("opset, inputs, attrs", [(11, 1, {"split"}), (17, 2, set()), (18, 1, {"num_outputs"})])
def test_split_exports_the_form_of_the_opset(opset: int, inputs: int, attrs: set) -> None:
    g = gradir.parse("input t0 : Float32 [2, 7]\nt1, t2, t3 = Split(t0, axis=1, num_outputs=3)\noutput t1, t2, t3\n")
    node = gradir.export_onnx(g, opset=opset).graph.node[0]
    assert len(node.input) == inputs and {a.name for a in node.attribute} - {"axis"} == attrs
    back = gradir.import_onnx(gradir.export_onnx(g, opset=opset).SerializeToString()).graph
    assert [str(back.types[r]) for r in back.ops[0].results] == ["Float32 [2, 3]", "Float32 [2, 3]", "Float32 [2, 1]"]


def test_concat_and_concat_training_differentiate_to_split_and_split_training() -> None:
    g = gradir.parse("input t0 : Float64 [2, 3]\ninput t1 : Float64 [2, 1]\nt2 = Concat(t0, t1, axis=1)\n"
                     "t3, t4 = ConcatTraining(t0, t1, axis=-1)\nt5 = Add(t2, t3)\noutput t5\n")
    names = _ops(gradir.grad(g))
    assert "Split" in names and "SplitTraining" in names
    assert gradir.gradcheck(g, seed=0).ok


def test_split_training_reads_its_sizes_from_a_concat_training() -> None:
    nodes = [h.make_node("ConcatTraining", ["a", "b"], ["c", "n"], domain="com.microsoft", axis=1),
             h.make_node("SplitTraining", ["c", "n"], ["p", "q"], domain="com.microsoft", axis=1)]
    g = _import(nodes, [vi("a", [2, 3]), vi("b", [2, 1])], [vi("p", [2, 3]), vi("q", [2, 1])], {}, ms=True)
    assert _ops(g) == ["ConcatTraining", "SplitTraining"] and g.ops[1].attrs["split"] == (3, 1)


# -- Squeeze / Expand / Trilu -----------------------------------------------------------------------------------------
def test_squeeze_is_an_op_that_imports_without_axes_and_exports_by_opset() -> None:
    g = _import([h.make_node("Squeeze", ["x"], ["y"])], [vi("x", [3, 1, 2, 1])], [vi("y", [3, 2])], {}, opset=13)
    assert _ops(g) == ["Squeeze"] and g.ops[0].attrs["axes"] == (1, 3)
    assert len(gradir.export_onnx(g, opset=13).graph.node[0].input) == 2
    assert gradir.export_onnx(g, opset=11).graph.node[0].attribute[0].ints == [1, 3]


def test_squeeze_with_an_empty_axes_input_removes_every_size_1_axis() -> None:
    g = _import([h.make_node("Squeeze", ["x", "a"], ["y"])], [vi("x", [1, 3, 1])], [vi("y", [3])],
                {"a": np.zeros(0, np.int64)}, opset=13)
    assert g.ops[0].attrs["axes"] == (0, 2)


def test_squeeze_without_axes_of_a_symbolic_shape_says_to_give_dims() -> None:
    x = h.make_tensor_value_info("x", T.FLOAT, ["N", 1])
    with pytest.raises(OnnxError, match="--dim"):
        _import([h.make_node("Squeeze", ["x"], ["y"])], [x], [vi("y", [])], {}, opset=13)


def test_expand_imports_as_expand_and_to_a_values_shape_as_broadcast_to() -> None:
    g = _import([h.make_node("Expand", ["x", "s"], ["y"])], [vi("x", [3, 1])], [vi("y", [2, 3, 4])],
                {"s": np.array([2, 1, 4])})
    assert _ops(g) == ["Expand"] and str(g.types[g.ops[0].results[0]]) == "Float32 [2, 3, 4]"
    nodes = [h.make_node("Shape", ["v"], ["s"]), h.make_node("Expand", ["x", "s"], ["y"])]
    g = _import(nodes, [vi("x", [3, 1]), vi("v", [2, 3, 4])], [vi("y", [2, 3, 4])], {})
    assert "BroadcastTo" in _ops(g)


def test_trilu_imports_its_k_and_needs_opset_14_to_export() -> None:
    g = _import([h.make_node("Trilu", ["x", "k"], ["y"], upper=0)], [vi("x", [3, 4])], [vi("y", [3, 4])],
                {"k": np.array(-1)}, opset=14)
    assert g.ops[0].attrs["k"] == -1 and g.ops[0].attrs["upper"] == 0
    with pytest.raises(OnnxError, match="opset 14"):
        gradir.export_onnx(g, opset=13)
