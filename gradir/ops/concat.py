"""Splitting and joining along an axis: ONNX ``Split`` and ``Concat``, ONNX Runtime's ``SplitTraining`` and
``ConcatTraining`` (the forms ORT's training graphs use: ``ConcatTraining`` also gives each input's length
along the axis, which its gradient ``SplitTraining`` splits by).

ONNX's ``split`` input (opset 13+; an attribute before) is gradir's ``split`` attribute; the importer folds
it (and ORT's ``SplitTraining`` sizes read from a ``ConcatTraining``'s lengths, known from the static
shapes), the exporter writes it back in the form the opset wants.  The gradients are exact copies:
``Split`` and ``SplitTraining`` take ``Concat`` of the cotangents (zeros for a result nothing reads),
``Concat`` takes ``Split`` and ``ConcatTraining`` takes ``SplitTraining`` of dY, as ONNX Runtime does.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from ..ir.op import Attr, InferContext, Op, Operand
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import ALL_DTYPES, DType, Dim, TensorType, format_shape

__all__ = ["split_sizes"]

AXIS = Attr("axis", "int", 0, doc="the axis (negative counts from the end)")


def split_sizes(n: int, split: Optional[tuple], num_outputs: Optional[int]) -> Optional[list[int]]:
    """The sizes of the parts of an axis of size ``n``: ``split``, or ``num_outputs`` parts of ceil(n /
    num_outputs) with a smaller last one (ONNX 18); ``None`` when they do not fit ``n``."""
    if split is not None:
        return list(split) if sum(split) == n else None
    assert num_outputs is not None
    chunk = -(-n // num_outputs)
    last = n - chunk * (num_outputs - 1)
    return [chunk] * (num_outputs - 1) + [last] if last > 0 else None


def _axis(ctx: InferContext, t: TensorType) -> int:
    a = ctx.attrs["axis"]
    if not -t.rank <= a < t.rank:
        ctx.fail(f"axis {a} is out of range for rank {t.rank}", attr="axis")
    return a % t.rank


def _split_types(ctx: InferContext, split: Optional[tuple], num_outputs: Optional[int]) -> list[TensorType]:
    t = ctx.type(0)
    a = _axis(ctx, t)
    n = t.shape[a]
    if n is None:
        if split is None:
            ctx.fail(f"num_outputs needs the size of axis {a}, but X is {t}: give split", attr="num_outputs")
        sizes: list[Dim] = list(split)
    else:
        sizes = split_sizes(n, split, num_outputs)  # type: ignore[assignment]
        if sizes is None:
            what = f"split={list(split)} sums to {sum(split)}" if split is not None else \
                f"num_outputs={num_outputs} leaves no element for the last part"
            ctx.fail(f"{what}, but axis {a} of X has size {n}", attr="split" if split is not None else "num_outputs")
    return [t.with_shape(t.shape[:a] + (d,) + t.shape[a + 1:]) for d in sizes]


def _concat_type(ctx: InferContext, op: Op) -> TensorType:
    t0 = ctx.type(0)
    a = _axis(ctx, t0)
    total: Dim = 0
    for i in range(len(op.operands)):
        ctx.same_dtype(0, i)
        t = ctx.type(i)
        want = list(t0.shape)
        want[a] = None
        if t.rank != t0.rank:
            ctx.fail(f"operand {op.operand_value(i)} has shape {format_shape(t.shape)} but "
                     f"{op.operand_value(0)} has {format_shape(t0.shape)}: they need one rank", operand=i)
        ctx.expect_shape(i, want, f" (the shape of {op.operand_value(0)} but along axis {a})")
        total = None if total is None or t.shape[a] is None else total + t.shape[a]
    return t0.with_shape(t0.shape[:a] + (total,) + t0.shape[a + 1:])


class _Parts(Op):
    """An op with one result per part."""

    abstract = True

    @classmethod
    def num_results(cls, attrs: Mapping[str, Any]) -> int:
        split = attrs.get("split")
        return len(split) if split else int(attrs.get("num_outputs") or 1)

    @classmethod
    def result_names(cls, attrs: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(f"Y{k}" for k in range(cls.num_results(attrs)))


class SplitOp(_Parts):
    """ONNX Split: X cut along axis into parts of the sizes split, or num_outputs parts (the last one smaller).

