"""Rewrites of the model's nodes before they are imported: patterns a framework writes as several ONNX
ops that gradir (as ONNX Runtime's training transformers do) has one op for.

``fuse_gelus``: PyTorch exports ``GELU`` as ``x * (1 + Erf(x / sqrt(2))) * 0.5``; gradir has no ``Erf``
op, and its ``Gelu`` (with ``GeluGrad``) is what ORT's training graphs use, so the chain becomes one
``com.microsoft`` ``Gelu`` node.  The tanh approximation ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715
* x^3)))`` (``nn.GELU(approximate='tanh')``, GPT-2's hand-written one) becomes one ``FastGelu`` node, as
ORT's ``FastGeluFusion`` makes it: the cube written ``Pow(x, 3)``, ``x * (x * x)`` or ``(x * x) * x``, the
polynomial also as ``x * (1 + 0.044715 * x * x)``, the constants on either side of their ``Mul`` and
``Add``, the ``0.5`` applied to ``x`` first, to ``1 + tanh`` or to the product last.  A chain is fused
only when each of its intermediate values has no other reader (and is no graph output): what else reads
it still needs it.  The rewrite runs on the node list, before any node is imported; ``regroup``
(``lowering.py``) is the other such rewrite, of the groups ``export_onnx`` writes.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ...errors import OnnxUnsupported as Unsupported
from .common import MS_DOMAIN, onnx_domain
from .loading import tensor_array

__all__ = ["fuse_gelus", "fuse_erf_gelu"]

SQRT_2_OVER_PI = (2 / np.pi) ** 0.5


class _Nodes:
    """The node list as a graph: each value's producer and readers, and the scalars known before import."""

    def __init__(self, onnx: Any, nodes: list, inits: dict, graph_outputs: set[str]) -> None:
        def value(t: Any) -> Optional[np.ndarray]:
            """A small tensor's value (the GELU's constants are scalars); others, and bad ones, are left for
            the import to read and report."""
            if t.data_location == onnx.TensorProto.EXTERNAL or len(t.dims) > 1 or any(d != 1 for d in t.dims):
                return None
            try:
                return tensor_array(onnx, t)
            except Unsupported:
                return None

        self.consts = {n: a for n, a in ((n, value(t)) for n, t in inits.items()) if a is not None}
        for node in nodes:
            if node.op_type == "Constant" and onnx_domain(node.domain) == "" and len(node.attribute) == 1 and \
                    node.attribute[0].name == "value" and node.output:
                a = value(node.attribute[0].t)
                if a is not None:
                    self.consts[node.output[0]] = a
        self.producer = {o: n for n in nodes for o in n.output}
        self.uses: dict[str, list] = {}
        for n in nodes:
            for i in n.input:
                self.uses.setdefault(i, []).append(n)
        self.graph_outputs = graph_outputs

    def scalar(self, name: str, want: float, tol: float = 1e-6) -> bool:
        a = self.consts.get(name)
        return a is not None and a.size == 1 and a.dtype.kind in "fiu" and \
            abs(float(a.reshape(-1)[0]) - want) <= tol * abs(want)

    def only_use(self, name: str) -> Any:
        """The one node reading ``name``, if it has exactly one reader and is no graph output."""
        u = self.uses.get(name, [])
        return u[0] if len(u) == 1 and name not in self.graph_outputs else None

    def made(self, name: str, op: str, reader: Any) -> Any:
        """The ``op`` node making ``name``, if ``reader`` is its only reader."""
        n = self.producer.get(name)
        return n if n is not None and n.op_type == op and onnx_domain(n.domain) == "" and \
            self.only_use(name) is reader else None

    @staticmethod
    def other(node: Any, name: str) -> Optional[str]:
        ins = list(node.input)
        return ins[1 - ins.index(name)] if len(ins) == 2 and name in ins else None

    def times(self, node: Any, want: float) -> Optional[str]:
        """``node`` is a ``Mul`` of a value and the scalar ``want`` (either order): the value's name."""
        if node is None or node.op_type != "Mul" or onnx_domain(node.domain) != "" or len(node.input) != 2:
            return None
        for k in (0, 1):
            if self.scalar(node.input[1 - k], want):
                return node.input[k]
        return None

    def plus_one(self, node: Any, name: str) -> bool:
        """``node`` is ``Add(name, 1)`` (either order)."""
        return node is not None and node.op_type == "Add" and onnx_domain(node.domain) == "" and \
            self.scalar(self.other(node, name) or "", 1.0)

    def scaled_end(self, x: str, add: Any) -> Optional[tuple[list, str]]:
        """The end of a GELU, from ``add`` = ``1 + f``: ``x * add * 0.5`` (either grouping and order), ``(x *
        0.5) * add`` or ``x * (0.5 * add)``: its nodes (``add`` excluded) and the GELU's output."""
        m1 = self.only_use(add.output[0])
        if m1 is None or m1.op_type != "Mul" or onnx_domain(m1.domain) != "" or len(m1.input) != 2:
            return None
        partner = self.other(m1, add.output[0])
        if partner == x:  # x * add, then * 0.5
            m2 = self.only_use(m1.output[0])
            return ([m1, m2], m2.output[0]) if self.times(m2, 0.5) == m1.output[0] else None
        half = self.made(partner or "", "Mul", m1)
        if half is not None and self.times(half, 0.5) == x:  # (x * 0.5) * add
            return [half, m1], m1.output[0]
        if self.times(m1, 0.5) == add.output[0]:  # (0.5 * add), then x * it
            m2 = self.only_use(m1.output[0])
            if m2 is not None and m2.op_type == "Mul" and self.other(m2, m1.output[0]) == x:
                return [m1, m2], m2.output[0]
        return None

    def cube_of(self, name: str, reader: Any) -> Optional[tuple[list, str]]:
        """``name`` is ``x^3``, read by ``reader`` only: ``Pow(x, 3)``, ``x * (x * x)`` or ``(x * x) * x``."""
        n = self.producer.get(name)
        if n is None or self.only_use(name) is not reader or onnx_domain(n.domain) != "" or len(n.input) != 2:
            return None
        if n.op_type == "Pow" and self.scalar(n.input[1], 3.0, 0):
            return [n], n.input[0]
        if n.op_type != "Mul":
            return None
        for k in (0, 1):
            sq = self.made(n.input[1 - k], "Mul", n)
            if sq is not None and sq.input[0] == sq.input[1] == n.input[k]:
                return [n, sq], n.input[k]
        return None

    def polynomial(self, name: Optional[str], reader: Any) -> Optional[tuple[str, list]]:
        """``name`` is ``x + 0.044715 * x^3`` (either order) or ``x * (1 + 0.044715 * x * x)`` (ORT's second
        form, either order throughout), read by ``reader`` only: ``x`` and the nodes computing it."""
        n = self.producer.get(name or "")
        if n is None or self.only_use(name or "") is not reader or len(n.input) != 2 or onnx_domain(n.domain):
            return None
        for k in (0, 1):
            x, other = n.input[k], n.input[1 - k]
            if n.op_type == "Add":  # x + 0.044715 * x^3
                term = self.made(other, "Mul", n)
                cubed = self.times(term, 0.044715)
                cube = self.cube_of(cubed, term) if cubed is not None else None
                if cube is not None and cube[1] == x:
                    return x, cube[0] + [term, n]
            elif n.op_type == "Mul":  # x * (1 + 0.044715 * x * x)
                one = self.made(other, "Add", n)
                for j in (0, 1):
                    term = self.made(one.input[j], "Mul", one) if one is not None and len(one.input) == 2 else None
                    if term is None or not self.scalar(one.input[1 - j], 1.0):
                        continue
                    sq = self.made(self.times(term, 0.044715) or "", "Mul", term)
                    if sq is not None and list(sq.input) == [x, x]:
                        return x, [sq, term, one, n]
        return None


