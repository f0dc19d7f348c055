"""NumPy kernels for the activation family: docs/ops.md (ORT gradients and forwards).

Every kernel keeps its operands' dtype (Float32 or Float64; no float32 result goes
through a float64 array) and follows ``gradir.backends.cpu.kernels``' calling convention,
``fn(*operands, out=None, **attrs)``, writing into ``out`` when it is given.

How they are built (docs/performance.md and ``benchmarks/bench_activations.py`` have the
measurements behind each choice):

* **Blocks.**  Element-wise kernels walk the flat arrays in fixed blocks of
  ``BLOCK_BYTES`` per operand.  Intermediates live in per-thread scratch buffers reused
  from block to block, so a kernel reads each operand from memory once and writes its
  result once however many NumPy passes it makes; the passes run in cache.  The softmax
  families do the same with whole rows (or column ranges) per block.
* **Threads.**  Blocks are dealt to threads in contiguous runs by
  :func:`~gradir.backends.cpu.kernels.parallel.parallel_rows`.  The block grid depends only on the shape
  and dtype, never on the thread count, and a block is computed the same way wherever it
  runs, so results are bit-identical for any thread count.
* **No selects.**  ``np.where``/``putmask``/``copyto(where=)`` are 10-15x slower than a
  pass here.  Branches become exact arithmetic on 0/1 masks written by ``np.greater`` into
  a float buffer, integer bit masks (``ReluGrad``), or ``maximum`` tricks whose result is
  exactly one of the branches.
* **In place.**  Every kernel is registered ``inplace=True``: within a block each operand
  is read before the same positions of ``out`` are written, or only through same-position
  ufuncs, so ``out`` may be any operand.
* **Costs per pass** (float32, one core, 512 KiB blocks in L2; ns per element): a pass with
  a scalar 0.11, array*array 0.15-0.2 (NumPy's add/multiply loops are slower than
  ``maximum``'s), ``divide`` 0.23, ``exp2`` 0.26, ``tanh`` 0.34, ``exp`` 0.45,
  ``copysign`` 0.7.  Hence ``exp2`` with the ``log2 e`` folded into a constant, and
  formulas chosen for few array*array passes.

Numerics.  Float64 aims at a few ulps of the exact value: sigmoids are
``σ(w) = max(e, [w>=0]) / (1 + e)``, ``σ(-w) = max(e, [w<0]) / (1 + e)`` with
``e = exp(-|w|)`` (exact underflow to 0, full relative accuracy in both tails), and the
arguments ``alpha·x`` (QuickGelu) and ``x²`` (Gelu) reach ``exp`` with their rounding
error carried along (Dekker's exact product), because ``exp`` turns an argument error
``δ`` into a relative error ``δ``, which is ``|w|`` ulps of the result.  (FastGelu's cubic
argument is not carried; its error grows like ``|w|`` ulps in the far tail.)  Float32
takes the faster forms ``σ(w) = 1/(1 + e)``, ``e = exp(-w)``, with ``w`` clipped so that
every ``exp``, ``1 + exp`` and product stays a finite *normal* float (denormals make a
ufunc ~17x slower): its results keep a few ulps of relative accuracy, times ``1 + |w|``
for the argument's own rounding, and in the saturated tails, where the exact value is
below ~1e-30, may be such a tiny number instead of 0.  The exact GELU uses
``Φ(-a) = e^{-a²/2} R(a)`` with ``R(a) = erfcx(a/√2)/2``, which is smooth: Float64 takes
``R`` from ``scipy.special.erfcx``, Float32 from a degree-8 polynomial in
``t = 1/(1 + a/4)`` (relative error < 5e-7 after float32 rounding).

Modules: ``blocks`` (checks, scratch, the block and row walks), ``numerics`` (the formulas the
kernels share), ``grad`` (gradient kernels), ``forward`` (forward kernels).
"""

from __future__ import annotations

from .blocks import BLOCK_BYTES
# the gradient kernels register first, then the forward ones (as the family's ops are listed)
from .grad import (fast_gelu_grad, gelu_grad, leaky_relu_grad, log_softmax_grad, log_softmax_grad_13, quick_gelu_grad,
                   relu_grad, sigmoid_grad, softmax_grad, softmax_grad_13, tanh_grad)
from .forward import fast_gelu, gelu, leaky_relu, log_softmax, quick_gelu, relu, sigmoid, softmax, tanh

__all__ = [
    "BLOCK_BYTES",
    "fast_gelu",
    "fast_gelu_grad",
    "gelu",
    "gelu_grad",
    "leaky_relu",
    "leaky_relu_grad",
    "log_softmax",
    "log_softmax_grad",
    "log_softmax_grad_13",
    "quick_gelu",
    "quick_gelu_grad",
    "relu",
    "relu_grad",
    "sigmoid",
    "sigmoid_grad",
    "softmax",
    "softmax_grad",
    "softmax_grad_13",
    "tanh",
    "tanh_grad",
]
