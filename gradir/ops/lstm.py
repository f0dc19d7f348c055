"""LSTM ops: the cell (AiDotNet, gate order i,f,g,o) and the sequence layer (ORT, i,o,f,c)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand, format_attr_value
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import FLOAT_DTYPES, INT_DTYPES, Dim, TensorType
from . import references

HIDDEN = Attr("hidden_size", "int", min=1, doc="hidden size H")

# -- the cell ------------------------------------------------------------------
_CELL_OPERANDS = (Operand("X", doc="[B, I]"), Operand("H", doc="[B, Hd] previous hidden state"),
                  Operand("C", doc="[B, Hd] previous cell state"), Operand("W_ih", doc="[4Hd, I]", sample="weights"),
                  Operand("W_hh", doc="[4Hd, Hd]", sample="weights"),
                  Operand("Bias", doc="[4Hd]", sample="weights"))


def _dim(a: Dim, b: Dim) -> Dim:
    return a if a is not None else b


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
    B = ctx.expect_shape(base + 2, [B, Hd], why)[0]
    I = ctx.expect_shape(base + 3, [4 * Hd, I], why)[1]
    ctx.expect_shape(base + 4, [4 * Hd, Hd], why)
    ctx.expect_shape(base + 5, [4 * Hd], why)
    return B, I, Hd, dtype



class LSTMCellOp(Op):
    """One LSTM step (PyTorch gate order i, f, g, o): returns (H', C')."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return _cell_flops(operands, attrs)


    NO_ONNX = "ONNX has no single LSTM cell step (its LSTM runs a whole sequence)"

    SHARDING = "lstm_cell"
    OPERANDS = _CELL_OPERANDS
    RESULTS = ("H_next", "C_next")
    ATTRS = (HIDDEN,)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        B, I, Hd, dtype = _cell_dims(ctx, 0)
        t = TensorType(dtype, [B, Hd])
        return [t, t]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """A batch of 4 rows of 3 inputs, hidden size 2."""
        return _cell_example(rng, dtype), {"hidden_size": 2}

    @classmethod
    def reference(cls, *arrays: Any, hidden_size: int) -> Any:
        return references.lstm_cell(*arrays, hidden_size)


def _cell_grad_shape(k: int, B: Dim, I: Dim, Hd: int) -> list:
    return [[B, I], [B, Hd], [B, Hd], [4 * Hd, I], [4 * Hd, Hd], [4 * Hd]][k]


_CELL_GRAD_OPERANDS = (Operand("dH_next", doc="[B, Hd] gradient w.r.t. H'"),
                       Operand("dC_next", optional=True, doc="[B, Hd] gradient w.r.t. C' (default 0)"),
                       *_CELL_OPERANDS)

CELL_INPUT_NAMES = ("X", "H", "C", "W_ih", "W_hh", "Bias")


def _cell_grad_types(ctx: InferContext, indices: tuple) -> list[TensorType]:
    B, I, Hd, dtype = _cell_dims(ctx, 2)
    ctx.same_dtype(2, 0)
    B = ctx.expect_shape(0, [B, Hd], f" (hidden_size={Hd})")[0]
    if ctx.has(1):
        ctx.same_dtype(2, 1)
        B = ctx.expect_shape(1, [B, Hd], f" (hidden_size={Hd})")[0]
    return [TensorType(dtype, _cell_grad_shape(k, B, I, Hd)) for k in indices]


class GradLSTMCellInputOp(BackwardOp):
    """Gradient of LSTMCell w.r.t. one input: 0 X, 1 H, 2 C, 3 W_ih, 4 W_hh, 5 Bias."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return 3 * _cell_flops(operands, attrs)  # dX, dH and the weight gradients


    NO_ONNX = "ONNX Runtime has no LSTM cell step gradient (LSTMGrad differentiates a whole sequence)"

    SHARDING = "lstm_cell_grad"
    FUSES_INTO = ("GradLSTMCellInputFused", "input_index", "input_indices")

    OPERANDS = _CELL_GRAD_OPERANDS
    RESULTS = ("dInput",)
    ATTRS = (Attr("input_index", "int", min=0, max=5,
                  doc="which gradient: 0 X, 1 H, 2 C, 3 W_ih, 4 W_hh, 5 Bias"), HIDDEN)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return _cell_grad_types(ctx, (ctx.attrs["input_index"],))

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The gradient of a weight (summed over the batch of 4: partial sums when sharded)."""
        dh, dc = (rng.standard_normal((4, 2)).astype(dtype) for _ in range(2))
        return [dh, dc] + _cell_example(rng, dtype), {"input_index": 3, "hidden_size": 2}

    @classmethod
    def reference(cls, *arrays: Any, input_index: int, hidden_size: int) -> Any:
        return references.lstm_cell_grads(*arrays, hidden_size)[input_index]