def fuse_gelus(onnx: Any, nodes: list, inits: dict, graph_outputs: set[str], notes: list[str]) -> list:
    """The erf-written GELUs become ``Gelu`` nodes and the tanh-written ones ``FastGelu`` (see the module doc)."""
    return fuse_tanh_gelu(onnx, fuse_erf_gelu(onnx, nodes, inits, graph_outputs, notes), inits, graph_outputs,
                          notes)


def fuse_erf_gelu(onnx: Any, nodes: list, inits: dict, graph_outputs: set[str], notes: list[str]) -> list:
    """An erf-written GELU (``x * (1 + Erf(x / sqrt(2))) * 0.5`` as PyTorch exports it, with the Mul by 0.5
    first or last) becomes one ``Gelu`` node, as ONNX Runtime's transformers make it before training."""
    g = _Nodes(onnx, nodes, inits, graph_outputs)
    found = []
    for erf in nodes:
        if erf.op_type != "Erf" or onnx_domain(erf.domain) != "":
            continue
        div = g.producer.get(erf.input[0])
        if div is None or g.only_use(erf.input[0]) is not erf:
            continue
        if div.op_type == "Div" and g.scalar(div.input[1], 2 ** 0.5):
            x = div.input[0]
        else:
            x = g.times(div, 2 ** -0.5)
            if x is None:
                continue
        add = g.only_use(erf.output[0])
        if not g.plus_one(add, erf.output[0]):
            continue
        end = g.scaled_end(x, add)
        if end is not None:
            found.append(([div, erf, add] + end[0], "Gelu", x, end[1]))
    return _replace(onnx, nodes, found, notes, "erf-written GELU", "Gelu")