Exactly one of split and num_outputs (ONNX 18's: parts of ceil(n / num_outputs)). ONNX's split input
(opset 13+) or attribute (before) is the attribute split; a Split without either (opset < 18) imports
with equal parts, one per output."""

    ONNX = None  # import_index.py / export_index.py: split as an input or attribute by opset
    SHARDING = "split"
    SHAPE_ONLY = True
    LINEAR_IN = (0,)
    OPERANDS = (Operand("X"),)
    RESULTS = ("Y0", "Y1")
    ATTRS = (AXIS, Attr("split", "ints", None, min=1, doc="the parts' sizes along axis"),
             Attr("num_outputs", "int", None, min=1, doc="the number of equal parts, the last one smaller"))

    def infer(self, ctx: InferContext) -> list[TensorType]:
        split, k = ctx.attrs["split"], ctx.attrs["num_outputs"]
        if (split is None) == (k is None):
            ctx.fail("give exactly one of split and num_outputs", attr="split")
        return _split_types(ctx, split, k)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """[4, 7] in parts of 3, 1 and 3 columns (num_outputs exports as these sizes before opset 18)."""
        return [rng.standard_normal((4, 7)).astype(dtype)], {"axis": -1, "split": [3, 1, 3]}

    @classmethod
    def reference(cls, X: Any, *, axis: int, split: Any, num_outputs: Any) -> Any:
        x = np.asarray(X, np.float64)
        sizes = split_sizes(x.shape[axis], split, num_outputs)
        return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


class SplitTrainingOp(_Parts):
    """ONNX Runtime SplitTraining: X cut along axis into parts of the sizes split (ORT's input, here an attribute).

ConcatTraining's gradient; in ORT's graphs its split input is ConcatTraining's per_input_length, known at
import from the static shapes."""

    ONNX = None  # import_index.py / export_index.py: the split input
    SHARDING = "split"
    SHAPE_ONLY = True
    LINEAR_IN = (0,)
    OPERANDS = (Operand("X"),)
    RESULTS = ("Y0", "Y1")
    ATTRS = (Attr("split", "ints", min=1, doc="the parts' sizes along axis"), AXIS)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return _split_types(ctx, ctx.attrs["split"], None)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 6)).astype(dtype)], {"split": [1, 3, 2], "axis": -1}

    @classmethod
    def reference(cls, X: Any, *, split: Any, axis: int) -> Any:
        x = np.asarray(X, np.float64)
        return tuple(np.split(x, np.cumsum(split)[:-1], axis=axis))


class ConcatOp(Op):
    """ONNX Concat: the operands joined along axis (equal shapes but along it)."""

    ONNX = OnnxMap(attrs=("axis",))
    SHARDING = "concat"
    SHAPE_ONLY = True
    LINEAR_IN = (0,)
    LINEAR_JOINTLY = True
    OPERANDS = (Operand("inputs", variadic=True),)
    RESULTS = ("concat_result",)
    ATTRS = (Attr("axis", "int", doc="the axis (negative counts from the end)"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, ALL_DTYPES)
        return [_concat_type(ctx, self)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, k)).astype(dtype) for k in (2, 3, 1)], {"axis": 1}

    @classmethod
    def reference(cls, *inputs: Any, axis: int) -> Any:
        return np.concatenate([np.asarray(x, np.float64) for x in inputs], axis=axis)


class ConcatTrainingOp(Op):
    """ONNX Runtime ConcatTraining: Concat, and each input's length along axis (Int64 [n], its gradient's split)."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("axis",))
    SHARDING = "concat"
    SHAPE_ONLY = True
    LINEAR_IN = (0,)
    LINEAR_JOINTLY = True
    NO_GRADIENT_RESULTS = (1,)
    OPERANDS = (Operand("inputs", variadic=True),)
    RESULTS = ("concat_result", "per_input_length")
    ATTRS = (Attr("axis", "int", doc="the axis (negative counts from the end)"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, ALL_DTYPES)
        return [_concat_type(ctx, self), TensorType(DType.Int64, (len(self.operands),))]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, k)).astype(dtype) for k in (2, 3)], {"axis": -1}

    @classmethod
    def reference(cls, *inputs: Any, axis: int) -> Any:
        xs = [np.asarray(x, np.float64) for x in inputs]
        return np.concatenate(xs, axis=axis), np.array([x.shape[axis] for x in xs], np.int64)