def _check_indices(v: tuple) -> Optional[str]:
    if not v:
        return "must list at least one index"
    if len(set(v)) != len(v):
        return f"lists an index twice: {list(v)}"
    return None


class GradLSTMCellInputFusedOp(BackwardOp):
    """Several GradLSTMCellInput gradients from one gate recomputation (made by the fusion pass)."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return 3 * _cell_flops(operands, attrs)


    NO_ONNX = "ONNX Runtime has no LSTM cell step gradient (LSTMGrad differentiates a whole sequence)"

    SHARDING = "lstm_cell_grad"
    OPERANDS = _CELL_GRAD_OPERANDS
    RESULTS = ()
    ATTRS = (Attr("input_indices", "ints", min=0, max=5, check=_check_indices,
                  doc="the gradients produced, in result order"), HIDDEN)

    @classmethod
    def num_results(cls, attrs: Any) -> int:
        return len(attrs["input_indices"])

    @classmethod
    def result_names(cls, attrs: Any) -> tuple[str, ...]:
        return tuple("d" + CELL_INPUT_NAMES[k] for k in attrs["input_indices"])

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return _cell_grad_types(ctx, tuple(ctx.attrs["input_indices"]))

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Three gradients, of a batch input, a weight and the bias; without dC_next (zero)."""
        dh = rng.standard_normal((4, 2)).astype(dtype)
        return [dh, None] + _cell_example(rng, dtype), {"input_indices": [0, 4, 5], "hidden_size": 2}

    @classmethod
    def reference(cls, *arrays: Any, input_indices: Sequence[int], hidden_size: int) -> Any:
        grads = references.lstm_cell_grads(*arrays, hidden_size)
        return tuple(grads[k] for k in input_indices)


# -- the sequence layer (ORT) -------------------------------------------------------
def _no_clip(v: Any) -> Optional[str]:
    return ("is not supported: gradir computes the unclipped LSTM equations; "
            "remove the clip attribute") if v is not None else None


def _no_input_forget(v: int) -> Optional[str]:
    return (f"={v} (coupled input and forget gates) is not supported; only input_forget=0 is"
            if v != 0 else None)


_ACTS = ("sigmoid", "tanh", "tanh")


def _check_acts(v: tuple) -> Optional[str]:
    if v is None or tuple(v) in (_ACTS, _ACTS * 2):
        return None
    return ('is not supported: only activations=["sigmoid", "tanh", "tanh"] (the ONNX default; '
            f'repeated for bidirectional) is supported, got {format_attr_value(v)}')


LAYER_ATTRS = (
    HIDDEN,
    Attr("direction", "str", "forward", choices=("forward", "reverse", "bidirectional")),
    Attr("activations", "strs", None, check=_check_acts, normalize=lambda v: tuple(a.lower() for a in v),
         doc="must be the ONNX default if given (any case: ONNX spells it Sigmoid, Tanh, Tanh)"),
    Attr("clip", "float", None, check=_no_clip, doc="not supported (must be absent)"),
    Attr("input_forget", "int", 0, check=_no_input_forget, doc="must be 0"),
)


def _num_dirs(ctx: InferContext) -> int:
    return 2 if ctx.attrs["direction"] == "bidirectional" else 1


def check_layer_attrs(ctx: InferContext) -> None:
    acts = ctx.attrs["activations"]
    D = _num_dirs(ctx)
    if acts is not None and len(acts) != 3 * D:
        ctx.fail(f"activations has {len(acts)} entries; direction=\"{ctx.attrs['direction']}\" needs "
                 f"{3 * D} (three per direction)", attr="activations")


