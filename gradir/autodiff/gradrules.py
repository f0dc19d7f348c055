"""The gradient rules of reverse-mode autodiff (``autodiff.py`` is the driver).

``gradient_rule(cls)`` is an op's rule: the hand-written one in ``RULES`` (forward op class -> rule),
else one derived from the op's class data: its ``VJP`` (the generated backward ops of
``gradir/ops/vjp.py``) or its ``GRADIENT`` (the ORT gradient op, fed dY and the forward values it
reads).  A rule is a function ``rule(e, op, cts, need) -> cotangents per operand``.  ``e`` is the
``Emitter``, which appends IR ops with fresh names and returns the names; ``cts`` holds one
cotangent name per result (``None`` is a symbolic zero); ``need[i]`` says whether operand ``i``
wants a cotangent (rules may skip work for the others and return ``None`` for them).  Rules emit IR
ops, never arrays.  Broadcasting is undone by the driver, not by the rules.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn, Optional, Sequence, Union

from ..errors import AutodiffError, Diagnostic, Source
from ..ir.op import OPS, REGISTRIES, Op
from ..ops.composite import CompositeOp, expand_composites
from ..ops.matmul_layout import fused_matmul_vjp, promoted_cotangent
from ..ir.types import TensorType, format_shape

__all__ = ["Rule", "RULES", "NO_RULE_REASON", "rule", "gradient_rule", "Emitter"]


Rule = Callable[["Emitter", Op, list, list], Sequence[Optional[str]]]
RULES: dict[type[Op], Rule] = {}  # keyed by op class: ``@rule(MatMulOp)`` (or its registered name)
REGISTRIES.append(RULES)  # a user's op file that fails to load leaves none of its rules behind

# Gradient ops (``is_backward``) deliberately have no rule: gradir derives
# first-order gradients only.  A test checks that every other op has one.
NO_RULE_REASON = "it is a gradient op (gradir derives first-order gradients only)"


def rule(*ops: Union[type[Op], str]) -> Callable[[Rule], Rule]:
    """Decorator: ``fn`` is the hand-written gradient rule of each op given (a class, or the name of a
    registered one)."""
    classes = [OPS[o] if isinstance(o, str) else o for o in ops]

    def register(fn: Rule) -> Rule:
        for cls in classes:
            RULES[cls] = fn
        return fn
    return register


# ---------------------------------------------------------------------------
# The emitter
# ---------------------------------------------------------------------------
class Emitter:
    """Appends ops with fresh result names, inferring their types as it goes."""

    def __init__(self, types: dict[str, TensorType], first_free: int, source: Optional[Source] = None) -> None:
        self.types = types  # every value known so far (forward and backward)
        self.source = source  # the forward graph's text, to locate errors
        self.ops: list[Op] = []
        self._next = first_free
        self.current: Optional[Op] = None  # the forward op whose rule is running (for messages)
        # ``driver.derive``, set by the driver: a composite op's rule differentiates its decomposition with it
        self.derive: Optional[Callable[..., Any]] = None

    def fresh(self) -> str:
        name = f"t{self._next}"
        self._next += 1
        return name

    def type(self, value: str) -> TensorType:
        return self.types[value]

    def shape(self, value: str) -> tuple:
        return self.types[value].shape

    def rank(self, value: str) -> int:
        return self.types[value].rank

    def static_shape(self, op: Op, value: str) -> list[int]:
        """The shape of ``value``, which ORT's gradient ops (GatherGrad, SliceGrad, the pooling gradients...)
        take as a constant: a ``?`` there is an error at ``op``."""
        shape = self.shape(value)
        if None in shape:
            self.fail(op, f"cannot differentiate {op.op_name}: its operand {value} has shape {format_shape(shape)}, "
                          f"and its gradient needs the shape (give the '?' dimensions sizes)")
        return list(shape)

    def op(self, name: str, *operands: Optional[str], **attrs) -> Union[str, tuple[str, ...]]:
        """Emit ``name(operands, attrs)``; returns the result name (a tuple if several)."""
        cls = OPS[name]
        n = cls.num_results(cls(["t0"], list(operands), attrs).resolved_attrs())
        results = [self.fresh() for _ in range(n)]
        op = cls(results, list(operands), attrs)
        try:
            types = op.check([None if v is None else self.types[v] for v in op.operands])
        except Exception as e:  # a bug in a rule, not a user error
            where = f" (differentiating {self.current.to_string()})" if self.current is not None else ""
            raise AssertionError(f"gradir bug: a gradient rule emitted an invalid op {op.to_string()}{where}: "
                                 f"{e}") from e
        op.result_types = list(types)
        for r, t in zip(results, types):
            self.types[r] = t
        self.ops.append(op)
        return results[0] if n == 1 else tuple(results)

    def __getattr__(self, name: str) -> Callable[..., Union[str, tuple[str, ...]]]:
        """``e.MatMul(a, b)`` is ``e.op("MatMul", a, b)``."""
        if name in OPS:
            return lambda *operands, **attrs: self.op(name, *operands, **attrs)
        raise AttributeError(name)

    def fail(self, op: Op, message: str, result: Optional[int] = None) -> NoReturn:
        """Raise ``AutodiffError`` located at the forward op, or at its result ``result``
        (when the graph came from text)."""
        span = None
        if op.loc is not None:
            span = op.loc.results[result] if result is not None and result < len(op.loc.results) else op.loc.name
        raise AutodiffError(Diagnostic(message, span, self.source if span is not None else None,
                                       filename=self.source.filename if self.source else None))

    # -- helpers shared by rules -------------------------------------------
    def swap_last_two(self, value: str) -> str:
        r = self.rank(value)
        return self.transpose(value, list(range(r - 2)) + [r - 1, r - 2])

    def transpose(self, value: str, perm: list[int]) -> str:
        """``Transpose``, printing ``perm`` only when it is not the default (reversed axes)."""
        if perm == list(reversed(range(len(perm)))):
            return self.op("Transpose", value)
        return self.op("Transpose", value, perm=perm)


# ---------------------------------------------------------------------------
# Rules.  Each returns one cotangent (or None) per operand of the forward op.
# ---------------------------------------------------------------------------
def _x(op: Op, i: int = 0) -> str:
    return op.operands[i]  # type: ignore[return-value]


def gradient_rule(cls: type[Op]) -> Optional[Rule]:
    """The rule that differentiates ``cls``: its hand-written one (``RULES``), else one derived from its
    ``VJP`` or its ``GRADIENT``; ``None`` when it has none (a gradient op, or an op nothing says how to
    differentiate)."""
    fn = RULES.get(cls)
    if fn is not None:
        return fn
    if issubclass(cls, CompositeOp):
        return _composite_rule
    if cls.VJP is not None and cls.VJP_OPS:
        return _from_vjp
    if cls.GRADIENT is not None and cls.GRADIENT in OPS and _gradient_targets(cls, OPS[cls.GRADIENT]) is not None:
        return _from_gradient_op
    return None


def _gradient_targets(cls: type[Op], grad: type[Op]) -> Optional[list[int]]:
    """Which operand of ``cls`` each result of its gradient op ``grad`` is the cotangent of: one result is
    the first operand's (``ReluGrad``'s ``dX``); several are named ``d<operand>`` (``dX, dScale, dB``).
    ``None`` when the names do not say."""
    if len(grad.RESULTS) == 1:
        return [0]
    names = [o.name for o in cls.OPERANDS]
    targets = [names.index(r[1:]) if r.startswith("d") and r[1:] in names else None for r in grad.RESULTS]
    return None if None in targets else targets  # type: ignore[return-value]


def _from_gradient_op(e: Emitter, op: Op, cts: list, need: list) -> list:
    """``GRADIENT(dY, reads..., attrs)``: ``reads`` are the forward operands or results named by
    ``GRADIENT_OPERANDS`` (by default, those the gradient op's own operands are named after: ``ReluGrad(dY,
    X)`` reads the input X, ``SigmoidGrad(dY, Y)`` the result Y), ``attrs`` the op's attributes that the
    gradient op declares (``alpha``, ``axis``).  Its results are the cotangents of the operands they name
    (``_gradient_targets``); the first result's upstream gradient is ``dY``."""
    cls, grad = type(op), OPS[op.GRADIENT]  # type: ignore[index]
    values = dict(zip(cls.RESULTS, op.results))
    values.update((o.name, v) for o, v in zip(cls.OPERANDS, op.operands))
    names = cls.GRADIENT_OPERANDS or tuple(o.name for o in grad.OPERANDS[1:])
    targets = _gradient_targets(cls, grad) or [0]
    for k in range(len(op.operands)):
        if need[k] and k not in targets:
            e.fail(op, f"cannot differentiate {op.op_name} with respect to its operand {cls.operand_spec(k).name} "
                       f"({op.operands[k]}): its gradient {grad.op_name} gives no cotangent for it")
    attrs = {a.name: op.attrs[a.name] for a in grad.ATTRS if a.name in op.attrs}
    res = e.op(grad.op_name, cts[0], *(values[n] for n in names), **attrs)
    res = (res,) if isinstance(res, str) else res
    out: list[Optional[str]] = [None] * len(op.operands)
    for k, r in zip(targets, res):
        if k < len(out):
            out[k] = r
    return out


