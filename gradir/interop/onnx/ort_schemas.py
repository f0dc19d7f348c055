"""ONNX Runtime's training schemas in the ai.onnx domain, made known to the ``onnx`` package.

ORT registers ``SparseSoftmaxCrossEntropy`` and ``SparseSoftmaxCrossEntropyGrad`` in the ai.onnx domain
(opset 9), not in ``com.microsoft``; ``onnx.checker`` knows no such ops there and refuses a model that
has them, so gradir could neither import ORT's models with them nor export them.  ``register`` adds their
schemas (ORT's inputs, outputs, type constraints and attribute) to the ``onnx`` package's registry, once,
when gradir first asks for ``onnx`` (``common.require_onnx``): nothing changes for an op ONNX defines.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register", "ORT_ONNX_DOMAIN_OPS"]

ORT_ONNX_DOMAIN_OPS = {
    # name: (inputs as (name, type, optional), outputs as (name, type, optional))
    "SparseSoftmaxCrossEntropy": ([("logits", "T", False), ("label", "Tind", False), ("weight", "T", True)],
                                  [("Y", "T", False), ("log_prob", "T", True)]),
    "SparseSoftmaxCrossEntropyGrad": ([("dY", "T", False), ("log_prob", "T", False), ("label", "Tind", False),
                                       ("weight", "T", True)], [("d_logits", "T", False)]),
}


def register(onnx: Any) -> None:
    """Add the schemas of ``ORT_ONNX_DOMAIN_OPS`` the ``onnx`` package lacks (an ``onnx`` without
    ``defs.register_schema``, before 1.16, is left as it is)."""
    defs = onnx.defs
    if not hasattr(defs, "register_schema"):
        return
    param = defs.OpSchema.FormalParameter
    optional = defs.OpSchema.FormalParameterOption.Optional
    single = defs.OpSchema.FormalParameterOption.Single
    for name, (ins, outs) in ORT_ONNX_DOMAIN_OPS.items():
        if defs.has(name, ""):
            continue
        defs.register_schema(defs.OpSchema(
            name, "", 9, doc=f"ONNX Runtime's training op {name} (orttraining's training_op_defs.cc)",
            inputs=[param(n, t, param_option=optional if o else single) for n, t, o in ins],
            outputs=[param(n, t, param_option=optional if o else single) for n, t, o in outs],
            type_constraints=[("T", ["tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"],
                               "float tensors"), ("Tind", ["tensor(int32)", "tensor(int64)"], "label indices")],
            attributes=[defs.OpSchema.Attribute("reduction", defs.OpSchema.AttrType.STRING,
                                                'reduction: "mean", "sum" or "none"')]))
