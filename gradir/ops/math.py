"""General forward ops (docs/ops.md): arithmetic, MatMul, layout, reductions."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..ir.op import Attr, InferContext, Op, Operand, unify_shapes
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, TensorType, format_shape
from .matmul_layout import operand_perm
from .common import ElementwiseOp, UnaryOp, broadcast_shapes, finite

__all__ = ["broadcast_shapes"]


class _Binary(ElementwiseOp):
    abstract = True
    OPERANDS = (Operand("A"), Operand("B"))
    RESULTS = ("C",)
    DTYPES: tuple = NUMERIC_DTYPES

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, self.DTYPES)
        ctx.same_dtype(0, 1)
        a, b = ctx.type(0), ctx.type(1)
        shape = broadcast_shapes(a.shape, b.shape)
        if shape is None:
            ctx.fail(f"shapes {format_shape(a.shape)} ({self.operand_value(0)}) and {format_shape(b.shape)} "
                     f"({self.operand_value(1)}) cannot be broadcast together", operand=1)
        return [TensorType(a.dtype, shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """A [4, 5] and a row B [5] that broadcasts over it, in [0.5, 2) (a divisor away from 0)."""
        return [rng.standard_normal((4, 5)).astype(dtype), rng.uniform(0.5, 2.0, 5).astype(dtype)], {}


class AddOp(_Binary):
    """A + B with NumPy broadcasting."""

    ONNX = OnnxMap()
    ELEMENTWISE = "broadcast"
    BROADCASTS = True
    FORMULA = "A + B"
    LINEAR_IN = (0, 1)
    LINEAR_JOINTLY = True


class SubOp(_Binary):
    """A - B with NumPy broadcasting."""

    ONNX = OnnxMap()
    ELEMENTWISE = "broadcast"
    BROADCASTS = True
    FORMULA = "A - B"
    LINEAR_IN = (0, 1)
    LINEAR_JOINTLY = True


class MulOp(_Binary):
    """A * B with NumPy broadcasting."""

    ONNX = OnnxMap()
    ELEMENTWISE = "broadcast"
    BROADCASTS = True
    FORMULA = "A * B"
    LINEAR_IN = (0, 1)


class DivOp(_Binary):
    """A / B with NumPy broadcasting (floating point)."""

    ONNX = OnnxMap()
    ELEMENTWISE = "broadcast"
    BROADCASTS = True
    FORMULA = "A / B"
    LINEAR_IN = (0,)

    DTYPES = FLOAT_DTYPES


class NegOp(UnaryOp):
    """-x."""

    ONNX = OnnxMap()
    ELEMENTWISE = "same"
    FORMULA = "-X"
    LINEAR_IN = (0,)

    DTYPES = NUMERIC_DTYPES


class ExpOp(UnaryOp):
    """exp(x)."""

    ONNX = OnnxMap()
    ELEMENTWISE = "same"
    FORMULA = "exp(X)"


class LogOp(UnaryOp):
    """Natural logarithm."""

    ONNX = OnnxMap()
    ELEMENTWISE = "same"
    FORMULA = "log(X)"

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Positive operands (the formula's domain), away from 0."""
        return [rng.uniform(0.5, 2.0, (4, 5)).astype(dtype)], {}


class SqrtOp(UnaryOp):
    """Square root (NaN below 0)."""

    ONNX = OnnxMap()
    ELEMENTWISE = "same"
    FORMULA = "sqrt(X)"

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Positive operands (the formula's domain), away from 0."""
        return [rng.uniform(0.5, 2.0, (4, 5)).astype(dtype)], {}


class IdentityOp(UnaryOp):
    """x, unchanged."""

    ONNX = OnnxMap()
    ELEMENTWISE = "same"
    FORMULA = "X"
    LINEAR_IN = (0,)
    SHAPE_ONLY = True

    DTYPES = ALL_DTYPES


class MatMulOp(Op):
    """NumPy matmul: batched over leading dims (broadcast), 1-D operands promoted."""

    ONNX = OnnxMap()

    SHARDING = "matmul"
    PRODUCT = True
    BROADCASTS = True
    LINEAR_IN = (0, 1)

    OPERANDS = (Operand("A"), Operand("B"))
    RESULTS = ("C",)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES)
        ctx.same_dtype(0, 1)
        return [_product_type(self, ctx, list(ctx.type(0).shape), list(ctx.type(1).shape), "")]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 3)).astype(dtype), rng.standard_normal((3, 5)).astype(dtype)], {}

    @classmethod
    def reference(cls, A: Any, B: Any) -> Any:
        return np.matmul(np.asarray(A, np.float64), np.asarray(B, np.float64))