def _composite_rule(e: Emitter, op: Op, cts: list, need: list) -> list:
    """The gradient of a composite op: its decomposition (primitives only) differentiated, inlined."""
    assert isinstance(op, CompositeOp) and e.derive is not None
    g = expand_composites(type(op).decomposition([None if v is None else e.types[v] for v in op.operands],
                                                 op.attrs))
    index = [i for i, v in enumerate(op.operands) if v is not None]  # decomposition input k -> operand index
    wrt = [g.inputs[k].name for k, i in enumerate(index) if need[i]]
    try:
        d = e.derive(g, wrt)
    except AutodiffError as err:
        e.fail(op, f"cannot differentiate {op.op_name} through its decomposition: {'; '.join(err.messages)}")
    rename: dict[str, str] = {g.inputs[k].name: op.operands[i] for k, i in enumerate(index)}  # type: ignore[misc]
    for (cot, _), ct, r in zip(d.cotangents, cts, op.results):
        rename[cot] = ct if ct is not None else e.ZerosLike(r)
    for sub in d.graph.ops:
        for r in sub.results:
            rename[r] = e.fresh()
            e.types[rename[r]] = d.graph.types[r]
        e.ops.append(sub.copy(results=[rename[r] for r in sub.results],
                              operands=[None if v is None else rename[v] for v in sub.operands],
                              result_types=[d.graph.types[r] for r in sub.results], loc=None))
    grads = {w: rename[o] for w, o in zip(d.wrt, d.graph.outputs)}
    out: list[Optional[str]] = [None] * len(op.operands)
    for k, i in enumerate(index):
        if need[i]:
            out[i] = grads[g.inputs[k].name]
    return out


