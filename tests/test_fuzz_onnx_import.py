"""Fuzzing the ONNX importer: valid small models built with ``onnx.helper``, mutated, and their
serialized bytes mutated.

What ``import_onnx`` promises for any input: it returns an ``ImportedModel`` whose graph prints to
text that parses back to it, or raises a ``gradir.GradirError`` (an ``OnnxError`` for a model it
cannot import); never another exception, and within ``API_SECONDS``.  The mutations reach what
``onnx.checker`` lets through (it knows nothing of ``com.microsoft`` ops, nor of most data sizes):
op types and domains swapped, inputs and outputs dropped, emptied or renamed, attributes dropped,
added and given odd values (huge, negative, invalid UTF-8), element types and dimensions changed,
initializer data made longer or shorter than its shape, external data pointed anywhere, opsets
changed, nodes dropped, repeated and reordered.

Budget and derandomization as in tests/test_fuzz.py (``tests/fuzzing.py``: ``campaign``,
``time_limit``); docs/fuzzing.md.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from hypothesis import given, note
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import gradir
from gradir.interop.onnx import import_onnx
from fuzzing import API_SECONDS, campaign, examples, fuzz_settings, time_limit
import onnx_models as M


# -- the models mutated ---------------------------------------------------------------------------------
def _folding() -> onnx.ModelProto:
    """Shape arithmetic the importer evaluates: Shape, Gather, Concat, ConstantOfShape, Range, Expand."""
    inits = {"i0": np.array(0, np.int64), "m1": np.array([-1], np.int64), "one": np.array(1, np.int64),
             "four": np.array(4, np.int64)}
    nodes = [h.make_node("Shape", ["x"], ["s"], name="shape"),
             h.make_node("Gather", ["s", "i0"], ["b"], name="gather", axis=0),
             h.make_node("Unsqueeze", ["b", "zero_axes"], ["bu"], name="unsq"),
             h.make_node("Concat", ["bu", "m1"], ["shp"], name="cat", axis=0),
             h.make_node("Reshape", ["x", "shp"], ["r"], name="reshape"),
             h.make_node("Range", ["i0", "four", "one"], ["rg"], name="range"),
             h.make_node("Cast", ["rg"], ["rgf"], name="cast", to=T.FLOAT),
             h.make_node("ConstantOfShape", ["s"], ["c"], name="cos", value=nh.from_array(np.array([2.0], np.float32))),
             h.make_node("Mul", ["r", "c"], ["y"], name="mul"),
             h.make_node("Expand", ["rgf", "s"], ["e"], name="expand"),
             h.make_node("Add", ["y", "e"], ["z"], name="add")]
    inits["zero_axes"] = np.array([0], np.int64)
    return M.make(nodes, [M.vi("x", [3, 4])], [M.vi("z", [3, 4])], inits)


def _microsoft() -> onnx.ModelProto:
    """ORT's ops (the checker does not know their inputs): gradients, Scale, BroadcastGradientArgs, an
    accumulator."""
    inits = {"s": np.array(2.0, np.float32), "sa": np.array([3, 4], np.int64), "sb": np.array([4], np.int64)}
    ms = "com.microsoft"
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu"),
             h.make_node("ReluGrad", ["dy", "r"], ["dx"], name="relugrad", domain=ms),
             h.make_node("Scale", ["dx", "s"], ["sc"], name="scale", domain=ms, scale_down=1),
             h.make_node("BroadcastGradientArgs", ["sa", "sb"], ["ra", "rb"], name="bga", domain=ms),
             h.make_node("ReduceSum", ["sc", "rb"], ["g"], name="rsum", keepdims=0),
             h.make_node("FusedMatMul", ["x", "w"], ["mm"], name="fmm", domain=ms, transB=1, alpha=0.5),
             h.make_node("InPlaceAccumulatorV2", ["buf", "g"], ["upd"], name="acc", domain=ms)]
    return M.make(nodes, [M.vi("x", [3, 4]), M.vi("dy", [3, 4]), M.vi("w", [5, 4]), M.vi("buf", [4])],
                  [M.vi("upd", [4]), M.vi("mm", [3, 5]), M.vi("ra", ["n"], T.INT64)], inits, ms=True)


BASES: list[Callable[[], onnx.ModelProto]] = [
    lambda: M.gemm_mlp()[0], lambda: M.shapes_and_reductions()[0], lambda: M.reduce_mean_backward_pattern()[0],
    lambda: M.softmax_opset11_inner_axis()[0], lambda: M.lstm_layer()[0], lambda: M.unsupported_model(), _folding,
    _microsoft]

OP_TYPES = ["Add", "Mul", "Div", "Relu", "Shape", "Size", "Gather", "Concat", "Slice", "Where", "Reshape", "Squeeze",
            "Unsqueeze", "Expand", "Tile", "Range", "ConstantOfShape", "Constant", "Cast", "Transpose", "Flatten",
            "ReduceSum", "Softmax", "LogSoftmax", "Gemm", "Pow", "LSTM", "Gelu", "Scale", "ReluGrad", "DivGrad",
            "BroadcastGradientArgs", "InPlaceAccumulatorV2", "FusedMatMul", "SoftmaxCrossEntropyLossGrad",
            "LSTMGrad", "ReduceSumTraining", "FastGelu", "BiasGelu", "Conv", "NoSuchOp", "Identity", "Sum"]
DOMAINS = ["", "ai.onnx", "com.microsoft", "ai.gradir", "x.y"]
INTS = st.sampled_from([0, 1, -1, 2, 3, -3, 7, 64, 65, 2 ** 31, -(2 ** 31), 2 ** 40, 2 ** 62, -(2 ** 63), 2 ** 63 - 1])
ELEM_TYPES = st.sampled_from([0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 21, 23, 40, 99])
ATTR_NAMES = st.sampled_from(["axis", "axes", "perm", "to", "value", "alpha", "beta", "transA", "transB", "keepdims",
                              "approximate", "direction", "hidden_size", "scale_down", "start", "end", "allowzero",
                              "noop_with_empty_axes", "reduction", "value_ints", "value_float", "zz"])


def _attribute(draw, name: str) -> Any:
    kind = draw(st.sampled_from(["int", "ints", "float", "string", "bad_string", "tensor", "strings"]))
    if kind == "int":
        return h.make_attribute(name, draw(INTS))
    if kind == "ints":
        return h.make_attribute(name, draw(st.lists(INTS, max_size=4)), attr_type=onnx.AttributeProto.INTS)
    if kind == "float":
        return h.make_attribute(name, draw(st.floats(width=32)))
    if kind == "string":
        return h.make_attribute(name, draw(st.sampled_from(["none", "tanh", "forward", "reverse", "mean", "", "x"])))
    if kind == "strings":
        return h.make_attribute(name, draw(st.lists(st.sampled_from(["Sigmoid", "Tanh", "Relu", "x"]), max_size=4)),
                                attr_type=onnx.AttributeProto.STRINGS)
    if kind == "tensor":
        a = draw(st.sampled_from([np.array([1.5], np.float32), np.array([0], np.int64), np.zeros((2, 2), np.float32),
                                  np.array([], np.float32), np.array(3, np.int32), np.array([True])]))
        return h.make_attribute(name, nh.from_array(a))
    a = h.make_attribute(name, "x")
    a.s = draw(st.sampled_from([b"\xff", b"\xc3", b"abc\x80", b"\xed\xa0\x80"]))
    return a


def _raw(t: Any) -> bytes:
    """``t``'s data as raw bytes (none if an earlier mutation made it unreadable)."""
    try:
        return nh.from_array(nh.to_array(t)).raw_data
    except Exception:  # noqa: BLE001
        return b""


