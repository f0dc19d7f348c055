"""Which ops are independent along rows, and how (``ROW_RULES``, keyed by op class; element-wise ops by their
``ELEMENTWISE`` trait): the rules ``chunking`` grows its regions with (docs/memory.md, "Chunking")."""

from __future__ import annotations

import math
from typing import Callable, Optional

from ...ir.op import Op
from ...ir.types import TensorType

__all__ = ["Use", "Rule", "ROW_RULES", "row_rule", "Rows", "rule_of", "matmul_rule", "softmax_rule",
           "MAX_MATRIX_BYTES", "MAX_MATRIX_K", "nbytes"]

# a product by one matrix joins a region when that matrix (packed once for all the blocks, by the packed-panel
# GEMM's rule) and a weight gradient summed piece by piece are at most this big: a projection to the classes,
# not an MLP's hidden layer (whose 16 MiB weight would be packed again for every block)
MAX_MATRIX_BYTES = 1 << 20
MAX_MATRIX_K = 512


class Use:
    """What a rule says of one op: per operand, its block of rows (True) or whole (False); per result,
    ``"rows"`` or a reduction (``"sum"`` / ``"mean"``, with ``count``, the values a mean divides by)."""

    def __init__(self, rows: tuple[bool, ...], results: tuple[str, ...], kind: str = "kernel", count: int = 1) -> None:
        self.rows, self.results, self.kind, self.count = rows, results, kind, count


Rule = Callable[[Op, "Rows"], Optional[Use]]
ROW_RULES: dict[type, Rule] = {}


def row_rule(*classes: type) -> Callable[[Rule], Rule]:
    """Register ``fn(op, rows) -> Use | None`` as the row rule of ``classes``."""
    def deco(fn: Rule) -> Rule:
        for c in classes:
            ROW_RULES[c] = fn
        return fn
    return deco


class Rows:
    """The row structure for ``N`` rows: which values are row-indexed and their periods."""

    def __init__(self, types: dict[str, TensorType], n: int) -> None:
        self.types, self.n = types, n

    def shape(self, v: Optional[str]) -> Optional[tuple[int, ...]]:
        t = self.types.get(v) if v is not None else None
        if t is None or not t.is_static:
            return None
        return tuple(int(d) for d in t.shape)

    def k(self, v: Optional[str]) -> Optional[int]:
        """How many leading axes of ``v`` are rows (the fewest whose product is N), or None."""
        s = self.shape(v)
        if not s or s[0] < 2:
            return None
        p = 1
        for k, d in enumerate(s, 1):
            p *= d
            if p == self.n:
                return k
            if p > self.n:
                return None
        return None

    def period(self, v: str) -> int:
        s = self.shape(v)
        assert s is not None
        return math.prod(s[1:self.k(v)])

    def row_shape(self, v: Optional[str]) -> Optional[tuple[int, ...]]:
        k = self.k(v)
        s = self.shape(v)
        return None if k is None or s is None else s[:k]


def _broadcast(op: Op, r: Rows) -> Optional[Use]:
    """Element-wise ops (and ``BroadcastTo``): each operand either has the result's row axes (its block)
    or size 1 on all of them (read whole)."""
    if len(op.results) != 1:
        return None
    res = r.shape(op.results[0])
    rs = r.row_shape(op.results[0])
    if res is None or rs is None:
        return None
    rows = []
    for v in op.operands:
        s = r.shape(v)
        if v is None or s is None:
            return None
        padded = (1,) * (len(res) - len(s)) + s
        if len(s) == len(res) and s[:len(rs)] == rs:
            rows.append(True)
        elif all(d == 1 for d in padded[:len(rs)]):
            rows.append(False)
        else:
            return None
    return Use(tuple(rows), ("rows",))


def _axis_free(axis: int, rank: int, k: int) -> bool:
    return (axis + rank if axis < 0 else axis) >= k


def softmax_rule(op: Op, r: Rows) -> Optional[Use]:
    """Softmax-like ops over one axis (or, the pre-13 ones, the axes from it on): not a row axis."""
    x = op.operands[-1]
    k, s = r.k(x), r.shape(x)
    if k is None or s is None or any(r.row_shape(v) != r.row_shape(x) or r.shape(v) != s for v in op.operands):
        return None
    if not _axis_free(int(op.attrs.get("axis", -1)), len(s), k):
        return None
    return Use((True,) * len(op.operands), ("rows",))


