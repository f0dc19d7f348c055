"""Rewrites of the model's nodes before they are imported: patterns a framework writes as several ONNX
ops that gradir (as ONNX Runtime's training transformers do) has one op for.

``fuse_erf_gelu``: PyTorch exports ``GELU`` as ``x * (1 + Erf(x / sqrt(2))) * 0.5``; gradir has no
``Erf`` op, and its ``Gelu`` (with ``GeluGrad``) is what ORT's training graphs use, so the chain becomes
one ``com.microsoft`` ``Gelu`` node.  The rewrite runs on the node list, before any node is imported;
``regroup`` (``lowering.py``) is the other such rewrite, of the groups ``export_onnx`` writes.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ...errors import OnnxUnsupported as Unsupported
from .common import MS_DOMAIN, onnx_domain
from .loading import tensor_array

__all__ = ["fuse_erf_gelu"]

def fuse_erf_gelu(onnx: Any, nodes: list, inits: dict, graph_outputs: set[str], notes: list[str]) -> list:
    """An erf-written GELU (``x * (1 + Erf(x / sqrt(2))) * 0.5`` as PyTorch exports it, with the Mul by 0.5
    first or last) becomes one ``Gelu`` node, as ONNX Runtime's transformers make it before training."""
    def value(t: Any) -> Optional[np.ndarray]:
        """A small tensor's value (the GELU's constants are scalars); others, and bad ones, are left for
        the import to read and report."""
        if t.data_location == onnx.TensorProto.EXTERNAL or len(t.dims) > 1 or any(d != 1 for d in t.dims):
            return None
        try:
            return tensor_array(onnx, t)
        except Unsupported:
            return None

    consts = {n: a for n, a in ((n, value(t)) for n, t in inits.items()) if a is not None}
    for node in nodes:
        if node.op_type == "Constant" and onnx_domain(node.domain) == "" and len(node.attribute) == 1 and \
                node.attribute[0].name == "value" and node.output:
            a = value(node.attribute[0].t)
            if a is not None:
                consts[node.output[0]] = a
    producer = {o: n for n in nodes for o in n.output}
    uses: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            uses.setdefault(i, []).append(n)

    def scalar(name: str, want: float, tol: float = 1e-6) -> bool:
        a = consts.get(name)
        return a is not None and a.size == 1 and abs(float(a.reshape(-1)[0]) - want) <= tol * abs(want)

    def only_use(name: str) -> Any:
        u = uses.get(name, [])
        return u[0] if len(u) == 1 and name not in graph_outputs else None

    def other(node: Any, name: str) -> Optional[str]:
        ins = list(node.input)
        return ins[1 - ins.index(name)] if len(ins) == 2 and name in ins else None

    drop: set[int] = set()
    replace: dict[int, Any] = {}
    for erf in nodes:
        if erf.op_type != "Erf" or onnx_domain(erf.domain) != "":
            continue
        div = producer.get(erf.input[0])
        if div is None or only_use(erf.input[0]) is not erf:
            continue
        if div.op_type == "Div" and scalar(div.input[1], 2 ** 0.5):
            x = div.input[0]
        elif div.op_type == "Mul" and (scalar(div.input[1], 2 ** -0.5) or scalar(div.input[0], 2 ** -0.5)):
            x = div.input[0] if scalar(div.input[1], 2 ** -0.5) else div.input[1]
        else:
            continue
        add = only_use(erf.output[0])
        if add is None or add.op_type != "Add" or not scalar(other(add, erf.output[0]) or "", 1.0):
            continue
        m1 = only_use(add.output[0])
        if m1 is None or m1.op_type != "Mul":
            continue
        partner = other(m1, add.output[0])
        half = producer.get(partner or "")
        chain = [div, erf, add, m1]
        if partner == x:  # x * (1 + erf) * 0.5
            m2 = only_use(m1.output[0])
            if m2 is None or m2.op_type != "Mul" or not scalar(other(m2, m1.output[0]) or "", 0.5):
                continue
            chain.append(m2)
            out = m2.output[0]
        elif half is not None and half.op_type == "Mul" and x in half.input and \
                scalar(other(half, x) or "", 0.5) and only_use(half.output[0]) is m1:  # (x * 0.5) * (1 + erf)
            chain.append(half)
            out = m1.output[0]
        else:
            continue
        if any(id(n) in drop for n in chain):
            continue
        gelu = onnx.helper.make_node("Gelu", [x], [out], name="+".join(n.name for n in chain if n.name) or "Gelu",
                                     domain=MS_DOMAIN)
        last = max(nodes.index(n) for n in chain)
        drop.update(id(n) for n in chain)
        replace[last] = gelu
    if not replace:
        return nodes
    notes.append(f"fused {len(replace)} erf-written GELU{'s' if len(replace) > 1 else ''} into Gelu, as ONNX Runtime "
                 f"does")
    return [replace[k] if k in replace else n for k, n in enumerate(nodes) if k in replace or id(n) not in drop]
