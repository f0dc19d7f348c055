"""Dropout: ONNX's Dropout (opset 12+) with a counter-based mask, and ORT's DropoutGrad.

gradir's mask is a pure function of ``(seed, generator, the element's flat index in the whole tensor)``:
no generator state is carried from element to element or from run to run, so the mask is the same on
any thread count and any shard count (a shard draws its slice at the global indices: sharding gives
the op its shard's rows, ``shard_rows``), and the same on every run of a graph.  Two generators:

* ``"philox"`` (the default): Philox-4x32-10 (Salmon et al., SC 2011; the generator of cuRAND, JAX
  and PyTorch's CUDA dropout) keyed by the 64-bit seed, counter ``n // 4``, word ``n % 4``: element
  ``n`` is kept when that 32-bit word ``w`` has ``w / 2**32 >= ratio``.
* ``"ort"``: ONNX Runtime's CPU kernel with a ``seed`` attribute, bit for bit (1.19.2, Linux): it draws
  ``std::default_random_engine`` (libstdc++'s ``minstd_rand0``, ``x <- 16807 x mod (2**31 - 1)``, seeded
  with ``seed mod (2**31 - 1)``, 0 as 1) through ``uniform_real_distribution<float>``, one draw per
  element in order, and keeps ``u >= float32(ratio)`` with ``u = float32(x - 1) / 2**31``.  The n-th
  draw is ``seed * 16807**(n+1) mod (2**31 - 1)``: counter-based too.  ORT's kernel adds 1 to its seed
  at every run of a session, so this is a session's first run (run k used ``seed + k``).

A ``mask`` operand replaces the draw: the result is ``data * mask / (1 - ratio)`` with that mask (it is
also the ``mask`` result), which reproduces another framework's run from its mask.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.types import FLOAT_DTYPES, DType, TensorType

__all__ = ["DropoutOp", "DropoutGradOp", "GENERATORS", "draws"]

GENERATORS = ("philox", "ort")


def _ratio(value: float) -> Optional[str]:
    return None if 0.0 <= value < 1.0 else f"must be in [0, 1) (the probability of dropping an element), got {value}"


RATIO = Attr("ratio", "float", 0.5, check=_ratio, doc="the probability of dropping an element, in [0, 1)")
TRAINING_MODE = Attr("training_mode", "bool", False, doc="false: the identity (an all-true mask), as ONNX")


def draws(attrs: dict, mask_given: bool) -> bool:
    """Whether a Dropout with these attributes draws its mask (training, a ratio above 0, no mask operand)."""
    return bool(attrs["training_mode"]) and attrs["ratio"] > 0 and not mask_given


def _same_shape(ctx: InferContext, i: int) -> None:
    ctx.dtype_in(i, (DType.Bool,))
    ctx.expect_shape(i, ctx.type(0).shape, f" (the shape of data, {ctx.type(0)})")


class DropoutOp(Op):
    """ONNX Dropout (opset 12+): output = data * mask / (1 - ratio), the mask drawn by a counter-based generator.

    ``mask`` keeps each element with probability ``1 - ratio``; with ``training_mode`` false or ``ratio``
    0 the output is ``data`` and the mask all true, as ONNX (with a ``mask`` operand too).  The draw of
    element ``n`` (its flat index in the whole tensor) depends only on ``seed``, ``generator`` and
    ``n``, so the result is the same on any thread count and shard count (docs/onnx.md, "Dropout's
    mask").  ``generator="ort"`` reproduces ONNX Runtime's CPU kernel with that ``seed``
    (the first run of its session).  A ``mask`` operand (Bool, data's shape) replaces the draw and is
    the ``mask`` result too: it reproduces another framework's run from its mask.  ONNX's ``ratio``
    and ``training_mode`` inputs are attributes here (the importer folds them; a ratio not known at
    import is an error).  ONNX without a seed draws a new mask each run; gradir's ``seed`` defaults to
    0.  ``shard_rows`` is set by sharding (``gradir.shard``), never by hand: Int64 ``[n, 2]``, row
    ``k`` = (the global index along ``shard_axis`` of data's ``k``-th slice, the global size there).
    The gradient is ORT's ``DropoutGrad`` of the mask; the mask has none.
    """

    SHARDING = "elementwise"
    SHARD_ROWS = True
    OPERANDS = (Operand("data", doc="the input"),
                Operand("mask", optional=True, doc="Bool, data's shape: the mask to apply instead of drawing one"),
                Operand("shard_rows", optional=True, doc="set by sharding: Int64 [n, 2], (global index, global "
                                                         "size) along shard_axis of each slice of data"))
    RESULTS = ("output", "mask")
    ATTRS = (RATIO, TRAINING_MODE,
             Attr("seed", "int", 0, doc="the generator's key (ONNX's seed; ONNX without one draws anew each run)"),
             Attr("generator", "str", "philox", choices=GENERATORS,
                  doc='"philox" (Philox-4x32-10) or "ort" (ONNX Runtime 1.19.2\'s CPU kernel, bit for bit)'),
             Attr("shard_axis", "int", 0, min=0, doc="set by sharding: the axis shard_rows indexes"))
    GRADIENT = "DropoutGrad"
    GRADIENT_OPERANDS = ("mask",)
    NO_GRADIENT_RESULTS = (1,)
    NO_GRADIENT_OPERANDS = (1, 2)
    ONNX = None  # hand handlers: ratio and training_mode are ONNX inputs (interop/onnx/*_dropout.py)

    def needs_shard_rows(self) -> bool:
        """Only a Dropout that draws its mask needs its shard's rows (a given mask, or none drawn, is the same
        on every shard)."""
        return draws(self.resolved_attrs(), len(self.operands) > 1 and self.operands[1] is not None)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        t = ctx.type(0)
        if ctx.has(1):
            _same_shape(ctx, 1)
        if ctx.has(2):
            ctx.dtype_in(2, (DType.Int64,))
            axis = ctx.attrs["shard_axis"]
            if axis >= max(t.rank, 1):
                ctx.fail(f"shard_axis {axis} is out of range for data {t}", attr="shard_axis")
            rows = t.shape[axis] if t.rank else 1
            ctx.expect_shape(2, (rows, 2), f" (one (index, size) row per slice of data along axis {axis})")
        return [t, TensorType(DType.Bool, t.shape)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """A [4, 6] training-mode dropout of ratio 0.25 at seed 7 (the mask is fixed by the seed), ONNX Runtime's
        generator (which exports as ONNX's Dropout; tests/test_ops_dropout.py runs Philox's through the rest)."""
        return [rng.standard_normal((4, 6)).astype(dtype)], {"ratio": 0.25, "training_mode": True, "seed": 7,
                                                              "generator": "ort"}

    @classmethod
    def reference(cls, data: Any, mask: Any = None, shard_rows: Any = None, *, ratio: float, training_mode: bool,
                  seed: int, generator: str, shard_axis: int) -> Any:
        x = np.asarray(data, np.float64)
        if not (training_mode and ratio > 0):
            return x.copy(), np.ones(x.shape, bool)
        if mask is None:
            mask = dropout_mask(x.shape, ratio, seed, generator)
        mask = np.asarray(mask, bool)
        return np.where(mask, x, 0.0) / (1.0 - ratio), mask.copy()


class DropoutGradOp(BackwardOp):
    """ORT DropoutGrad: dX = dY * mask / (1 - ratio); ratio 0 gives dY.

    Operands and attributes are ORT's (``com.microsoft``, opset 1), its ``ratio`` and ``training_mode``
    inputs as attributes (the importer folds them; absent, ``ratio`` is 0.5 as in ORT).  As ORT's CPU
    kernel, ``training_mode`` is carried but not read: the forward rule gives a Dropout that did not
    train ``ratio=0`` (the identity's gradient), where ORT would scale by ``1/(1 - ratio)``.
    """

    ONNX = None  # hand handlers (ratio and training_mode are ORT inputs, com.microsoft)
    SHARDING = "elementwise"
    OPERANDS = (Operand("dY", doc="upstream gradient"), Operand("mask", doc="Bool, dY's shape: the forward's mask"))
    RESULTS = ("dX",)
    ATTRS = (RATIO, Attr("training_mode", "bool", False, doc="the forward's; not read (as ORT's CPU kernel)"))
    LINEAR_IN = (0,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        _same_shape(ctx, 1)
        return [ctx.type(0)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """dY [4, 6] and a mask keeping about 3/4."""
        return [rng.standard_normal((4, 6)).astype(dtype), rng.random((4, 6)) >= 0.25], \
            {"ratio": 0.25, "training_mode": True}

    @classmethod
    def reference(cls, dY: Any, mask: Any, *, ratio: float, training_mode: bool) -> Any:
        dy = np.asarray(dY, np.float64)
        if ratio == 0:
            return dy.copy()
        return np.where(np.asarray(mask, bool), dy, 0.0) / (1.0 - ratio)


# -- the float64 reference's masks: plain Python integers, one element at a time (small shapes only) ---------
_M = (1 << 32) - 1


def _philox4x32(ctr: list[int], key: list[int]) -> list[int]:
    """Philox-4x32-10 of a counter (4 words) and a key (2 words), as Random123 defines it."""
    c, k = list(ctr), list(key)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & _M, (p0 >> 32) ^ c[3] ^ k[1], p0 & _M]
        k = [(k[0] + 0x9E3779B9) & _M, (k[1] + 0xBB67AE85) & _M]
    return c


def dropout_mask(shape: tuple, ratio: float, seed: int, generator: str) -> np.ndarray:
    """The mask gradir draws for a tensor of ``shape`` (the module docstring's definitions)."""
    n = int(np.prod(shape, dtype=np.int64))
    keep = np.empty(n, bool)
    if generator == "philox":
        s = seed % (1 << 64)
        key = [s & _M, s >> 32]
        for i in range(n):
            b = i // 4
            w = _philox4x32([b & _M, b >> 32, 0, 0], key)[i % 4]
            keep[i] = w / 2.0 ** 32 >= ratio
    else:
        m = (1 << 31) - 1
        x = (seed % (1 << 64)) % m or 1
        r32 = np.float32(ratio)
        for i in range(n):
            x = x * 16807 % m
            u = np.float32(x - 1) / np.float32(2.0 ** 31)
            keep[i] = min(u, np.nextafter(np.float32(1), np.float32(0))) >= r32
    return keep.reshape(shape)