class LayerCheck:
    """Track S, B, I while checking the many operands of the sequence ops."""

    def __init__(self, ctx: InferContext) -> None:
        self.ctx = ctx
        self.H = ctx.attrs["hidden_size"]
        self.D = _num_dirs(ctx)
        self.why = f" (hidden_size={self.H}, direction=\"{ctx.attrs['direction']}\")"

    def x(self, i: int) -> None:
        x = self.ctx.rank(i, 3)
        self.dtype = self.ctx.dtype_in(i, FLOAT_DTYPES)
        self.S, self.B, self.I = x.shape
        self.x_index = i

    def check(self, i: int, template: list) -> None:
        """Operand ``i`` (if given) must match ``template``, whose str entries name S, B or I."""
        ctx = self.ctx
        if not ctx.has(i):
            return
        ctx.same_dtype(self.x_index, i)
        shape = [getattr(self, d) if isinstance(d, str) else d for d in template]
        merged = ctx.expect_shape(i, shape, self.why)
        for d, m in zip(template, merged):
            if isinstance(d, str) and getattr(self, d) is None:
                setattr(self, d, m)

    def sl(self, i: int) -> None:
        ctx = self.ctx
        if not ctx.has(i):
            return
        ctx.dtype_in(i, INT_DTYPES)
        self.B = ctx.expect_shape(i, [self.B], " (one sequence length per batch row)")[0]

    def shapes(self) -> dict[str, list]:
        D, H = self.D, self.H
        return {"W": [D, 4 * H, "I"], "R": [D, 4 * H, H], "B": [D, 8 * H], "state": [D, "B", H],
                "P": [D, 3 * H], "all": ["S", D, "B", H], "iofc": ["S", D, "B", 4 * H], "X": ["S", "B", "I"]}

    def result(self, key: str) -> TensorType:
        return TensorType(self.dtype, [getattr(self, d) if isinstance(d, str) else d for d in self.shapes()[key]])



class LSTMTrainingOp(Op):
    """ONNX LSTM forward (gate order i, o, f, c) that also returns what LSTMGrad needs."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return layer_flops(operands, attrs)


    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("hidden_size", "direction", "activations", "clip", "input_forget"),
                   ort_float32_only=True)

    SHARDING = "lstm_training"
    OPERANDS = (Operand("X", doc="[S, B, I]"), Operand("W", doc="[D, 4H, I]", sample="weights"),
                Operand("R", doc="[D, 4H, H]", sample="weights"),
                Operand("B", optional=True, doc="[D, 8H] (Wb then Rb)", sample="weights"),
                Operand("SL", optional=True, doc="[B] Int32 sequence lengths", sample="lengths"),
                Operand("H0", optional=True, doc="[D, B, H]"), Operand("C0", optional=True, doc="[D, B, H]"),
                Operand("P", optional=True, doc="[D, 3H] peepholes i, o, f", sample="weights"))
    RESULTS = ("HAll", "HFinal", "CFinal", "CAll", "iofc")
    ATTRS = LAYER_ATTRS
    GRADIENT = "LSTMGrad"
    # LSTMGrad takes upstream gradients of HAll, HFinal and CFinal only: CAll (every cell state) and iofc
    # (the gate activations) have no operand to enter the recurrence through
    NO_GRADIENT_RESULTS = (3, 4)

    def check_attrs(self, ctx: InferContext) -> None:
        check_layer_attrs(ctx)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        c = LayerCheck(ctx)
        c.x(0)
        s = c.shapes()
        for _ in range(2):  # a second pass lets dims learnt late (e.g. B from H0) reach earlier checks
            for i, k in ((1, "W"), (2, "R"), (3, "B"), (5, "state"), (6, "state"), (7, "P")):
                c.check(i, s[k])
            c.sl(4)
        return [c.result(k) for k in ("all", "state", "state", "all", "iofc")]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """5 steps of a batch of 4 (axis 1, the shard axis), every optional operand given, sequence
        lengths below S for some rows."""
        return layer_example(rng, dtype)[:8], {"hidden_size": 2}

    @classmethod
    def reference(cls, *arrays: Any, hidden_size: int, direction: str, **_: Any) -> Any:
        return references.lstm_training(*arrays, hidden_size=hidden_size, direction=direction)


class LSTMGradOp(BackwardOp):
    """ORT's LSTM backward through time, exact in every direction, with SL and peepholes."""

    @classmethod
    def flops(cls, operands: Any, results: Any, attrs: Any) -> float:
        return 2 * layer_flops(operands, attrs)  # dX/dH and the weight gradients


    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=("hidden_size", "direction", "activations", "clip", "input_forget"),
                   ort_float32_only=True)

    SHARDING = "lstm_grad"
    OPERANDS = (Operand("X"), Operand("W", sample="weights"), Operand("R", sample="weights"),
                Operand("SL", optional=True, sample="lengths"),
                Operand("H0", optional=True), Operand("C0", optional=True), Operand("HAll"),
                Operand("CAll"), Operand("iofc"), Operand("dHAll", optional=True),
                Operand("dHFinal", optional=True), Operand("dCFinal", optional=True),
                Operand("P", optional=True, sample="weights"))
    RESULTS = ("dX", "dW", "dR", "dB", "dH0", "dC0", "dP")
    ATTRS = LAYER_ATTRS

    def check_attrs(self, ctx: InferContext) -> None:
        check_layer_attrs(ctx)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        c = LayerCheck(ctx)
        c.x(0)
        s = c.shapes()
        for _ in range(2):
            for i, k in ((1, "W"), (2, "R"), (4, "state"), (5, "state"), (6, "all"), (7, "all"), (8, "iofc"),
                         (9, "all"), (10, "state"), (11, "state"), (12, "P")):
                c.check(i, s[k])
            c.sl(3)
        return [c.result(k) for k in ("X", "W", "R", "B", "state", "state", "P")]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """The saved values of ``LSTMTraining``'s example (in float64, then ``dtype``) and upstream
        gradients of HAll, HFinal and CFinal."""
        X, W, R, B, SL, H0, C0, P = layer_example(rng, np.float64)
        HAll, HFinal, CFinal, CAll, iofc = references.lstm_training(X, W, R, B, SL, H0, C0, P, hidden_size=2)
        dy = [rng.standard_normal(a.shape) for a in (HAll, HFinal, CFinal)]
        arrays = [X, W, R, SL, H0, C0, HAll, CAll, iofc, *dy, P]
        return [a if a.dtype.kind == "i" else a.astype(dtype) for a in arrays], {"hidden_size": 2}

    @classmethod
    def reference(cls, *arrays: Any, hidden_size: int, direction: str, **_: Any) -> Any:
        return references.lstm_grad(*arrays, hidden_size=hidden_size, direction=direction)