def _mutate_tensor(draw, t: Any) -> None:
    what = draw(st.sampled_from(["data_type", "dims", "raw_longer", "raw_shorter", "raw_odd", "typed", "external",
                                 "values"]))
    if what == "data_type":
        t.data_type = draw(ELEM_TYPES)
    elif what == "dims":
        del t.dims[:]
        t.dims.extend(draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 1000, 2 ** 20, 2 ** 40]), max_size=4)))
    elif what in ("raw_longer", "raw_shorter", "raw_odd"):
        raw = t.raw_data if t.HasField("raw_data") else _raw(t)
        k = draw(st.integers(1, 16))
        t.raw_data = raw + b"\0" * k if what == "raw_longer" else raw[:-k] if what == "raw_shorter" else raw + b"\1"
    elif what == "typed":
        t.ClearField("raw_data")
        t.float_data.extend(draw(st.lists(st.floats(width=32), max_size=6)))
    elif what == "external":
        t.ClearField("raw_data")
        t.data_location = T.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", draw(st.sampled_from(["w.bin", "../w.bin", "/etc/passwd", "", ".", "a/../../b",
                                                            "/dev/zero", "\x00"]))
        if draw(st.booleans()):
            o = t.external_data.add()
            o.key, o.value = draw(st.sampled_from(["offset", "length"])), str(draw(INTS))
    else:  # an integer initializer's values: shapes and axes made huge or negative
        try:
            a = nh.to_array(t)
        except Exception:  # noqa: BLE001 - already mutated past reading: leave it so
            return
        if a.dtype.kind == "i" and a.size:
            v = draw(INTS)
            shape = a.shape
            a = a.copy().reshape(-1)
            a[draw(st.integers(0, a.size - 1))] = max(min(v, np.iinfo(a.dtype).max), np.iinfo(a.dtype).min)
            t.CopyFrom(nh.from_array(a.reshape(shape), t.name))


