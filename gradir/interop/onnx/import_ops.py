"""How each ONNX node becomes gradir ops: ``handlers()[(domain, op_type)](ctx, node, attrs)`` returns one
gradir value (or ``None``) per node output, or raises ``Unsupported`` saying which attribute or input
makes the node one gradir cannot express exactly.  docs/onnx.md lists the mapping.

Most handlers are derived from the ops themselves: a node of an op's ``ONNX`` data (``Op.ONNX``) becomes
that op (``mapped``), and a node of the ``ai.gradir`` domain is the registered op of its name, user ops
included (``custom``).  ``HANDLERS`` holds the hand-written ones, by ONNX domain and op type, for what is
not data (ONNX ops gradir writes as other ops, ORT's fused patterns, opset differences); they override
the derived ones.

``ctx`` is the importer (``importer.Importer``): ``ctx.x(node, i)`` is input ``i`` as a gradir value
(``None`` if omitted), ``ctx.const(node, i)`` its value when it is known at import time (an
initializer, a ``Constant``, or a shape computation over static shapes), ``ctx.b`` the
``GraphBuilder``, ``ctx.opset`` the model's ``ai.onnx`` opset.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ...errors import OnnxUnsupported as Unsupported
from ...ir.op import OPS, Op
from ...ir.onnxmap import OnnxMap, onnx_map
from .common import GRADIR_DOMAIN, MS_DOMAIN

__all__ = ["HANDLERS", "Unsupported", "handler", "handlers", "mapped", "custom", "broadcast_shape", "check_limits"]

Handler = Callable[[Any, Any, dict], list]
HANDLERS: dict[tuple[str, str], Handler] = {}


def handler(*names: str, domain: str = "") -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[(domain, n)] = fn
        return fn
    return register


def handlers() -> dict[tuple[str, str], Handler]:
    """Every handler, by (domain, op type): those derived from the registered ops (taken when an import
    starts, so an op defined after gradir is imported is included), overridden by the hand-written ones.
    When two ops' data name the same ONNX op, the first registered (a built-in) keeps it."""
    out: dict[tuple[str, str], Handler] = {}
    for name, cls in OPS.items():
        out[(GRADIR_DOMAIN, name)] = custom(name)
        m = onnx_map(cls)
        if m is not None and m.domain != GRADIR_DOMAIN:
            out.setdefault((m.domain, m.op_type(cls)), mapped(cls, m))
    out.update(HANDLERS)
    return out


def mapped(cls: type[Op], m: OnnxMap) -> Handler:
    """A node of ``cls``'s ONNX data: the op, its inputs in the op's operand order, the attributes the data
    lists under their gradir names (any other is refused); an input more than the op takes is refused."""
    names = m.onnx_attrs()
    sig = cls.OPERANDS
    variadic = bool(sig) and sig[-1].variadic

    def fn(ctx: Any, node: Any, attrs: dict) -> list:
        attrs = {k: v for k, v in attrs.items() if k not in m.ignored}
        _only(attrs, set(names), node)
        if not variadic and len(node.input) > len(sig) and any(node.input[len(sig):]):
            raise Unsupported(f"it has {len(node.input)} inputs; gradir's {cls.op_name} takes at most {len(sig)}")
        kw = {names[k]: _attr_value(ctx, cls, names[k], v) for k, v in attrs.items()}
        ins = [ctx.x(node, i, optional=cls.operand_spec(m.operands[i] if m.operands else i).optional)
               for i in range(len(node.input))]
        res = ctx.b.apply(cls.op_name, *m.gradir_operands(ins), **kw)
        res = list(res) if isinstance(res, tuple) else [res]
        return res[:len(node.output)]
    return fn


def _attr_value(ctx: Any, cls: type[Op], name: str, v: Any) -> Any:
    """An ONNX attribute value as the gradir attribute ``name`` takes it: strings decoded, a Float64 tensor
    that ``export_onnx`` wrote for a number (or list of them) float32 does not hold read as that number,
    0/1 for a boolean as false/true."""
    spec = cls.attr_spec(name)
    kind = spec.kind if spec is not None else ""
    if isinstance(v, bytes):
        v = v.decode()
    elif isinstance(v, ctx.onnx.TensorProto) and v.data_type == ctx.onnx.TensorProto.DOUBLE and \
            (tuple(v.dims) == () and kind in ("float", "") or len(v.dims) == 1 and kind == "floats"):
        a = ctx.onnx.numpy_helper.to_array(v)
        v = float(a) if a.ndim == 0 else [float(x) for x in a]
    elif isinstance(v, list):
        v = [x.decode() if isinstance(x, bytes) else x for x in v]
    if kind == "bool" and isinstance(v, int) and not isinstance(v, bool) and v in (0, 1):
        v = bool(v)
    return v