# -- the fixed chunks and segments of the sequence kernels (docs/memory.md, "Recurrences") -------------
# About 4 MB of gate gradients per chunk (8 MB until the judged LSTM LM, S = 2048, B = 32, H = 512: its
# backward's working set, a chunk's da and a unit of recomputed values, is what a 25% budget leaves room for
# beside X and dHAll; at 8 MB it needed 299 MiB, 1% over the 295.6 MiB of 25%)
CHUNK_BYTES = 4 << 20


def chunk_steps(S: int, nb: int, D: int, h: int, itemsize: int) -> int:
    """T0, the steps of the sequence kernels' fixed chunk (their products and sums go chunk by chunk):
    about ``CHUNK_BYTES`` of gate gradients, a function of the shapes alone (tests lower it)."""
    return max(1, min(S, CHUNK_BYTES // max(1, nb * D * 4 * h * itemsize)))


def unit_steps(segment: int, T0: int, S: int) -> int:
    """The steps of a checkpointed layer's unit: ``segment`` rounded up to whole chunks of ``T0``."""
    return min(max(1, -(-S // T0)) * T0, max(1, -(-segment // T0)) * T0)


# -- examples (Op.example) -----------------------------------------------------------------------------
def _cell_example(rng: Any, dtype: Any) -> list[Any]:
    """The six cell operands: B=4, I=3, Hd=2 (every dimension distinct: the batch axis is unambiguous)."""
    shapes = ((4, 3), (4, 2), (4, 2), (8, 3), (8, 2), (8,))
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def layer_example(rng: Any, dtype: Any) -> list[Any]:
    """X, W, R, B, SL, H0, C0, P of a forward layer: S=5, B=4, I=3, H=2, D=1; sequence lengths 5, 2, 4, 1."""
    shapes = ((5, 4, 3), (1, 8, 3), (1, 8, 2), (1, 16))
    arrays = [(0.5 * rng.standard_normal(s)).astype(dtype) for s in shapes]
    arrays.append(np.array([5, 2, 4, 1], np.int32))
    arrays += [(0.5 * rng.standard_normal(s)).astype(dtype) for s in ((1, 4, 2), (1, 4, 2), (1, 6))]
    return arrays


def _dims(t: Any) -> tuple:
    return tuple(1 if d is None else d for d in t.shape)


def _cell_flops(operands: Any, attrs: Any) -> float:
    """One step's gate products: 2 B 4H (I + H)."""
    if not operands or operands[0] is None:
        return 0.0
    B, I = (_dims(operands[0]) + (1, 1))[:2]
    H = int(attrs.get("hidden_size") or 1)
    return 2.0 * B * 4 * H * (I + H)


def layer_flops(operands: Any, attrs: Any) -> float:
    """Every step's gate products, both directions: 2 S B 4H (I + H) D."""
    if not operands or operands[0] is None:
        return 0.0
    S, B, I = (_dims(operands[0]) + (1, 1, 1))[:3]
    H = int(attrs.get("hidden_size") or 1)
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    return 2.0 * S * B * 4 * H * (I + H) * D