def _reduce(op: Op, r: Rows) -> Optional[Use]:
    """A reduction over inner axes keeps the rows; ``ReduceSum``/``ReduceMean`` over every row axis is a
    sum over the region's rows (its result read whole, after the region)."""
    x = op.operands[0]
    k, s = r.k(x), r.shape(x)
    if k is None or s is None:
        return None
    axes = op.attrs.get("axes")
    norm = sorted({a + len(s) if a < 0 else a for a in (range(len(s)) if axes is None else axes)})
    if all(a >= k for a in norm):
        return Use((True,), ("rows",)) if r.row_shape(op.results[0]) == s[:k] else None
    if set(range(k)) <= set(norm) and op.op_name in ("ReduceSum", "ReduceMean"):
        kind = "mean" if op.op_name == "ReduceMean" else "sum"
        return Use((True,), (kind,), "sum", math.prod(s[a] for a in norm))
    return None


def _view(op: Op, r: Rows) -> Optional[Use]:
    """A reshape (``Reshape``, ``Unsqueeze``, ``Squeeze``, ...): row n of the operand is row n of the result
    when both merge their leading axes into N rows."""
    if r.k(op.operands[0]) is None or len(op.results) != 1 or r.k(op.results[0]) is None:
        return None
    return Use((True,) + (False,) * (len(op.operands) - 1), ("rows",), "view")


def matmul_rule(op: Op, r: Rows) -> Optional[Use]:
    """``A·B`` with A's rows the region's (not its last axis) and B one matrix read whole; or ``Aᵀ·B`` with
    both ``[N, ·]``: the sum over the rows of the rows' products (a weight's gradient)."""
    a, b = op.operands[:2]
    sa, sb = r.shape(a), r.shape(b)
    if sa is None or sb is None or len(sb) != 2:
        return None
    at = op.attrs
    if at.get("transBatchA", 0) or at.get("transBatchB", 0):
        return None
    if not at.get("transA", 0):
        k = r.k(a)
        if k is None or k >= len(sa) or r.row_shape(op.results[0]) != sa[:k]:
            return None
        if nbytes(r.types.get(b)) > MAX_MATRIX_BYTES or sb[0] > MAX_MATRIX_K:  # packed again for every block
            return None
        return Use((True, False), ("rows",))
    if len(sa) == 2 and r.k(a) == 1 and r.k(b) == 1 and not at.get("transB", 0):
        if nbytes(r.types.get(op.results[0])) > MAX_MATRIX_BYTES:  # a partial sum per piece: small ones only
            return None
        return Use((True, True), ("sum",), "sum")
    return None


def _cross_entropy(op: Op, r: Rows) -> Optional[Use]:
    """``SoftmaxCrossEntropyLoss``: scores ``[N, C, ...]`` and labels ``[N, ...]`` by their rows (axis 0), the
    weights whole; ``log_prob`` by rows, the loss by rows ("none") or, reduced, only when nothing reads it
    (``"drop"``: the backward graph's forward loss).  ``SoftmaxCrossEntropyLossGrad``: the same; a reduced
    ``dY`` (a scalar) is read whole and the kernel scales it over every row's targets once, up front."""
    grad = op.op_name.endswith("Grad")
    scores, labels = (op.operands[1], op.operands[2]) if grad else (op.operands[0], op.operands[1])
    weights = op.operands[3] if grad and len(op.operands) > 3 else (op.operands[2] if len(op.operands) > 2 else None)
    if r.k(scores) != 1 or r.k(labels) != 1:
        return None
    none = op.attrs.get("reduction", "mean") == "none"
    rows = [True, True] + [False] * (weights is not None)
    if grad:
        if not none and r.shape(op.operands[0]) != ():
            return None
        return Use(tuple([none] + rows), ("rows",))
    return Use(tuple(rows), ("rows" if none else "drop", "rows"))


def _install_rules() -> None:
    from ...ir.op import OPS

    def named(*names: str) -> list[type]:
        return [OPS[n] for n in names if n in OPS]
    row_rule(*named("Softmax", "LogSoftmax", "SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad",
                    "LogSoftmaxGrad_13"))(softmax_rule)
    row_rule(*named("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"))(_reduce)
    row_rule(*named("Reshape", "Unsqueeze", "Squeeze", "Flatten"))(_view)
    row_rule(*named("MatMul", "FusedMatMul"))(matmul_rule)
    row_rule(*named("BroadcastTo"))(_broadcast)
    row_rule(*named("SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad"))(_cross_entropy)


def rule_of(op: Op) -> Optional[Rule]:
    if not ROW_RULES:
        _install_rules()
    rule = ROW_RULES.get(type(op))
    if rule is None and (getattr(op, "ELEMENTWISE", None) or op.op_name == "FusedElementwise"):
        if op.op_name == "FusedElementwise" and op.body.sums:  # type: ignore[attr-defined]
            return None  # sums over its leading axes: not the region's kind of sum
        return _broadcast
    return rule


def nbytes(t: Optional[TensorType]) -> int:
    if t is None or not t.is_static:
        return 0
    return math.prod(int(d) for d in t.shape) * t.dtype.numpy.itemsize