def _float_attr(attrs: dict, name: str, default: float) -> float:
    return float(attrs.get(name, default))


def _only(attrs: dict, allowed: set[str], node: Any) -> None:
    extra = sorted(set(attrs) - allowed)
    if extra:
        raise Unsupported(f"attribute{'s' if len(extra) > 1 else ''} {', '.join(extra)} "
                          f"{'are' if len(extra) > 1 else 'is'} not supported")


# -- ai.onnx ----------------------------------------------------------------------------------------------
@handler("Div")
def _div(ctx: Any, node: Any, attrs: dict) -> list:
    a, b = ctx.x(node, 0), ctx.x(node, 1)
    if not a.dtype.is_float:
        raise Unsupported(f"integer Div of values not known at import time ({a.type}) is not supported")
    return [ctx.b.Div(a, b)]


@handler("Sum")
def _sum(ctx: Any, node: Any, attrs: dict) -> list:
    xs = [ctx.x(node, i) for i in range(len(node.input))]
    return [ctx.b.Identity(xs[0]) if len(xs) == 1 else ctx.b.Sum(*xs)]


@handler("Gelu")
def _gelu_onnx(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"approximate"}, node)
    approx = attrs.get("approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    if approx == "none":
        return [ctx.b.Gelu(ctx.x(node, 0))]
    if approx == "tanh":
        return [ctx.b.FastGelu(ctx.x(node, 0))]
    raise Unsupported(f"approximate={approx!r} is not one of 'none', 'tanh'")


@handler("Transpose")
def _transpose(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"perm"}, node)
    x = ctx.x(node, 0)
    perm = [int(p) for p in attrs.get("perm", range(x.rank - 1, -1, -1))]
    return [ctx.b.Transpose(x, perm=perm)]


def _static(x: Any, what: str) -> tuple:
    if any(d is None for d in x.shape):
        raise Unsupported(f"{what} needs a static shape, but it is {x.type} (give the symbolic dimensions "
                          "values with --dim NAME=SIZE)")
    return tuple(x.shape)


@handler("Reshape")
def _reshape(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"allowzero"}, node)
    x = ctx.x(node, 0)
    shape = [int(d) for d in ctx.const(node, 1, "shape", ints=True).reshape(-1)]
    if shape.count(-1) > 1:  # ONNX infers at most one dimension; the checker does not look at the values
        raise Unsupported(f"its shape {shape} has {shape.count(-1)} -1s; ONNX allows at most one (the dimension "
                          "inferred from the others)")
    if 0 in shape and not attrs.get("allowzero", 0):
        src = _static(x, "Reshape with a 0 (copy this dimension) in its shape")
        beyond = [k for k, d in enumerate(shape) if d == 0 and k >= len(src)]
        if beyond:
            raise Unsupported(f"its shape {shape} copies dimension {beyond[0]} (a 0) of a rank-{len(src)} input "
                              f"({x.type})")
        shape = [src[k] if d == 0 else d for k, d in enumerate(shape)]
    if -1 in shape and None not in x.shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        total = int(np.prod(x.shape, dtype=np.int64))
        shape[shape.index(-1)] = total // known if known else 0
    return [ctx.b.Reshape(x, shape=shape)]


def broadcast_shape(a: list, b: list) -> Optional[list]:
    """The NumPy broadcast of shapes ``a`` and ``b`` (``None`` dimensions unknown), or ``None`` if they do
    not broadcast; in Python ints (``np.broadcast_shapes`` refuses shapes of more than 2^63 elements)."""
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + list(a), [1] * (n - len(b)) + list(b)
    out = []
    for x, y in zip(a, b):
        if x == 1 or x == y:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        else:
            return None
    return out


def check_limits(what: str, dtype: str, shape: list) -> None:
    """``Unsupported`` if a value of ``shape`` is beyond what gradir runs (rank over 64, over 2^48
    elements): said at the node, not later by the graph's checks."""
    from ...ir.types import TensorType
    try:
        problem = TensorType(dtype, shape).limit_problem()
    except (ValueError, TypeError) as e:
        raise Unsupported(f"{what} cannot have the shape {shape}: {e}") from None
    if problem:
        raise Unsupported(f"{what} would have {problem}")


