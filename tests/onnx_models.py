"""Small ONNX models built with ``onnx.helper`` for tests/test_onnx.py: each is a (model, inputs) pair,
inputs keyed by ONNX name.  ``onnx.reference.ReferenceEvaluator`` (ONNX's own reference implementation)
gives the expected outputs of the ``ai.onnx`` ones."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

MODELS: dict[str, Callable[[], tuple[Any, dict[str, np.ndarray]]]] = {}


def model(fn: Callable[[], tuple[Any, dict[str, np.ndarray]]]) -> Callable:
    MODELS[fn.__name__] = fn
    return fn


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def make(nodes: list, inputs: list, outputs: list, inits: dict[str, np.ndarray], opset: int = 17,
         name: str = "m", ms: bool = False) -> Any:
    g = h.make_graph(nodes, name, inputs, outputs, initializer=[nh.from_array(a, k) for k, a in inits.items()])
    ops = [h.make_opsetid("", opset)] + ([h.make_opsetid("com.microsoft", 1)] if ms else [])
    m = h.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m


def vi(name: str, shape: list, t: int = T.FLOAT) -> Any:
    return h.make_tensor_value_info(name, t, shape)


@model
def gemm_mlp() -> tuple[Any, dict]:
    r = _rng(1)
    inits = {"W1": _f32(r, 5, 3), "B1": _f32(r, 5), "W2": _f32(r, 5, 2), "C2": _f32(r, 2)}
    nodes = [h.make_node("Gemm", ["x", "W1", "B1"], ["h"], name="fc1", transB=1),
             h.make_node("Tanh", ["h"], ["a"], name="act"),
             h.make_node("Gemm", ["a", "W2", "C2"], ["z"], name="fc2", alpha=0.5, beta=2.0),
             h.make_node("LogSoftmax", ["z"], ["logp"], name="lsm", axis=1)]
    return make(nodes, [vi("x", [4, 3])], [vi("logp", [4, 2])], inits), {"x": _f32(r, 4, 3)}


@model
def softmax_opset11_inner_axis() -> tuple[Any, dict]:
    r = _rng(2)
    nodes = [h.make_node("Softmax", ["x"], ["s"], name="sm", axis=1),
             h.make_node("LogSoftmax", ["x"], ["l"], name="lsm", axis=1)]
    return make(nodes, [vi("x", [2, 3, 4])], [vi("s", [2, 3, 4]), vi("l", [2, 3, 4])], {}, opset=11), \
        {"x": _f32(r, 2, 3, 4)}


@model
def softmax_opset13_inner_axis() -> tuple[Any, dict]:
    r = _rng(3)
    nodes = [h.make_node("Softmax", ["x"], ["s"], name="sm", axis=1)]
    return make(nodes, [vi("x", [2, 3, 4])], [vi("s", [2, 3, 4])], {}, opset=13), {"x": _f32(r, 2, 3, 4)}


@model
def reduce_mean_backward_pattern() -> tuple[Any, dict]:
    """What a ReduceMean gradient looks like in ORT's graphs: Shape, Size, Div, Expand over static shapes."""
    r = _rng(4)
    nodes = [h.make_node("Shape", ["x"], ["xs"], name="shape"),
             h.make_node("Size", ["x"], ["n"], name="size"),
             h.make_node("Cast", ["n"], ["nf"], name="cast", to=T.FLOAT),
             h.make_node("Div", ["dy", "nf"], ["q"], name="div"),
             h.make_node("Expand", ["q", "xs"], ["dx"], name="expand")]
    return make(nodes, [vi("x", [3, 4]), vi("dy", [])], [vi("dx", [3, 4])], {}), \
        {"x": _f32(r, 3, 4), "dy": np.array(2.0, np.float32)}


@model
def shapes_and_reductions() -> tuple[Any, dict]:
    r = _rng(5)
    inits = {"axes": np.array([1], np.int64), "shape": np.array([0, -1], np.int64), "two": np.array(2.0, np.float32)}
    nodes = [h.make_node("Unsqueeze", ["x", "axes"], ["u"], name="unsq"),
             h.make_node("Squeeze", ["u", "axes"], ["sq"], name="sq"),
             h.make_node("Reshape", ["sq", "shape"], ["rs"], name="reshape"),
             h.make_node("Pow", ["rs", "two"], ["p"], name="pow"),
             h.make_node("Transpose", ["p"], ["t"], name="tr"),
             h.make_node("ReduceSum", ["t", "axes"], ["s"], name="rsum", keepdims=0),
             h.make_node("ReduceMean", ["x"], ["m"], name="rmean", axes=[0, 1], keepdims=1),
             h.make_node("Sum", ["s", "s", "s"], ["s3"], name="sum"),
             h.make_node("Sub", ["x", "m"], ["c"], name="center"),
             h.make_node("Relu", ["c"], ["y"], name="relu")]
    return make(nodes, [vi("x", [3, 4])], [vi("s3", [4]), vi("y", [3, 4])], inits), {"x": _f32(r, 3, 4)}


@model
def lstm_layer() -> tuple[Any, dict]:
    r = _rng(6)
    S, B, I, H = 5, 2, 3, 4
    inits = {"W": (_f32(r, 1, 4 * H, I) * 0.5), "R": (_f32(r, 1, 4 * H, H) * 0.5), "Bb": _f32(r, 1, 8 * H) * 0.1}
    nodes = [h.make_node("LSTM", ["x", "W", "R", "Bb", "", "h0", "c0"], ["y", "yh", "yc"], name="lstm",
                         hidden_size=H)]
    return make(nodes, [vi("x", [S, B, I]), vi("h0", [1, B, H]), vi("c0", [1, B, H])],
                [vi("y", [S, 1, B, H]), vi("yh", [1, B, H]), vi("yc", [1, B, H])], inits), \
        {"x": _f32(r, S, B, I), "h0": _f32(r, 1, B, H), "c0": _f32(r, 1, B, H)}


def unsupported_model() -> Any:
    """Three nodes gradir cannot import, for the one-listing error."""
    inits = {"k": np.ones((1, 1, 2, 2), np.float32)}
    nodes = [h.make_node("Floor", ["x"], ["p"], name="floor"),
             h.make_node("ConvTranspose", ["x4", "k"], ["c"], name="conv"),
             h.make_node("Gemm", ["x", "x"], ["g"], name="gemm_bad", transA=1),
             h.make_node("Softmax", ["x"], ["s"], name="fine"),
             h.make_node("Relu", ["p"], ["rp"], name="after_floor")]
    return make(nodes, [vi("x", [3, 3]), vi("x4", [1, 1, 3, 3])],
                [vi("rp", [3, 3]), vi("c", [1, 1, 4, 4]), vi("g", [3, 3]), vi("s", [3, 3])], inits)


def reference_outputs(m: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from onnx.reference import ReferenceEvaluator
    names = [o.name for o in m.graph.output]
    return dict(zip(names, ReferenceEvaluator(m).run(None, inputs)))


def chain_model(n: int) -> Any:
    """``n`` alternating Tanh/Neg nodes: the import-time test."""
    nodes = []
    prev = "x"
    for k in range(n):
        out = f"v{k}"
        nodes.append(h.make_node("Tanh" if k % 2 else "Neg", [prev], [out], name=f"n{k}"))
        prev = out
    return make(nodes, [vi("x", [2, 2])], [vi(prev, [2, 2])], {})


assert onnx  # imported for its submodules
