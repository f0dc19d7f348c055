"""GRU ops: ONNX Runtime's sequence layer (gate order z, r, h) and its backward through time, and the cell
(PyTorch's ``GRUCell``, gate order r, z, n) and its per-input gradients."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand, format_attr_value
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import FLOAT_DTYPES, Dim, TensorType
from . import references
from .lstm import HIDDEN, LayerCheck, unit_steps

_ACTS = ("sigmoid", "tanh")


def _check_acts(v: tuple) -> Optional[str]:
    if v is None or tuple(v) in (_ACTS, _ACTS * 2):
        return None
    return ('is not supported: only activations=["sigmoid", "tanh"] (the ONNX default; repeated for '
            f'bidirectional) is supported, got {format_attr_value(v)}')


def _positive_clip(v: Any) -> Optional[str]:
    if v is None or v > 0:
        return None
    return f"={format_attr_value(v)} must be positive (a threshold: the gates clip to [-clip, clip])"


LAYER_ATTRS = (
    HIDDEN,
    Attr("direction", "str", "forward", choices=("forward", "reverse", "bidirectional"),
         doc="bidirectional: direction 0 forward, 1 reverse (each row reversed within its sequence length)"),
    Attr("activations", "strs", None, check=_check_acts, normalize=lambda v: tuple(a.lower() for a in v),
         doc="must be the ONNX default if given (any case: ONNX spells it Sigmoid, Tanh; ORT sigmoid, tanh)"),
    Attr("clip", "float", None, check=_positive_clip,
         doc="clip every gate's pre-activation to [-clip, clip] before its activation (ONNX); "
             "its gradient is zero where it clipped"),
    Attr("linear_before_reset", "int", 0, choices=(0, 1),
         doc="1: the reset gate multiplies H·R_hᵀ + Rb_h (PyTorch's GRU); 0: it multiplies H before R_h"),
)
_ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("hidden_size", "direction", "activations", "clip", "linear_before_reset"),
                ignored=("activation_alpha", "activation_beta"), ort_float32_only=True)


def check_layer_attrs(ctx: InferContext) -> None:
    acts = ctx.attrs["activations"]
    D = 2 if ctx.attrs["direction"] == "bidirectional" else 1
    if acts is not None and len(acts) != 2 * D:
        ctx.fail(f"activations has {len(acts)} entries; direction=\"{ctx.attrs['direction']}\" needs "
                 f"{2 * D} (two per direction)", attr="activations")


class GRUCheck(LayerCheck):
    """The LSTM layers' operand checker with the GRU's shapes (three gates, no cell state)."""

    def shapes(self) -> dict[str, list]:
        D, H = self.D, self.H
        return {"W": [D, 3 * H, "I"], "R": [D, 3 * H, H], "B": [D, 6 * H], "state": [D, "B", H],
                "all": ["S", D, "B", H], "zrh": ["S", D, "B", 3 * H], "X": ["S", "B", "I"]}


class GRUTrainingOp(Op):
    """ONNX GRU forward (gate order z, r, h) that also returns what GRUGrad needs (ORT's GRUTraining)."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return layer_flops(operands, attrs)

    ONNX = _ONNX
    SHARDING = "gru_training"
    OPERANDS = (Operand("X", doc="[S, B, I]"), Operand("W", doc="[D, 3H, I]", sample="weights"),
                Operand("R", doc="[D, 3H, H]", sample="weights"),
                Operand("B", optional=True, doc="[D, 6H] (Wb then Rb)", sample="weights"),
                Operand("SL", optional=True, doc="[B] Int32 sequence lengths", sample="lengths"),
                Operand("H0", optional=True, doc="[D, B, H]"))
    RESULTS = ("HAll", "HFinal", "ZRH")
    ATTRS = LAYER_ATTRS
    # GRUGrad takes upstream gradients of HAll and HFinal only: ZRH (the gate activations) has no operand
    # to enter the recurrence through (the hand-written rule is in gradir/autodiff/rules_gru.py)
    NO_GRADIENT_RESULTS = (2,)

    def check_attrs(self, ctx: InferContext) -> None:
        check_layer_attrs(ctx)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        c = GRUCheck(ctx)
        c.x(0)
        s = c.shapes()
        for _ in range(2):  # a second pass lets dims learnt late (e.g. B from H0) reach earlier checks
            for i, k in ((1, "W"), (2, "R"), (3, "B"), (5, "state")):
                c.check(i, s[k])
            c.sl(4)
        return [c.result(k) for k in ("all", "state", "zrh")]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """5 steps of a batch of 4 (axis 1, the shard axis), every optional operand given, sequence
        lengths below S for some rows; bidirectional, PyTorch's linear_before_reset=1, a clip that clips
        some gates."""
        return layer_example(rng, dtype, 2), {"hidden_size": 2, "linear_before_reset": 1,
                                               "direction": "bidirectional", "clip": 0.5}

    @classmethod
    def reference(cls, *arrays: Any, hidden_size: int, direction: str, linear_before_reset: int,
                  clip: Optional[float] = None, **_: Any) -> Any:
        return references.gru_training(*arrays, hidden_size=hidden_size, direction=direction,
                                       linear_before_reset=linear_before_reset, clip=clip)


class GRUGradOp(BackwardOp):
    """ORT's GRU backward through time (GRUGrad), exact in every direction, with sequence lengths, clip, Float64.

    ORT's kernel is forward-only, Float32, without sequence lengths or clip; gradir computes them all.  With
    ``clip`` the gradient stops where the forward clipped a gate's pre-activation; ZRH holds the values after the
    activations, which cannot tell (σ(clip) is also σ of unclipped neighbours in floating point), so the kernel
    recomputes the pre-activations from X, W, R, B and the saved H_{t-1} (HAll)."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return 2 * layer_flops(operands, attrs)  # dX/dH and the weight gradients

    ONNX = _ONNX
    SHARDING = "gru_grad"
    OPERANDS = (*GRUTrainingOp.OPERANDS, Operand("HAll", doc="[S, D, B, H] GRUTraining's every H_t"),
                Operand("ZRH", doc="[S, D, B, 3H] GRUTraining's post-activation z, r, h̃"),
                Operand("dHAll", optional=True, doc="[S, D, B, H] (default 0)"),
                Operand("dHFinal", optional=True, doc="[D, B, H] (default 0)"))
    RESULTS = ("dX", "dW", "dR", "dB", "dH0")
    ATTRS = LAYER_ATTRS

    def check_attrs(self, ctx: InferContext) -> None:
        check_layer_attrs(ctx)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        _check_alignment(ctx)
        c = GRUCheck(ctx)
        c.x(0)
        s = c.shapes()
        for _ in range(2):
            for i, k in ((1, "W"), (2, "R"), (3, "B"), (5, "state"), (6, "all"), (7, "zrh"), (8, "all"),
                         (9, "state")):
                c.check(i, s[k])
            c.sl(4)
        return [c.result(k) for k in ("X", "W", "R", "B", "state")]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The saved values of a reverse ``GRUTraining`` with linear_before_reset=0 and a clip that clips
        some gates (in float64, then ``dtype``) and upstream gradients of HAll and HFinal."""
        X, W, R, B, SL, H0 = layer_example(rng, np.float64)
        attrs = {"hidden_size": 2, "direction": "reverse", "clip": 0.5}
        HAll, HFinal, ZRH = references.gru_training(X, W, R, B, SL, H0, **attrs)
        dy = [rng.standard_normal(a.shape) for a in (HAll, HFinal)]
        arrays = [X, W, R, B, SL, H0, HAll, ZRH, *dy]
        return [a if a.dtype.kind == "i" else a.astype(dtype) for a in arrays], attrs

    @classmethod
    def reference(cls, *arrays: Any, hidden_size: int, direction: str, linear_before_reset: int,
                  clip: Optional[float] = None, **_: Any) -> Any:
        return references.gru_grad(*arrays, hidden_size=hidden_size, direction=direction,
                                   linear_before_reset=linear_before_reset, clip=clip)


# Bytes of gate gradients per fixed chunk of the GRU kernels (``chunk_steps``).  Each chunk is one call of the
# per-direction cores, whose packed weights and thread hand-offs cost per call: with the LSTM's 8 MiB the
# benchmark's layer (S, B, H = 100, 64, 256) ran in three chunks and its GRUGrad took 352 against 259 ms
# on these two (busy) cores; at 32 MiB a chunk is at least ~100 ms of work there.
CHUNK_BYTES = 32 << 20


def chunk_steps(S: int, nb: int, D: int, h: int, itemsize: int) -> int:
    """T0, the steps of the GRU kernels' fixed chunk (each chunk's input product, dX rows and partial weight
    gradients go chunk by chunk, added in a fixed order: ``kernels/gru_sweep.py``): about ``CHUNK_BYTES`` of
    gate gradients (``[T0, D, B, 3H]``), a function of the shapes alone (tests lower it)."""
    return max(1, min(S, CHUNK_BYTES // max(1, nb * D * 3 * h * itemsize)))


def scratch_bytes(kind: str, S: int, nb: int, I: int, h: int, D: int, itemsize: int, direction: str,
                  segment: int = 1, checkpoints: int = 1, reuse_states: int = 0) -> int:
    """The bytes a GRU kernel allocates beside its results (``KernelInfo.scratch``), the buffers that grow
    with the sequence or the chunk: ``kind`` one of ``"training"``, ``"grad"``, ``"checkpointed"``,
    ``"recompute"`` (``kernels/gru.py``, ``kernels/gru_checkpointed.py``).  A reverse direction runs on
    row-reversed copies (X, and what the kernel reads or writes per step of it), and the results are
    reversed back through a temporary; two directions add dX through a second buffer.  The memory
    planner's GRU options (``transforms/memory/recurrence.py``) are the differences of these."""
    rev = direction in ("reverse", "bidirectional")
    T0 = chunk_steps(S, nb, D, h, itemsize)
    z = min(T0, S) * nb * 3 * h  # ``gru_sweep.Forward``'s chunk of gates
    if kind == "training":
        n = z + (S * nb * (I + h + 3 * h + 3 * h) if rev else 0)  # X, HAll, ZRH copies; ZRH reversed back
    elif kind == "checkpointed":
        n = z + (S * nb * (I + h + h) if rev else 0)  # X, HAll copies; HAll reversed back
    else:
        n = S * nb * I if D == 2 else 0  # the second direction's dX
        if kind == "grad":
            n += S * nb * (3 * I + 5 * h) if rev else 0  # X, HAll, ZRH, dHAll, dX copies; dX reversed back
        else:
            L = unit_steps(segment, T0, S)
            m = min(L, S)
            s = min(checkpoints, -(-S // L))
            # a unit's HAll and gates, and its copy of the snapshots (none when it writes over States)
            n += (m + 1) * nb * h + m * nb * 3 * h + (0 if reuse_states else s * nb * h)
            n += z + (S * nb * (3 * I + h) if rev else 0)  # X, dHAll, dX copies; dX reversed back
    return n * itemsize


def _check_alignment(ctx: InferContext) -> None:
    """ORT's gradient builder gives GRUGrad the forward node's inputs as listed: from a GRU that lists fewer
    than six, HAll lands in the SL (4 inputs) or H0 (5 inputs) slot.  Say so rather than only that a shape
    is wrong."""
    for i, bad in ((4, lambda t: t.dtype in FLOAT_DTYPES), (5, lambda t: t.rank == 4)):
        if ctx.has(i) and bad(ctx.type(i)):
            ctx.fail(f"operand {ctx.operand_name(i)} ({ctx.op.operand_value(i)}) is {ctx.type(i)}, which looks like "
                     f"HAll: the inputs are shifted, as ONNX Runtime's gradient builder writes them for a GRU node "
                     f"that lists fewer than its six inputs; GRUGrad's inputs are X, W, R, B, SL, H0, HAll, ZRH, "
                     f"dHAll, dHFinal (leave SL and H0 empty, not out)", operand=i)


def layer_example(rng: Any, dtype: Any, D: int = 1) -> list[Any]:
    """X, W, R, B, SL, H0 of a layer of D directions: S=5, B=4, I=3, H=2; sequence lengths 5, 2, 4, 1."""
    shapes = ((5, 4, 3), (D, 6, 3), (D, 6, 2), (D, 12))
    arrays = [(0.5 * rng.standard_normal(s)).astype(dtype) for s in shapes]
    arrays.append(np.array([5, 2, 4, 1], np.int32))
    arrays.append((0.5 * rng.standard_normal((D, 4, 2))).astype(dtype))
    return arrays


def layer_flops(operands: Any, attrs: Any) -> float:
    """Every step's gate products, both directions: 2 S B 3H (I + H) D."""
    if not operands or operands[0] is None:
        return 0.0
    S, B, I = (tuple(1 if d is None else d for d in operands[0].shape) + (1, 1, 1))[:3]
    H = int(attrs.get("hidden_size") or 1)
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    return 2.0 * S * B * 3 * H * (I + H) * D


# -- the cell (PyTorch's GRUCell) -----------------------------------------------------------------------------
_CELL_OPERANDS = (Operand("X", doc="[B, I]"), Operand("H", doc="[B, Hd] previous hidden state"),
                  Operand("W_ih", doc="[3Hd, I] (blocks r, z, n)", sample="weights"),
                  Operand("W_hh", doc="[3Hd, Hd]", sample="weights"),
                  Operand("B_ih", doc="[3Hd]", sample="weights"),
                  Operand("B_hh", doc="[3Hd] (b_hn stays inside the reset product: not summable with B_ih)",
                          sample="weights"))
CELL_INPUT_NAMES = ("X", "H", "W_ih", "W_hh", "B_ih", "B_hh")


def _cell_dims(ctx: InferContext, base: int) -> tuple[Dim, Dim, int, Any]:
    """Check the six cell operands starting at ``base``; return (B, I, Hd, dtype)."""
    Hd = ctx.attrs["hidden_size"]
    why = f" (hidden_size={Hd})"
    x = ctx.rank(base, 2)
    dtype = ctx.dtype_in(base, FLOAT_DTYPES)
    for k in range(1, 6):
        ctx.same_dtype(base, base + k)
    B, I = x.shape
    B = ctx.expect_shape(base + 1, [B, Hd], why)[0]
    I = ctx.expect_shape(base + 2, [3 * Hd, I], why)[1]
    ctx.expect_shape(base + 3, [3 * Hd, Hd], why)
    ctx.expect_shape(base + 4, [3 * Hd], why)
    ctx.expect_shape(base + 5, [3 * Hd], why)
    return B, I, Hd, dtype


class GRUCellOp(Op):
    """One GRU step (PyTorch's GRUCell, gate order r, z, n): returns H'."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return _cell_flops(operands, attrs)

    NO_ONNX = "ONNX has no single GRU cell step (its GRU runs a whole sequence)"

    SHARDING = "gru_cell"
    OPERANDS = _CELL_OPERANDS
    RESULTS = ("H_next",)
    ATTRS = (HIDDEN,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        B, I, Hd, dtype = _cell_dims(ctx, 0)
        return [TensorType(dtype, [B, Hd])]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """A batch of 4 rows of 3 inputs, hidden size 2."""
        return _cell_example(rng, dtype), {"hidden_size": 2}

    @classmethod
    def reference(cls, *arrays: Any, hidden_size: int) -> Any:
        return references.gru_cell(*arrays, hidden_size)


class GradGRUCellInputOp(BackwardOp):
    """Gradient of GRUCell w.r.t. one input: 0 X, 1 H, 2 W_ih, 3 W_hh, 4 B_ih, 5 B_hh."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return 3 * _cell_flops(operands[1:] if operands else operands, attrs)

    NO_ONNX = "ONNX Runtime has no GRU cell step gradient (GRUGrad differentiates a whole sequence)"

    SHARDING = "gru_cell_grad"
    OPERANDS = (Operand("dH_next", doc="[B, Hd] gradient w.r.t. H'"), *_CELL_OPERANDS)
    RESULTS = ("dInput",)
    ATTRS = (Attr("input_index", "int", min=0, max=5,
                  doc="which gradient: 0 X, 1 H, 2 W_ih, 3 W_hh, 4 B_ih, 5 B_hh"), HIDDEN)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        B, I, Hd, dtype = _cell_dims(ctx, 1)
        ctx.same_dtype(1, 0)
        B = ctx.expect_shape(0, [B, Hd], f" (hidden_size={Hd})")[0]
        shapes = [[B, I], [B, Hd], [3 * Hd, I], [3 * Hd, Hd], [3 * Hd], [3 * Hd]]
        return [TensorType(dtype, shapes[ctx.attrs["input_index"]])]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The gradient of a weight (summed over the batch of 4: partial sums when sharded)."""
        dh = rng.standard_normal((4, 2)).astype(dtype)
        return [dh] + _cell_example(rng, dtype), {"input_index": 3, "hidden_size": 2}

    @classmethod
    def reference(cls, *arrays: Any, input_index: int, hidden_size: int) -> Any:
        return references.gru_cell_grads(*arrays, hidden_size)[input_index]


def _cell_example(rng: Any, dtype: Any) -> list[Any]:
    """The six cell operands: B=4, I=3, Hd=2 (every dimension distinct: the batch axis is unambiguous)."""
    shapes = ((4, 3), (4, 2), (6, 3), (6, 2), (6,), (6,))
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _cell_flops(operands: Any, attrs: Any) -> float:
    """One step's gate products: 2 B 3Hd (I + Hd)."""
    if not operands or operands[0] is None:
        return 0.0
    B, I = (tuple(1 if d is None else d for d in operands[0].shape) + (1, 1))[:2]
    H = int(attrs.get("hidden_size") or 1)
    return 2.0 * B * 3 * H * (I + H)
