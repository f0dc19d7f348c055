"""How many cores a CPU kernel can keep busy for given operand types: the ``width`` of its
``KernelInfo`` (the schedule asks it through ``gradir.transforms.cost.step_width``, so the middle need not
know how the kernels split their work)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ....transforms.cost import flops, product_shapes, value_bytes, value_shape
from ....ir.op import OPS
from ....ir.types import TensorType
from . import blocked
from .lstm import common as lstm_common
from .parallel import MIN_CHUNK_BYTES

__all__ = ["step_width"]

# the LSTM layers' kernels (the checkpointed pair runs the same loops and products as LSTMTraining and LSTMGrad:
# the same cores, and so the same per-core decisions and bits)
_LSTM_LAYERS = ("LSTMTraining", "LSTMGrad", "LSTMTrainingCheckpointed", "LSTMGradRecompute")


def step_width(op_name: str, blas: bool, splits: bool, operands: Sequence[Optional[TensorType]],
               results: Sequence[Optional[TensorType]], attrs: dict[str, Any]) -> int:
    """How many cores the op's kernel can keep busy: its blocks (``MatMul``), two half-batch
    loops (large LSTM layers), row chunks (kernels that ``splits``, by ``parallel_rows``'s
    rule); 1 for the rest."""
    if getattr(OPS.get(op_name), "PRODUCT", False) and len(operands) >= 2 and None not in operands[:2]:
        return blocked.partition(*product_shapes(operands, attrs))[1]
    if op_name in _LSTM_LAYERS and operands and operands[0] is not None:
        S, B, I = (value_shape(operands[0]) + (1, 1, 1))[:3]
        H = int(attrs.get("hidden_size") or 1)
        halves = B >= lstm_common.SPLIT_MIN_ROWS and B * 4 * H > lstm_common.WHOLE_LOOP_MAX  # split_wanted
        return max(2 if halves else 1, blocked.partition((S * B, I), (I, 4 * H))[1])
    if op_name.startswith(("LSTMCell", "GradLSTMCellInput")) and operands and operands[0] is not None:
        B, I = (value_shape(operands[0]) + (1, 1))[:2]
        H = int(attrs.get("hidden_size") or 1)
        return blocked.partition((B, I), (I, 4 * H))[1]
    if blas:  # another product: its own split is unknown here
        return 2 if flops(op_name, operands, results, attrs) >= 2 * blocked.MIN_BLOCK_FLOPS else 1
    if splits:
        moved = sum(value_bytes(t) for t in operands) + sum(value_bytes(t) for t in results)
        return max(1, moved // MIN_CHUNK_BYTES) if moved >= 2 * MIN_CHUNK_BYTES else 1
    return 1
