"""ONNX Runtime's contrib ops that live in the ai.onnx domain (``SimplifiedLayerNormalization``, ORT's RMSNorm):
their schemas, registered with the ``onnx`` package so that ``onnx.checker`` accepts the models ORT writes
with them (on import) and gradir's exports of them (which ORT runs).  ``onnx`` itself has no such op, and
without a schema its checker refuses any node of it ("No Op registered")."""

from __future__ import annotations

from typing import Any

__all__ = ["register"]

_done: set[int] = set()


def register(onnx: Any) -> None:
    """Register the schemas with ``onnx`` (once per module; a no-op where ``onnx`` cannot, or has them)."""
    if id(onnx) in _done:
        return
    _done.add(id(onnx))
    defs, h = onnx.defs, onnx.helper
    if not hasattr(defs, "register_schema"):  # onnx < 1.15: the checker will say what it says
        return
    try:
        defs.get_schema("SimplifiedLayerNormalization", 1, "")
        return  # already known (registered by someone else)
    except defs.SchemaError:
        pass
    p, floats = defs.OpSchema.FormalParameter, ["tensor(float)", "tensor(double)", "tensor(float16)",
                                                "tensor(bfloat16)"]
    optional = defs.OpSchema.FormalParameterOption.Optional
    defs.register_schema(defs.OpSchema(
        "SimplifiedLayerNormalization", "", 1,
        doc="ONNX Runtime's contrib RMSNorm: Y = X / sqrt(mean(X^2) + epsilon) * scale over axes axis..",
        inputs=[p("X", "T"), p("scale", "V")],
        outputs=[p("Y", "V"), p("inv_std_var", "U", param_option=optional)],
        type_constraints=[("T", floats, ""), ("U", ["tensor(float)", "tensor(double)"], ""), ("V", floats, "")],
        attributes=[defs.OpSchema.Attribute("axis", h.make_attribute("axis", -1), ""),
                    defs.OpSchema.Attribute("epsilon", h.make_attribute("epsilon", 1e-5), ""),
                    defs.OpSchema.Attribute("stash_type", h.make_attribute("stash_type", 1), "")]))
