"""Independent, deliberately plain float64 references for the LSTM ops (docs/ops.md, LSTM).

One batch row and one step at a time, written straight from the equations; shares no
code with ``gradir.backends.cpu.kernels.lstm``.  Slow, and only for tests on small shapes.  The cell and
the layer are the ops' own references (``Op.reference``, ``gradir.ops.references``).
"""

from __future__ import annotations

import numpy as np

from gradir.ops.references import lstm_cell as lstm_cell_ref
from gradir.ops.references import lstm_training as lstm_training_ref
from gradir.ops.references import sigmoid

__all__ = ["sigmoid", "lstm_cell_ref", "lstm_training_ref", "lstm_loss"]


def lstm_loss(outputs, dHAll: np.ndarray | None, dHFinal: np.ndarray | None,
              dCFinal: np.ndarray | None) -> float:
    """Σ dHAll·HAll + dHFinal·HFinal + dCFinal·CFinal (absent weights count as zero)."""
    HAll, HFinal, CFinal = outputs[0], outputs[1], outputs[2]
    total = 0.0
    for w, v in ((dHAll, HAll), (dHFinal, HFinal), (dCFinal, CFinal)):
        if w is not None:
            total += float(np.sum(np.asarray(w, np.float64) * np.asarray(v, np.float64)))
    return total