def _from_vjp(e: Emitter, op: Op, cts: list, need: list) -> list:
    """One generated backward op (``cls.VJP_OPS``) per operand that needs a cotangent, fed dY, the
    forward operands and (when its formula reads it) the forward result Y."""
    cls = type(op)
    out: list[Optional[str]] = []
    for i, v in enumerate(op.operands):
        name = cls.operand_spec(i).name
        if not need[i]:
            out.append(None)
            continue
        grad = cls.VJP_OPS.get(name)
        if grad is None:
            e.fail(op, f"cannot differentiate {op.op_name} with respect to its operand {name} ({v}): its VJP has "
                       f"no entry for {name}")
        reads = [cts[0], *op.operands] + [op.results[0]] * (len(grad.OPERANDS) - 1 - len(op.operands))
        out.append(e.op(grad.op_name, *reads, **op.attrs))  # type: ignore[arg-type]
    return out


@rule("Identity")
def _identity(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [cts[0]]


@rule("Neg")
def _neg(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [e.Neg(cts[0])]


@rule("Exp")
def _exp(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [e.Mul(cts[0], op.results[0])]


@rule("Log")
def _log(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [e.Div(cts[0], _x(op))]


@rule("Sqrt")
def _sqrt(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [e.Div(e.Scale(cts[0], factor=0.5), op.results[0])]  # dY / (2 sqrt(x))


@rule("Scale")
def _scale(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [e.Scale(cts[0], factor=op.attrs["factor"])]


@rule("ZerosLike")
def _zeros_like(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [None]


@rule("Constant")
def _constant(e: Emitter, op: Op, cts: list, need: list) -> list:
    return []  # no operands: nothing to differentiate (activity analysis never reaches it)


@rule("Add")
def _add(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [cts[0], cts[0]]


@rule("Sub")
def _sub(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [cts[0], e.Neg(cts[0]) if need[1] else None]


@rule("Mul")
def _mul(e: Emitter, op: Op, cts: list, need: list) -> list:
    a, b = op.operands
    return [e.Mul(cts[0], b) if need[0] else None, e.Mul(cts[0], a) if need[1] else None]


@rule("Div")
def _div(e: Emitter, op: Op, cts: list, need: list) -> list:
    # C = A / B:  dA = dC / B,  dB = -dC * A / B^2 = -(dC / B) * C
    da = e.Div(cts[0], op.operands[1])
    return [da, e.Neg(e.Mul(da, op.results[0])) if need[1] else None]


@rule("Sum")
def _sum(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [cts[0]] * len(op.operands)


@rule("MatMul")
def _matmul(e: Emitter, op: Op, cts: list, need: list) -> list:
    """NumPy matmul, 1-D operands promoted: a vector A is [1, k], a vector B is [k, 1].

    dA = dC @ B^T, dB = A^T @ dC on the promoted shapes; the promoted axis is then
    summed away (it has size 1) and batch broadcasting is undone by the driver.
    """
    a, b = op.operands
    dc = cts[0]
    va, vb = e.rank(a) == 1, e.rank(b) == 1
    dc = promoted_cotangent(e, dc, va, vb)
    da = db = None
    if need[0]:
        b2 = e.Unsqueeze(b, axes=[-1]) if vb else b
        da = e.MatMul(dc, e.swap_last_two(b2))
        if va:
            da = e.ReduceSum(da, axes=[-2])
    if need[1]:
        a2 = e.Unsqueeze(a, axes=[0]) if va else a
        db = e.MatMul(e.swap_last_two(a2), dc)
        if vb:
            db = e.ReduceSum(db, axes=[-1])
    return [da, db]


rule("FusedMatMul")(fused_matmul_vjp)  # in matmul_layout.py, beside the layouts it inverts


@rule("Transpose")
def _transpose(e: Emitter, op: Op, cts: list, need: list) -> list:
    r = e.rank(_x(op))
    perm = op.attrs["perm"]
    perm = list(reversed(range(r))) if perm is None else list(perm)
    inv = [0] * r
    for k, p in enumerate(perm):
        inv[p] = k
    return [e.transpose(cts[0], inv)]


@rule("Reshape")
def _reshape(e: Emitter, op: Op, cts: list, need: list) -> list:
    shape = e.shape(_x(op))
    if sum(d is None for d in shape) > 1:
        e.fail(op, f"cannot differentiate {op.op_name}: its operand {_x(op)} has shape {format_shape(shape)} "
                   "with more than one unknown dimension, so the gradient cannot be reshaped back")
    return [e.Reshape(cts[0], shape=[-1 if d is None else d for d in shape])]


def _reduced_axes(op: Op, rank: int) -> list[int]:
    axes = op.attrs["axes"]
    return list(range(rank)) if axes is None else sorted(a % rank for a in axes)


def _unreduce(e: Emitter, op: Op, dy: str) -> str:
    """Broadcast the cotangent of a reduction back to the operand's shape."""
    x = _x(op)
    axes = _reduced_axes(op, e.rank(x))
    if axes and not op.attrs["keepdims"]:
        dy = e.Unsqueeze(dy, axes=axes)
    if e.shape(dy) == e.shape(x) and e.type(x).is_static:
        return dy
    return e.BroadcastTo(dy, x)


@rule("ReduceSum")
def _reduce_sum(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [_unreduce(e, op, cts[0])]


@rule("ReduceMean")
def _reduce_mean(e: Emitter, op: Op, cts: list, need: list) -> list:
    x = _x(op)
    n = 1
    for k in _reduced_axes(op, e.rank(x)):
        d = e.shape(x)[k]
        if d is None:
            e.fail(op, f"cannot differentiate {op.op_name}: axis {k} of {x} ({e.type(x)}) has unknown size, "
                       "so the 1/n of the mean is unknown")
        n *= d
    dx = _unreduce(e, op, cts[0])
    return [dx if n == 1 else e.Scale(dx, factor=1.0 / n)]


@rule("Unsqueeze")
def _unsqueeze(e: Emitter, op: Op, cts: list, need: list) -> list:
    r = e.rank(op.results[0])
    return [e.ReduceSum(cts[0], axes=sorted(a % r for a in op.attrs["axes"]))]


@rule("BroadcastTo")
def _broadcast_to(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [cts[0], None]  # the driver sums the cotangent back to X's shape; Like is shape only


@rule("ReduceSumTo")
def _reduce_sum_to(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [e.BroadcastTo(cts[0], _x(op)), None]


@rule("LSTMCell")
def _lstm_cell(e: Emitter, op: Op, cts: list, need: list) -> list:
    """One ``GradLSTMCellInput`` per operand that needs a gradient (and no other)."""
    dh, dc = cts
    if dh is None:  # GradLSTMCellInput requires dH'; dC' may be omitted
        dh = e.ZerosLike(op.operands[1])
    hs = op.attrs["hidden_size"]
    return [e.GradLSTMCellInput(dh, dc, *op.operands, input_index=k, hidden_size=hs) if need[k] else None
            for k in range(6)]


@rule("LSTMTraining")
def _lstm_training(e: Emitter, op: Op, cts: list, need: list) -> list:
    """Exactly one ``LSTMGrad``, fed with the recomputed HAll, CAll and iofc.

    LSTMGrad takes upstream gradients of HAll, HFinal and CFinal only: the
    gradient of CAll (every cell state) and of iofc (the gate activations) has no
    operand to enter the recurrence through, so a path from either to an output
    is an error rather than a silently wrong gradient (``NO_GRADIENT_RESULTS``:
    the driver reports it).
    """
    x, w, r, b, sl, h0, c0, p = (list(op.operands) + [None] * 8)[:8]
    hall, _, _, call, iofc = op.results
    attrs = {a.name: op.attrs[a.name] for a in op.ATTRS}
    dx, dw, dr, db, dh0, dc0, dp = e.LSTMGrad(x, w, r, sl, h0, c0, hall, call, iofc, cts[0], cts[1], cts[2], p,
                                              **attrs)
    return [dx, dw, dr, db if b is not None else None, None, dh0 if h0 is not None else None,
            dc0 if c0 is not None else None, dp if p is not None else None]


@rule("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy_loss(e: Emitter, op: Op, cts: list, need: list) -> list:
    """Scores get ORT's ``SoftmaxCrossEntropyLossGrad`` of the loss's cotangent, plus
    ``LogSoftmaxGrad_13`` (axis 1) of log_prob's when log_prob reaches an output; labels and weights
    are not differentiable (ONNX; ``NO_GRADIENT_OPERANDS``: the driver reports a gradient asked through
    the weights)."""
    labels = op.operands[1]
    weights = op.operands[2] if len(op.operands) > 2 else None
    loss, log_prob = op.results
    parts = []
    if cts[0] is not None:
        attrs = {"reduction": op.attrs["reduction"]}
        if op.attrs["ignore_index"] is not None:
            attrs["ignore_index"] = op.attrs["ignore_index"]
        parts.append(e.SoftmaxCrossEntropyLossGrad(cts[0], log_prob, labels, weights, **attrs))
    if cts[1] is not None:
        parts.append(e.LogSoftmaxGrad_13(cts[1], log_prob, axis=1))
    ds = parts[0] if len(parts) == 1 else e.Sum(*parts)
    return [ds if need[0] else None, None, None][:max(2, len(op.operands))]


@rule("Dropout")
def _dropout(e: Emitter, op: Op, cts: list, need: list) -> list:
    """ORT's ``DropoutGrad`` of the mask result; a Dropout that dropped nothing (``training_mode`` false or
    ``ratio`` 0: the identity) gets ``ratio=0``, a copy (ORT's kernel does not read ``training_mode``)."""
    ratio = op.attrs["ratio"] if op.attrs["training_mode"] else 0.0
    dx = e.DropoutGrad(cts[0], op.results[1], ratio=ratio, training_mode=op.attrs["training_mode"])
    return [dx if need[0] else None] + [None] * (len(op.operands) - 1)


@rule("BatchNormalization", "BatchNormInternal")
def _batch_norm(e: Emitter, op: Op, cts: list, need: list) -> list:
    """Training mode as ORT: ``BatchNormalizationGrad`` of the saved statistics (a BatchNormalization's are
    recomputed by a ``BatchNormInternal`` of its operands, as ORT's BatchNormReplacement does); input_mean and
    input_var only reach the running statistics, which take no gradient.  Inference mode, Y = (X - mean) * s
    + B with s = scale * inv, inv = 1 / sqrt(var + epsilon) per channel: dX = BatchNormalization(dY) with B and
    mean 0; dB = Σ dY; dscale = Σ dY * x̂; dmean = -Σ dX; dvar = -scale * inv^2 * dscale / 2 (inv and x̂ from
    BatchNormalization of a scale of ones: exp(0), so epsilon is added as the forward adds it)."""
    dy, (x, scale, b, mean, var), eps = cts[0], op.operands, op.attrs["epsilon"]
    if dy is None:
        return [None] * 5
    if op.op_name == "BatchNormInternal" or op.attrs["training_mode"]:
        saved = op.results[3:] if op.op_name == "BatchNormInternal" else \
            e.BatchNormInternal(*op.operands, epsilon=eps, momentum=op.attrs["momentum"])[3:]
        dx, ds, db = e.BatchNormalizationGrad(dy, x, scale, *saved, epsilon=eps)
        return [dx, ds, db, None, None]
    axes = [0] + list(range(2, e.rank(x)))
    zeros = e.ZerosLike(b)
    ones = e.Exp(zeros)
    dx = e.BatchNormalization(dy, scale, zeros, zeros, var, epsilon=eps)[0]
    ds = db = dmean = dvar = None
    if need[2]:
        db = e.ReduceSum(dy, axes=axes)
    if need[1] or need[4]:
        xhat = e.BatchNormalization(x, ones, zeros, mean, var, epsilon=eps)[0]
        ds = e.ReduceSum(e.Mul(dy, xhat), axes=axes)
    if need[3]:
        dmean = e.Neg(e.ReduceSum(dx, axes=axes))
    if need[4]:
        inv = e.ReduceSum(e.BatchNormalization(e.Unsqueeze(ones, axes=[0]), ones, zeros, zeros, var, epsilon=eps)[0],
                          axes=[0])
        dvar = e.Scale(e.Mul(e.Mul(ds, scale), e.Mul(inv, inv)), factor=-0.5)
    return [dx if need[0] else None, ds if need[1] else None, db, dmean, dvar]
