"""What an op's type rule sees (``InferContext``) and the shape unification it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from ..errors import OpError
from .types import DType, Dim, TensorType, format_shape

if TYPE_CHECKING:  # named in annotations only: ir.py imports this module
    from .op import Op

__all__ = ["InferContext", "unify_dim", "unify_shapes"]


class InferContext:
    """What a type rule sees: the op, its operand types (``None`` if omitted) and attributes."""

    def __init__(self, op: "Op", types: Sequence[Optional[TensorType]], attrs: Mapping[str, Any]) -> None:
        self.op = op
        self.types = list(types)
        self.attrs = dict(attrs)

    @property
    def name(self) -> str:
        return self.op.op_name

    def fail(self, message: str, *, operand: int | None = None, attr: str | None = None,
             element: int | None = None) -> "None":
        raise OpError(f"{self.name}: {message}", operand=operand, attr=attr, element=element)

    def declared(self, k: int = 0) -> TensorType:
        """Result ``k``'s type as written on the line, for ops whose type is not inferable
        (``DECLARED_TYPE``): a missing one is an error saying it is required."""
        given = self.op.result_types
        t = given[k] if given is not None and k < len(given) else None
        if t is None:
            raise OpError(f"{self.name}: the result type is required on a {self.name} line (nothing to infer "
                          f"it from), e.g. {self.op.results[0] if self.op.results else 't1'} = {self.name}(...) "
                          f": Float32 [2, 3]")
        return t

    def type(self, i: int) -> TensorType:
        t = self.types[i] if i < len(self.types) else None
        if t is None:  # unreachable after check_signature; a clear error all the same, never an assert
            self.fail(f"operand {self.operand_name(i)} is required", operand=i)
        return t

    def has(self, i: int) -> bool:
        return i < len(self.types) and self.types[i] is not None

    def operand_name(self, i: int) -> str:
        sig = self.op.OPERANDS
        if i < len(sig):
            return sig[i].name
        return f"{sig[-1].name}{i - len(sig) + 2}" if sig and sig[-1].variadic else f"#{i}"

    # -- common checks ---------------------------------------------------
    def dtype_in(self, i: int, allowed: Sequence[DType]) -> DType:
        t = self.type(i)
        if t.dtype not in allowed:
            self.fail(f"operand {self.operand_name(i)} ({self.op.operand_value(i)}) has dtype {t.dtype}; "
                      f"expected {' or '.join(d.value for d in allowed)}", operand=i)
        return t.dtype

    def rank(self, i: int, rank: int) -> TensorType:
        t = self.type(i)
        if t.rank != rank:
            self.fail(f"operand {self.operand_name(i)} ({self.op.operand_value(i)}) must have rank {rank}, "
                      f"got {t}", operand=i)
        return t

    def same_dtype(self, i: int, j: int) -> None:
        a, b = self.type(i), self.type(j)
        if a.dtype != b.dtype:
            self.fail(f"operand {self.operand_name(j)} ({self.op.operand_value(j)}) has dtype {b.dtype} but "
                      f"{self.operand_name(i)} ({self.op.operand_value(i)}) has {a.dtype}", operand=j)

    def unify(self, i: int, j: int) -> TensorType:
        """Operands ``i`` and ``j`` must have identical types (``?`` matches anything)."""
        self.same_dtype(i, j)
        a, b = self.type(i), self.type(j)
        merged = unify_shapes(a.shape, b.shape)
        if merged is None:
            self.fail(f"operand {self.operand_name(j)} ({self.op.operand_value(j)}) has shape "
                      f"{format_shape(b.shape)} but {self.operand_name(i)} ({self.op.operand_value(i)}) has "
                      f"{format_shape(a.shape)}; they must be equal", operand=j)
        return TensorType(a.dtype, merged)

    def expect_shape(self, i: int, shape: Sequence[Dim], what: str = "") -> tuple:
        """Operand ``i`` must have ``shape``; returns the unified shape."""
        t = self.type(i)
        merged = unify_shapes(t.shape, tuple(shape))
        if merged is None:
            self.fail(f"operand {self.operand_name(i)} ({self.op.operand_value(i)}) has shape {format_shape(t.shape)}; "
                      f"expected {format_shape(shape)}{what}", operand=i)
        return merged

    def axis(self, attr: str, rank: int) -> int:
        axis = self.attrs[attr]
        if not -rank <= axis < rank or rank == 0:
            self.fail(f"{attr} {axis} is out of range for rank {rank}", attr=attr)
        return axis % rank



def unify_dim(a: Dim, b: Dim) -> tuple[bool, Dim]:
    if a is None:
        return True, b
    if b is None or a == b:
        return True, a
    return False, None


def unify_shapes(a: Sequence[Dim], b: Sequence[Dim]) -> Optional[tuple]:
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        ok, d = unify_dim(x, y)
        if not ok:
            return None
        out.append(d)
    return tuple(out)
