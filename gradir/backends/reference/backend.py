"""The ``reference`` backend: the schedule's steps one after another on the caller's thread, each
result a fresh array (no buffer pool, no in-place writes, no threads).  It is what the tests hold
the ``cpu`` backend to: the same bits on every sample."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from ..base import register_backend
from ...errors import Diagnostic, ExecutionError, GradirError
from ..cpu.executor import blas_hold
from ..cpu.kernels import KERNELS, get_kernel, parallel
from ..cpu.runtime import Executable, warm_kernels

__all__ = ["ReferenceExecutable"]


class ReferenceExecutable(Executable):
    """Runs the schedule step by step on the caller's thread, each result a fresh array."""

    backend = "reference"

    def run(self, inputs: Mapping[str, Any], *, check_numerics: bool = False,
            trace: Optional[list] = None) -> dict[str, np.ndarray]:
        arrays, _ = self.check_inputs(inputs)
        if check_numerics:
            self._check_input_numerics(arrays)
        values: dict[str, Any] = dict(arrays)
        # BLAS as the CPU backend holds it (one thread when the graph has BLAS steps), one core
        with blas_hold(self.plan), parallel.cores(1), np.errstate(all="ignore"):
            for st in self.plan.steps:
                self._step(st, values, check_numerics)
        return self.keyed_outputs(values)

    def _step(self, st: Any, values: dict, check_numerics: bool) -> None:
        op = st.op
        args = [None if v is None else values[v] for v in st.operands]
        n = len(st.results)
        try:
            res = st.kernel.fn(*args, out=None if n == 1 else (None,) * n, **op.kernel_attrs())
        except GradirError:
            raise
        except Exception as e:  # a kernel failed: the cause first, then the op
            raise ExecutionError(Diagnostic(f"{type(e).__name__}: {e}; in {op.to_string()}",
                                            filename=self._file)) from e
        for r, a in zip(st.results, (res,) if n == 1 else res):
            a = np.asarray(a)
            if check_numerics and a.dtype.kind == "f" and not np.isfinite(a).all():
                raise ExecutionError(Diagnostic(f"produced NaN or Inf in {r} (--check-numerics); in "
                                                f"{op.to_string()}", filename=self._file))
            values[r] = a
        for v in st.free_after:
            values.pop(v, None)


class _Reference:
    name = "reference"
    kernels = "cpu"  # the CPU kernels, called one after another

    def kernel_info(self, op_cls: type) -> Any:
        return get_kernel(op_cls, self.kernels)

    def fusion(self) -> Any:
        return KERNELS.fusion

    def lower(self, graph: Any, program: Any, plan: Any, threads: Optional[int]) -> Any:
        warm_kernels(plan)
        return ReferenceExecutable(graph, program, plan, 1)


register_backend(_Reference())