@handler("InPlaceAccumulatorV2", domain=MS_DOMAIN)
def _accumulator(ctx: Any, node: Any, attrs: dict) -> list:
    """Only a malformed accumulator gets here (well-formed ones are stripped before the import)."""
    raise Unsupported(f"it has {len(node.input)} input{'s' if len(node.input) != 1 else ''}; an "
                      "InPlaceAccumulatorV2 takes a buffer, a gradient and an optional reset flag")


def _axes(ctx: Any, node: Any, attrs: dict, index: int) -> Optional[list[int]]:
    """Axes given as an attribute (older opsets) or as input ``index`` (newer); ``None`` if absent."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if len(node.input) > index and node.input[index]:
        return [int(a) for a in ctx.const(node, index, "axes", ints=True).reshape(-1)]
    return None


@handler("Unsqueeze")
def _unsqueeze(ctx: Any, node: Any, attrs: dict) -> list:
    axes = _axes(ctx, node, attrs, 1)
    if axes is None:
        raise Unsupported("Unsqueeze without axes")
    return [ctx.b.Unsqueeze(ctx.x(node, 0), axes=axes)]


def _reduce(name: str, axes_input_from: int) -> Handler:
    def fn(ctx: Any, node: Any, attrs: dict) -> list:
        _only(attrs, {"axes", "keepdims", "noop_with_empty_axes"}, node)
        x = ctx.x(node, 0)
        axes = _axes(ctx, node, attrs, 1) if ctx.opset >= axes_input_from or "axes" in attrs else None
        keep = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return [ctx.b.Identity(x)]
            axes = None
        return [ctx.b.apply(name, x, axes=axes, keepdims=keep)]
    return fn


HANDLERS[("", "ReduceSum")] = _reduce("ReduceSum", 13)
HANDLERS[("", "ReduceMean")] = _reduce("ReduceMean", 18)
HANDLERS[(MS_DOMAIN, "ReduceSumTraining")] = _reduce("ReduceSum", 0)


def _softmax(name: str) -> Handler:
    def fn(ctx: Any, node: Any, attrs: dict) -> list:
        _only(attrs, {"axis"}, node)
        x = ctx.x(node, 0)
        if ctx.opset >= 13:
            return [ctx.b.apply(name, x, axis=int(attrs.get("axis", -1)))]
        axis = int(attrs.get("axis", 1)) % max(x.rank, 1)
        if axis == x.rank - 1:
            return [ctx.b.apply(name, x, axis=-1)]
        # before opset 13 the input is flattened to 2-D at `axis`: the same as one softmax over the
        # flattened trailing block
        shape = _static(x, f"{name} over several axes (opset {ctx.opset})")
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        flat = ctx.b.Reshape(x, shape=[rows, -1])
        return [ctx.b.Reshape(ctx.b.apply(name, flat, axis=-1), shape=list(shape))]
    return fn


HANDLERS[("", "Softmax")] = _softmax("Softmax")
HANDLERS[("", "LogSoftmax")] = _softmax("LogSoftmax")


def _scaled(ctx: Any, y: Any, alpha: float) -> Any:
    return y if alpha == 1.0 else ctx.b.Scale(y, factor=alpha)


@handler("Gemm")
def _gemm(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"alpha", "beta", "transA", "transB"}, node)
    a, b = ctx.x(node, 0), ctx.x(node, 1)
    ta, tb, alpha = int(attrs.get("transA", 0)), int(attrs.get("transB", 0)), _float_attr(attrs, "alpha", 1.0)
    if ta or tb or alpha != 1.0:
        y = ctx.b.FusedMatMul(a, b, alpha=alpha, transA=ta, transB=tb)
    else:
        y = ctx.b.MatMul(a, b)
    c = ctx.x(node, 2, optional=True)
    if c is not None:
        beta = _float_attr(attrs, "beta", 1.0)
        if beta != 0.0:
            y = ctx.b.Add(y, _scaled(ctx, c, beta))
    return [y]




@handler("LSTM")
def _lstm(ctx: Any, node: Any, attrs: dict) -> list:
    _only(attrs, {"hidden_size", "direction", "activations", "clip", "input_forget", "layout"}, node)
    if attrs.get("layout", 0) != 0:
        raise Unsupported("layout=1 (batch first) is not supported; gradir's LSTM is sequence first")
    ins = [ctx.x(node, i, optional=i >= 3) for i in range(min(len(node.input), 8))]
    kw: dict[str, Any] = {"hidden_size": int(attrs["hidden_size"])} if "hidden_size" in attrs else {}
    if "direction" in attrs:
        kw["direction"] = attrs["direction"].decode() if isinstance(attrs["direction"], bytes) else attrs["direction"]
    if "activations" in attrs:
        kw["activations"] = [a.decode() if isinstance(a, bytes) else a for a in attrs["activations"]]
    if "clip" in attrs:
        kw["clip"] = float(attrs["clip"])
    if "input_forget" in attrs:
        kw["input_forget"] = int(attrs["input_forget"])
    res = ctx.b.LSTMTraining(*ins, **kw)
    return list(res[:3])


# -- com.microsoft: forward ops -------------------------------------------------------------------------
@handler("FastGelu", domain=MS_DOMAIN)
def _ms_fast_gelu(ctx: Any, node: Any, attrs: dict) -> list:
    x = ctx.x(node, 0)
    bias = ctx.x(node, 1, optional=True)
    return [ctx.b.FastGelu(x if bias is None else ctx.b.Add(x, bias))]


@handler("BiasGelu", domain=MS_DOMAIN)
def _bias_gelu(ctx: Any, node: Any, attrs: dict) -> list:
    return [ctx.b.Gelu(ctx.b.Add(ctx.x(node, 0), ctx.x(node, 1)))]


@handler("Scale", domain=MS_DOMAIN)
def _ms_scale(ctx: Any, node: Any, attrs: dict) -> list:
    x = ctx.x(node, 0)
    s = ctx.const(node, 1, "scale")
    if s.size != 1:
        raise Unsupported("the scale must be one number")
    v = float(s.reshape(-1)[0])
    if attrs.get("scale_down", 0):
        return [ctx.b.Div(x, ctx.b.constant(v, x.dtype.value))]
    return [ctx.b.Scale(x, factor=v)]


# -- com.microsoft: gradient ops --------------------------------------------------------------------------
@handler("BiasGeluGrad_dX", "BiasFastGeluGrad_dX", domain=MS_DOMAIN)
def _bias_gelu_grad(ctx: Any, node: Any, attrs: dict) -> list:
    name = "GeluGrad" if node.op_type == "BiasGeluGrad_dX" else "FastGeluGrad"
    return [ctx.b.apply(name, ctx.x(node, 0), ctx.b.Add(ctx.x(node, 1), ctx.x(node, 2)))]


@handler("DivGrad", domain=MS_DOMAIN)
def _div_grad(ctx: Any, node: Any, attrs: dict) -> list:
    """dA = dY / B, dB = -dY * A / B^2, each summed to its operand's shape (ORT's DivGrad)."""
    dy, a, b = ctx.x(node, 0), ctx.x(node, 1), ctx.x(node, 2)
    want = [k < len(node.output) and bool(node.output[k]) for k in range(2)]
    da = ctx.b.ReduceSumTo(ctx.b.Div(dy, b), a) if want[0] else None
    db = None
    if want[1]:
        db = ctx.b.ReduceSumTo(ctx.b.Neg(ctx.b.Div(ctx.b.Div(ctx.b.Mul(dy, a), b), b)), b)
    return [da, db]


def custom(op_type: str) -> Handler:
    """A node of the ``ai.gradir`` domain (``export_onnx(custom_domain=True)``, or a user's op): the gradir
    op itself, with every attribute it has."""
    def fn(ctx: Any, node: Any, attrs: dict) -> list:
        cls = ctx.op_class(op_type)
        _only(attrs, {a.name for a in cls.ATTRS}, node)
        kw = {k: _attr_value(ctx, cls, k, v) for k, v in attrs.items()}
        # the builder says which of the op's operands a missing input is, and whether it may be omitted
        res = ctx.b.apply(op_type, *[ctx.x(node, i, optional=True) for i in range(len(node.input))], **kw)
        res = list(res) if isinstance(res, tuple) else [res]
        return res[:len(node.output)]
    return fn


@handler("SoftmaxCrossEntropyLossGrad", domain=MS_DOMAIN)
def _sce_grad(ctx: Any, node: Any, attrs: dict) -> list:
    """ORT reads a reduced loss's gradient dY as one number, whether it is [] or [1] (PyTorch-exported seeds
    are [1]); gradir's op takes a scalar, so a [1] dY is reshaped."""
    reduction = attrs.get("reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    dy = ctx.x(node, 0, optional=True)
    if reduction != "none" and dy is not None and dy.shape == (1,):
        ctx.values[node.input[0] + "/scalar"] = ctx.b.Reshape(dy, shape=[])
        node = _with_input(node, 0, node.input[0] + "/scalar")
    cls = ctx.op_class("SoftmaxCrossEntropyLossGrad")
    return mapped(cls, onnx_map(cls))(ctx, node, attrs)


def _with_input(node: Any, i: int, name: str) -> Any:
    copy = type(node)()
    copy.CopyFrom(node)
    copy.input[i] = name
    return copy
