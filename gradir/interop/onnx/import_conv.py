"""Import of ONNX Runtime's pooling gradients, ``MaxPoolGrad`` and ``AveragePoolGrad`` (ai.onnx domain, opset 9),
whose kernels take dX's shape from the graph: gradir reads it from the model's value_info (or its outputs), or
for MaxPoolGrad from the input of the MaxPool whose Indices it reads, into the attribute ``shape``."""

from __future__ import annotations

from typing import Any, Optional

from .import_ops import Unsupported, handler

__all__: list[str] = []

_WINDOW = {"auto_pad", "kernel_shape", "strides", "pads", "dilations", "ceil_mode"}


def _declared(ctx: Any, name: str) -> Optional[list[int]]:
    """The shape the model declares for ``name``, its spatial axes known (axes 0 and 1 are dY's: 1 stands in
    for a symbolic one)."""
    g = ctx.proto.graph
    for vi in list(g.value_info) + list(g.output):
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if len(dims) > 2 and all(d.HasField("dim_value") for d in dims[2:]):
                return [int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in dims]
    return None


def _forward_x(ctx: Any, node: Any) -> Optional[list[int]]:
    """The shape of the input of the MaxPool whose Indices ``node`` reads."""
    for n in ctx.proto.graph.node:
        if n.op_type == "MaxPool" and len(n.output) > 1 and n.output[1] == node.input[1] and n.input[0] in ctx.values:
            shape = list(ctx.values[n.input[0]].shape)
            if len(shape) > 2 and None not in shape[2:]:
                return [d or 1 for d in shape[:2]] + shape[2:]
    return None


def _attrs(attrs: dict, allowed: set[str]) -> dict:
    extra = sorted(set(attrs) - allowed)
    if extra:
        raise Unsupported(f"attribute{'s' if len(extra) > 1 else ''} {', '.join(extra)} not supported")
    return {k: (v.decode() if isinstance(v, bytes) else [int(x) for x in v] if isinstance(v, (list, tuple)) else int(v))
            for k, v in attrs.items()}


def _shape(ctx: Any, node: Any) -> list[int]:
    shape = _declared(ctx, node.output[0]) or (_forward_x(ctx, node) if node.op_type == "MaxPoolGrad" else None)
    if shape is None:
        raise Unsupported(f"dX's shape is not in the model (ORT reads it from the value_info of {node.output[0]!r}): "
                          "run onnx's shape inference on the model first")
    return shape


@handler("MaxPoolGrad")
def _max_pool_grad(ctx: Any, node: Any, attrs: dict) -> list:
    """ORT (dY, Indices) -> MaxPoolGrad(dY, Indices, shape=, the forward's attributes)."""
    kw = _attrs(attrs, _WINDOW | {"storage_order"})
    return [ctx.b.MaxPoolGrad(ctx.x(node, 0), ctx.x(node, 1), shape=_shape(ctx, node), **kw)]


@handler("AveragePoolGrad")
def _average_pool_grad(ctx: Any, node: Any, attrs: dict) -> list:
    """ORT (dY) -> AveragePoolGrad(dY, shape=, the forward's attributes)."""
    kw = _attrs(attrs, _WINDOW | {"count_include_pad"})
    return [ctx.b.AveragePoolGrad(ctx.x(node, 0), shape=_shape(ctx, node), **kw)]