def _product_type(op: Op, ctx: InferContext, sa: list, sb: list, laid: str) -> TensorType:
    """NumPy matmul's result type for operands of shapes ``sa``, ``sb`` (as laid out: ``laid`` says
    how, in messages)."""
    a, b = ctx.type(0), ctx.type(1)
    for i, t in ((0, a), (1, b)):
        if t.rank == 0:
            ctx.fail(f"operand {op.operand_value(i)} is a scalar; {op.op_name} needs rank >= 1", operand=i)
    va, vb = len(sa) == 1, len(sb) == 1
    shown = f"{format_shape(sa)} @ {format_shape(sb)}{laid}"
    if va:
        sa = [1] + sa
    if vb:
        sb = sb + [1]
    k1, k2 = sa[-1], sb[-2]
    if k1 is not None and k2 is not None and k1 != k2:
        ctx.fail(f"inner dimensions differ: {shown} ({k1} vs {k2})", operand=1)
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    if batch is None:
        ctx.fail(f"batch dimensions of {shown} cannot be broadcast together", operand=1)
    shape = list(batch) + ([] if va else [sa[-2]]) + ([] if vb else [sb[-1]])
    return TensorType(a.dtype, shape)


def _flag(name: str, doc: str) -> Attr:
    return Attr(name, "int", 0, choices=(0, 1), doc=doc)


class FusedMatMulOp(Op):
    """alpha * (A' @ B'), operands transposed by flags and read in place (ORT's com.microsoft op).

NumPy matmul of the operands as laid out: transA/transB swap an operand's last two axes;
transBatchA/transBatchB (rank >= 3) make its first axis the matrix row axis and axes 1..r-2 the
batch; a vector ignores trans. The kernel hands transposed operands to BLAS as strided views, so
no transposed copy is made. The `fold-transpose-matmul` pass makes this op from a Transpose
feeding a MatMul, `simplify` folds a Scale of it into alpha."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("alpha", "transA", "transB", "transBatchA", "transBatchB"),
                   ort_float32_only=True)

    SHARDING = "fused_matmul"
    PRODUCT = True
    BROADCASTS = True
    LINEAR_IN = (0, 1)

    OPERANDS = (Operand("A"), Operand("B"))
    RESULTS = ("Y",)
    ATTRS = (Attr("alpha", "float", 1.0, check=finite, doc="multiplies the product (after it is summed)"),
             _flag("transA", "A's last two axes swapped"), _flag("transB", "B's last two axes swapped"),
             _flag("transBatchA", "A's first axis is its row axis, axes 1..r-2 its batch (rank >= 3)"),
             _flag("transBatchB", "B's first axis is its row axis, axes 1..r-2 its batch (rank >= 3)"))

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        ctx.same_dtype(0, 1)
        shapes, laid = [], []
        for i, side in ((0, "A"), (1, "B")):
            t = ctx.type(i)
            if ctx.attrs[f"transBatch{side}"] and t.rank < 3:
                ctx.fail(f"transBatch{side}=1 needs an operand of rank >= 3, but {self.operand_value(i)} has "
                         f"shape {format_shape(t.shape)}", attr=f"transBatch{side}")
            perm = operand_perm(t.rank, bool(ctx.attrs[f"trans{side}"]), bool(ctx.attrs[f"transBatch{side}"]))
            shapes.append(list(t.shape) if perm is None else [t.shape[p] for p in perm])
            if perm is not None and perm != list(range(t.rank)):
                laid.append(f"{side} is {format_shape(t.shape)}")
        return [_product_type(self, ctx, shapes[0], shapes[1], f" as laid out ({', '.join(laid)})" if laid else "")]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Both operands stored transposed (A [3, 4] read as [4, 3]), scaled by alpha."""
        return ([rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal((5, 3)).astype(dtype)],
                {"alpha": -1.5, "transA": 1, "transB": 1})

    @classmethod
    def reference(cls, A: Any, B: Any, *, alpha: float, transA: int, transB: int, transBatchA: int,
                  transBatchB: int) -> Any:
        a, b = np.asarray(A, np.float64), np.asarray(B, np.float64)
        pa, pb = operand_perm(a.ndim, bool(transA), bool(transBatchA)), operand_perm(b.ndim, bool(transB),
                                                                                     bool(transBatchB))
        a = a if pa is None else a.transpose(pa)
        b = b if pb is None else b.transpose(pb)
        return alpha * np.matmul(a, b)


def _check_perm(p: tuple) -> Optional[str]:
    if p is not None and sorted(p) != list(range(len(p))):
        return f"must be a permutation of 0..{len(p) - 1}, got {list(p)}"
    return None


class TransposeOp(Op):
    """Permute axes; default reverses them."""

    ONNX = OnnxMap(attrs=("perm",))

    SHARDING = "transpose"
    SHAPE_ONLY = True
    LINEAR_IN = (0,)

    OPERANDS = (Operand("X"),)
    ATTRS = (Attr("perm", "ints", None, check=_check_perm, doc="result axis k is input axis perm[k]"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        perm = ctx.attrs["perm"]
        if perm is None:
            perm = tuple(reversed(range(t.rank)))
        if len(perm) != t.rank:
            ctx.fail(f"perm {list(perm)} has {len(perm)} entries but the operand has rank {t.rank}", attr="perm")
        return [t.with_shape([t.shape[p] for p in perm])]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 3, 2)).astype(dtype)], {"perm": [1, 0, 2]}

    @classmethod
    def reference(cls, X: Any, *, perm: Optional[Sequence[int]]) -> Any:
        return np.transpose(np.asarray(X, np.float64), perm).copy()


