"""ONNX Runtime's ops that live in the ai.onnx domain without being ONNX ops, made known to the ``onnx`` package.

ORT registers ``SimplifiedLayerNormalization`` (its RMSNorm contrib op, opset 1) and the training ops
``SparseSoftmaxCrossEntropy``, ``SparseSoftmaxCrossEntropyGrad``, ``MaxPoolGrad`` and ``AveragePoolGrad`` (opset
9) in the ai.onnx domain, not in
``com.microsoft``; ``onnx.checker`` knows no such ops there and refuses any model that has them ("No Op
registered"), so gradir could neither import ORT's models with them nor export them.  ``register`` adds
their schemas (ORT's inputs, outputs, type constraints and attributes) to the ``onnx`` package's registry,
once, when gradir first asks for ``onnx`` (``common.require_onnx``): nothing changes for an op ONNX defines.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register", "ORT_ONNX_DOMAIN_OPS"]

_FLOATS = ["tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"]
_REDUCTION = ("reduction", "STRING", None, 'reduction: "mean", "sum" or "none"')
OPTIONAL = "optional"  # an attribute's default: an optional attribute without a default value
# the pooling gradients carry their forward node's attributes (ORT's gradient builders copy them)
_POOL = [(a, kind, OPTIONAL, "") for a, kind in (("auto_pad", "STRING"), ("ceil_mode", "INT"), ("dilations", "INTS"),
                                                 ("kernel_shape", "INTS"), ("pads", "INTS"), ("strides", "INTS"))]

ORT_ONNX_DOMAIN_OPS = {
    # name: (opset, inputs as (name, type, optional), outputs likewise, type constraints, attributes)
    "SimplifiedLayerNormalization": (
        1, [("X", "T", False), ("scale", "V", False)], [("Y", "V", False), ("inv_std_var", "U", True)],
        [("T", _FLOATS), ("U", ["tensor(float)", "tensor(double)"]), ("V", _FLOATS)],
        [("axis", "INT", -1, ""), ("epsilon", "FLOAT", 1e-5, ""), ("stash_type", "INT", 1, "")]),
    "SparseSoftmaxCrossEntropy": (
        9, [("logits", "T", False), ("label", "Tind", False), ("weight", "T", True)],
        [("Y", "T", False), ("log_prob", "T", True)],
        [("T", _FLOATS), ("Tind", ["tensor(int32)", "tensor(int64)"])], [_REDUCTION]),
    "SparseSoftmaxCrossEntropyGrad": (
        9, [("dY", "T", False), ("log_prob", "T", False), ("label", "Tind", False), ("weight", "T", True)],
        [("d_logits", "T", False)],
        [("T", _FLOATS), ("Tind", ["tensor(int32)", "tensor(int64)"])], [_REDUCTION]),
    "MaxPoolGrad": (
        9, [("dY", "T", False), ("Indices", "I", False)], [("dX", "T", False)],
        [("T", _FLOATS), ("I", ["tensor(int64)"])], _POOL + [("storage_order", "INT", OPTIONAL, "")]),
    "AveragePoolGrad": (
        9, [("dY", "T", False)], [("dX", "T", False)], [("T", _FLOATS)],
        _POOL + [("count_include_pad", "INT", OPTIONAL, "")]),
}

_done: set[int] = set()


def register(onnx: Any) -> None:
    """Add the schemas of ``ORT_ONNX_DOMAIN_OPS`` the ``onnx`` package lacks (once per module; an ``onnx``
    without ``defs.register_schema``, before 1.15, is left as it is: its checker will say what it says)."""
    if id(onnx) in _done:
        return
    _done.add(id(onnx))
    defs, h = onnx.defs, onnx.helper
    if not hasattr(defs, "register_schema"):
        return
    schema = defs.OpSchema
    param, optional, single = schema.FormalParameter, schema.FormalParameterOption.Optional, \
        schema.FormalParameterOption.Single
    for name, (opset, ins, outs, types, attrs) in ORT_ONNX_DOMAIN_OPS.items():
        if defs.has(name, ""):
            continue
        attributes = [schema.Attribute(a, getattr(schema.AttrType, kind), doc) if default is None
                      else schema.Attribute(a, getattr(schema.AttrType, kind), doc, required=False)
                      if default == OPTIONAL else schema.Attribute(a, h.make_attribute(a, default), doc)
                      for a, kind, default, doc in attrs]
        defs.register_schema(schema(
            name, "", opset, doc=f"ONNX Runtime's op {name} (registered by gradir for onnx.checker)",
            inputs=[param(n, t, param_option=optional if o else single) for n, t, o in ins],
            outputs=[param(n, t, param_option=optional if o else single) for n, t, o in outs],
            type_constraints=[(t, allowed, "") for t, allowed in types], attributes=attributes))