def _mutate(draw, m: onnx.ModelProto) -> None:
    g = m.graph
    what = draw(st.sampled_from(["op_type", "domain", "input", "output", "attr_drop", "attr_add", "attr_value",
                                 "elem_type", "dim", "initializer", "initializer", "opset", "graph_output",
                                 "graph_input", "node_drop", "node_repeat", "node_order"]))
    note(what)
    node = g.node[draw(st.integers(0, len(g.node) - 1))] if g.node else None
    names = [n for nd in g.node for n in list(nd.input) + list(nd.output)] + [i.name for i in g.input] + ["", "nope"]
    if what == "op_type" and node is not None:
        node.op_type = draw(st.sampled_from(OP_TYPES))
    elif what == "domain" and node is not None:
        node.domain = draw(st.sampled_from(DOMAINS))
    elif what == "input" and node is not None:
        how = draw(st.sampled_from(["drop", "empty", "rename", "add"]))
        if how == "add" or not node.input:
            node.input.append(draw(st.sampled_from(names)))
        else:
            k = draw(st.integers(0, len(node.input) - 1))
            if how == "drop":
                del node.input[k:]
            else:
                node.input[k] = "" if how == "empty" else draw(st.sampled_from(names))
    elif what == "output" and node is not None and node.output:
        k = draw(st.integers(0, len(node.output) - 1))
        node.output[k] = draw(st.sampled_from(["", "fresh", *names]))
    elif what == "attr_drop" and node is not None and node.attribute:
        del node.attribute[draw(st.integers(0, len(node.attribute) - 1))]
    elif what in ("attr_add", "attr_value") and node is not None:
        if what == "attr_value" and node.attribute:
            k = draw(st.integers(0, len(node.attribute) - 1))
            node.attribute[k].CopyFrom(_attribute(draw, node.attribute[k].name))
        else:
            name = draw(ATTR_NAMES)
            if name not in {a.name for a in node.attribute}:
                node.attribute.append(_attribute(draw, name))
    elif what in ("elem_type", "dim"):
        vis = list(g.input) + list(g.output)
        vi = vis[draw(st.integers(0, len(vis) - 1))]
        if what == "elem_type":
            vi.type.tensor_type.elem_type = draw(ELEM_TYPES)
        elif vi.type.tensor_type.shape.dim:
            d = vi.type.tensor_type.shape.dim[draw(st.integers(0, len(vi.type.tensor_type.shape.dim) - 1))]
            choice = draw(st.one_of(st.sampled_from([0, 1, 5, 2 ** 31, 2 ** 40, 2 ** 62]), st.just("batch")))
            if isinstance(choice, str):
                d.dim_param = choice
            else:
                d.dim_value = choice
    elif what == "initializer" and g.initializer:
        _mutate_tensor(draw, g.initializer[draw(st.integers(0, len(g.initializer) - 1))])
    elif what == "opset":
        m.opset_import[0].version = draw(st.sampled_from([1, 7, 11, 12, 13, 14, 17, 18, 20, 21]))
    elif what == "graph_output" and g.output:
        if draw(st.booleans()) and len(g.output) > 1:
            del g.output[draw(st.integers(0, len(g.output) - 1))]
        else:
            extra = g.output.add()
            extra.CopyFrom(g.output[0])
            extra.name = draw(st.sampled_from(names))
    elif what == "graph_input" and g.input:
        del g.input[draw(st.integers(0, len(g.input) - 1))]
    elif what == "node_drop" and g.node:
        del g.node[draw(st.integers(0, len(g.node) - 1))]
    elif what == "node_repeat" and node is not None:
        g.node.add().CopyFrom(node)
    elif what == "node_order" and len(g.node) > 1:
        order = draw(st.permutations(range(len(g.node))))
        nodes = [g.node[k] for k in order]
        copies = [type(n)() for n in nodes]
        for c, n in zip(copies, nodes):
            c.CopyFrom(n)
        del g.node[:]
        g.node.extend(copies)


@st.composite
def mutated_models(draw) -> onnx.ModelProto:
    m = draw(st.sampled_from(BASES))()
    for _ in range(draw(st.integers(1, 3))):
        _mutate(draw, m)
    return m


@st.composite
def mutated_model_bytes(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(BASES))().SerializeToString())
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        k = draw(st.integers(0, len(data) - 1))
        if how == "flip":
            data[k] = draw(st.integers(0, 255))
        elif how == "truncate":
            del data[k:]
        elif how == "insert":
            data[k:k] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[k:k + draw(st.integers(1, 8))]
        if not data:
            break
    return bytes(data)


# -- the properties ------------------------------------------------------------------------------------
def check_import(model: Any) -> None:
    """``import_onnx(model)``: a graph whose text parses back to it, or a GradirError, within the bound."""
    with time_limit(API_SECONDS, "import_onnx"):
        try:
            im = import_onnx(model)
        except gradir.GradirError:
            return
        text = im.graph.to_text()
        assert gradir.parse(text).to_text() == text
        for name, a in im.inputs.items():
            assert isinstance(a, np.ndarray), name


@fuzz_settings(examples(80))
@given(mutated_models())
def _mutated_models(m: onnx.ModelProto) -> None:
    check_import(m)


def test_mutated_models_import_or_fail_with_a_gradir_error():
    campaign(_mutated_models, 0.7)


@fuzz_settings(examples(40))
@given(mutated_model_bytes())
def _mutated_bytes(data: bytes) -> None:
    check_import(data)


def test_mutated_model_bytes_import_or_fail_with_a_gradir_error():
    campaign(_mutated_bytes, 0.3)