def fuse_tanh_gelu(onnx: Any, nodes: list, inits: dict, graph_outputs: set[str], notes: list[str]) -> list:
    """A tanh-written GELU becomes one ``FastGelu`` node (``com.microsoft``), as ORT's ``FastGeluFusion``."""
    g = _Nodes(onnx, nodes, inits, graph_outputs)
    found = []
    for tanh in nodes:
        if tanh.op_type != "Tanh" or onnx_domain(tanh.domain) != "":
            continue
        scale = g.made(tanh.input[0], "Mul", tanh)
        inner = g.times(scale, SQRT_2_OVER_PI)
        poly = g.polynomial(inner, scale)
        if poly is None:
            continue
        x, chain = poly
        add = g.only_use(tanh.output[0])
        if not g.plus_one(add, tanh.output[0]):
            continue
        end = g.scaled_end(x, add)
        if end is not None:
            found.append((chain + [scale, tanh, add] + end[0], "FastGelu", x, end[1]))
    return _replace(onnx, nodes, found, notes, "tanh-written GELU", "FastGelu")


def _replace(onnx: Any, nodes: list, found: list, notes: list[str], what: str, op: str) -> list:
    """Each chain of ``found`` (its nodes, the op, its input, its output) replaced by one ``com.microsoft``
    node, where its last node was; a node in two chains is fused once."""
    drop: set[int] = set()
    replace: dict[int, Any] = {}
    index = {id(n): k for k, n in enumerate(nodes)}
    for chain, op_type, x, out in found:
        if any(id(n) in drop for n in chain):
            continue
        node = onnx.helper.make_node(op_type, [x], [out], name="+".join(n.name for n in chain if n.name) or op_type,
                                     domain=MS_DOMAIN)
        drop.update(id(n) for n in chain)
        replace[max(index[id(n)] for n in chain)] = node
    if not replace:
        return nodes
    notes.append(f"fused {len(replace)} {what}{'s' if len(replace) > 1 else ''} into {op}, as ONNX Runtime does")
    return [replace[k] if k in replace else n for k, n in enumerate(nodes) if k in replace or id(n) not in drop]
