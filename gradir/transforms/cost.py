"""Cost estimates for the schedule's steps: how long each takes on one core, how many cores it
can use, and the longest path from it to the end of the graph (its priority).

The executor uses them at run time (``gradir.backends.cpu.executor``): among the steps ready to run, the one
whose remaining path is longest starts first, with the cores that are free then, up to what it
can use.  The estimates only order and size steps against each other, so a rough model is
enough: FLOPs at ``FLOPS_PER_S`` for the products (``Op.PRODUCT`` ops, the LSTM layers and cells), bytes
read and written at ``BYTES_PER_S`` for everything.  Unknown (``?``) dimensions count as 1.  How
many cores a step can use is its kernel's to say (``KernelInfo.width``): this module does not
import the kernels.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from ..ir.op import OPS
from ..ir.types import TensorType

__all__ = ["FLOPS_PER_S", "BYTES_PER_S", "flops", "step_cost", "step_width", "value_shape", "value_bytes",
           "product_shapes"]

FLOPS_PER_S = 100e9  # float32 GEMM on one core (docs/performance.md: 95-130 GFLOP/s)
BYTES_PER_S = 10e9  # a streaming pass on one core (~15 GB/s copy)


def value_shape(t: Optional[TensorType]) -> tuple:
    """A value's shape with unknown (``?``) dimensions counted as 1; ``()`` for none."""
    if t is None:
        return ()
    return tuple(1 if d is None else d for d in t.shape)


def value_bytes(t: Optional[TensorType]) -> int:
    """A value's size in bytes (unknown dimensions counted as 1)."""
    if t is None:
        return 0
    return math.prod(value_shape(t)) * t.dtype.numpy.itemsize


def _is_product(op_name: str) -> bool:
    """A matrix product of operands 0 and 1 (``Op.PRODUCT``: MatMul, FusedMatMul)."""
    cls = OPS.get(op_name)
    return cls is not None and cls.PRODUCT


def product_shapes(operands: Sequence[Optional[TensorType]], attrs: dict[str, Any]) -> tuple[tuple, tuple]:
    """The two factors' shapes as multiplied (``FusedMatMul``'s ``transA``/``transB`` applied)."""
    a, b = value_shape(operands[0]), value_shape(operands[1])
    if attrs.get("transA") and len(a) >= 2:
        a = a[:-2] + (a[-1], a[-2])
    if attrs.get("transB") and len(b) >= 2:
        b = b[:-2] + (b[-1], b[-2])
    return a, b


def flops(op_name: str, operands: Sequence[Optional[TensorType]], results: Sequence[Optional[TensorType]],
          attrs: dict[str, Any]) -> float:
    """Multiply-add FLOPs of the products an op computes (0 for the others)."""
    if _is_product(op_name) and len(operands) >= 2 and None not in operands[:2] and results:
        a, _ = product_shapes(operands, attrs)
        k = a[-1] if a else 1
        return 2.0 * math.prod(value_shape(results[0])) * k
    cls = OPS.get(op_name)
    return 0.0 if cls is None else float(cls.flops(operands, results, attrs))


def step_cost(op_name: str, operands: Sequence[Optional[TensorType]], results: Sequence[Optional[TensorType]],
              attrs: dict[str, Any]) -> float:
    """Estimated seconds on one core."""
    moved = sum(value_bytes(t) for t in operands) + sum(value_bytes(t) for t in results)
    return flops(op_name, operands, results, attrs) / FLOPS_PER_S + moved / BYTES_PER_S


def step_width(kernel: Any, operands: Sequence[Optional[TensorType]], results: Sequence[Optional[TensorType]],
               attrs: dict[str, Any]) -> int:
    """How many cores the op's kernel can keep busy: the backend's kernel says (its ``width``, e.g.
    the blocks of a product, the row chunks of a kernel that splits); 1 when it does not."""
    width = getattr(kernel, "width", None)
    return 1 if width is None else max(1, int(width(operands, results, attrs)))