def _check_reshape(s: tuple) -> Optional[str]:
    if sum(1 for d in s if d == -1) > 1:
        return "may contain -1 at most once"
    bad = [d for d in s if d != -1 and d <= 0]
    if bad:
        return f"entries must be positive or -1, got {bad[0]}"
    return None


class ReshapeOp(Op):
    """Same elements, new shape (one -1 entry is inferred)."""

    SHARDING = "reshape"
    SHAPE_ONLY = True
    VIEW = True
    LINEAR_IN = (0,)

    OPERANDS = (Operand("X"),)
    ATTRS = (Attr("shape", "ints", check=_check_reshape, doc="new shape; one -1 allowed"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        shape = list(ctx.attrs["shape"])
        n = t.numel
        known = 1
        for d in shape:
            if d != -1:
                known *= d
        if -1 in shape:
            if n is None:
                shape[shape.index(-1)] = None
            elif n % known:
                ctx.fail(f"cannot reshape {t} ({n} elements) to {format_shape(shape).replace('None', '-1')}",
                         attr="shape")
            else:
                shape[shape.index(-1)] = n // known
        elif n is not None and n != known:
            ctx.fail(f"cannot reshape {t} ({n} elements) to {format_shape(shape)} ({known} elements)",
                     attr="shape")
        return [t.with_shape(shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 3, 2)).astype(dtype)], {"shape": [4, -1]}

    @classmethod
    def reference(cls, X: Any, *, shape: Sequence[int]) -> Any:
        return np.reshape(np.asarray(X, np.float64), shape).copy()


class Reduce(Op):
    """Base of the reductions over ``axes`` (``keepdims``): their type rule."""

    abstract = True
    OPERANDS = (Operand("X"),)
    ATTRS = (Attr("axes", "ints", None, doc="axes to reduce (default: all)"),
             Attr("keepdims", "bool", False, doc="keep reduced axes with size 1"))
    DTYPES: tuple = NUMERIC_DTYPES

    def infer(self, ctx: InferContext) -> list[TensorType]:
        t = ctx.type(0)
        ctx.dtype_in(0, self.DTYPES)
        axes = ctx.attrs["axes"]
        if axes is None:
            axes = tuple(range(t.rank))
        norm = []
        for a in axes:
            if not -t.rank <= a < t.rank:
                ctx.fail(f"axis {a} is out of range for rank {t.rank}", attr="axes")
            norm.append(a % t.rank)
        if len(set(norm)) != len(norm):
            ctx.fail(f"axes {list(axes)} name an axis twice", attr="axes")
        if ctx.attrs["keepdims"]:
            shape = [1 if k in norm else d for k, d in enumerate(t.shape)]
        else:
            shape = [d for k, d in enumerate(t.shape) if k not in norm]
        return [t.with_shape(shape)]


class ReduceSumOp(Reduce):
    """Sum over `axes` (default all)."""

    REDUCTION = True
    LINEAR_IN = (0,)

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Summed over the batch axis too (a sharded run adds partial sums)."""
        return [rng.standard_normal((4, 3, 2)).astype(dtype)], {"axes": [0, -1]}

    @classmethod
    def reference(cls, X: Any, *, axes: Optional[Sequence[int]], keepdims: bool) -> Any:
        return np.asarray(np.sum(np.asarray(X, np.float64), axis=None if axes is None else tuple(axes),
                                 keepdims=keepdims))


class ReduceMeanOp(Reduce):
    """Mean over `axes` (default all)."""

    REDUCTION = True
    AVERAGES = True
    LINEAR_IN = (0,)

    DTYPES = FLOAT_DTYPES

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 3, 2)).astype(dtype)], {"axes": [0, 1], "keepdims": True}

    @classmethod
    def reference(cls, X: Any, *, axes: Optional[Sequence[int]], keepdims: bool) -> Any:
        return np.asarray(np.mean(np.asarray(X, np.float64), axis=None if axes is None else tuple(axes),
                                  keepdims=keepdims))


class SumOp(Op):
    """Element-wise sum of n >= 1 operands of identical type (gradient accumulation)."""

    ONNX = OnnxMap()
    ELEMENTWISE = "same"
    LINEAR_IN = (0,)
    LINEAR_JOINTLY = True

    OPERANDS = (Operand("X", variadic=True),)
    RESULTS = ("Y",)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, NUMERIC_DTYPES)
        shape = ctx.type(0).shape
        for i in range(1, len(self.operands)):
            ctx.same_dtype(0, i)
            merged = unify_shapes(shape, ctx.type(i).shape)
            if merged is None:
                ctx.fail(f"operand {self.operand_value(i)} has shape {format_shape(ctx.type(i).shape)} but "
                         f"{self.operand_value(0)} has {format_shape(shape)}; they must be equal", operand=i)
            shape = merged
        return [ctx.type(0).with_shape(shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        return [rng.standard_normal((4, 5)).astype(dtype) for _ in range(3)], {}

    @classmethod
    def reference(cls, *X: Any) -> Any:
        return np.sum([np.asarray(x, np.float64) for x in X], axis=0)
