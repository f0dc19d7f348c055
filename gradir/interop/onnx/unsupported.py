"""What the importer does past a node it cannot import, so that ONE error lists every such node, those
downstream of another included, each located (its name, domain and op type).

A node that fails is listed and what it computes is *poisoned*.  A node reading a poisoned value still
gets imported when it can be: the poisoned value is replaced by a *placeholder*, a graph input of the
type ONNX's shape inference gives it, so the node meets its own problems (an op gradir lacks, an
exponent it cannot take, ...) and is listed for them, and the nodes after it are checked too.  The
placeholders only serve the listing: an import with a problem never returns its graph.  A value of
no inferred type cannot be stood in for; a node reading one is listed only if its op type has no handler
(nothing else can be known of it).  What an op the importer evaluates computes (``Shape`` given its
``--dim``, ...) might have been known at import time; it gets no placeholder, so that a node reading it
as a shape is not blamed for what was the other node's problem.

``Listing`` is a part of the ``Importer`` (``importer.py``), kept here, like ``folding.Folding``.
"""

from __future__ import annotations

from typing import Any, Optional

from ...errors import Diagnostic, GradirError, OnnxError
from .common import GRADIR_DOMAIN, MS_DOMAIN, ONNX_TO_DTYPE, onnx_domain
from .folding import FOLDABLE

__all__ = ["Listing", "no_handler"]


class Listing:
    """The importer's listing of the nodes it cannot import (mixed into ``Importer``)."""

    b: Any
    onnx: Any
    proto: Any
    filename: str
    dims: dict[str, int]
    values: dict[str, Any]
    handlers: dict
    problems: list[str]
    poisoned: set[str]
    maybe_known: set[str]
    symbolic: set[str]
    _stand_ins: set[str]
    _skipped: set[str]
    _made_by_failed: dict[str, str]

    def _failed(self, node: Any, problem: str) -> None:
        """``node`` could not be imported: its problem is listed, and what it computes is poisoned (a
        node it feeds is not blamed for it).  What an op the importer evaluates computes from known values
        might have been known at import time (a ``Shape`` given its ``--dim``), so it does not make the ops
        it feeds unsupported either."""
        d = onnx_domain(node.domain)
        stand_ins = [n for n in node.input if n in self._stand_ins]
        outs = [n for n in node.output if n]
        if d == "" and node.op_type in ("Shape", "Size") and stand_ins:
            # the shape of what a node that failed computes: known if that node were imported (ONNX's shape
            # inference may not know it): not this node's problem
            self.poisoned.update(outs)
            self.maybe_known.update(outs)
            return
        if stand_ins and ((d, node.op_type) in self.handlers or d == "" and node.op_type in FOLDABLE):
            # an op gradir has, refused: perhaps for what the placeholder stands in for
            made = self._made_by_failed.get(stand_ins[0], "a node")
            problem += f" (its input {stand_ins[0]!r} comes from {made}, which cannot be imported)"
        self.problems.append(problem)
        self.poisoned.update(outs)
        self._made_by_failed.update(dict.fromkeys(outs, self._where(node)))
        evaluated = d == "" and node.op_type in FOLDABLE | {"Constant"} or d == MS_DOMAIN and \
            node.op_type == "BroadcastGradientArgs"
        # evaluated from values that are (or might have been) known: what it computes might have been known
        # too; a Pow of a value the graph computes (Pow folds only constants) computes no such thing
        if evaluated and (node.op_type in ("Shape", "Size") or
                          all(not n or n in self.consts or n in self.maybe_known for n in node.input)):
            self.maybe_known.update(outs)

    def _where(self, node: Any) -> str:
        return f"node {node.name or '(unnamed)'!r} ({onnx_domain(node.domain) or 'ai.onnx'} {node.op_type})"

    def _stand_in(self, node: Any) -> bool:
        """Give each poisoned input of ``node`` a placeholder of its inferred type; false (and none given)
        when one has no inferred type gradir has, or might have been known at import time."""
        poisoned = [n for n in dict.fromkeys(node.input) if n in self.poisoned]
        if any(n in self.maybe_known or n in self._skipped for n in poisoned):
            return False
        types = [self._inferred().get(n) for n in poisoned]
        if any(t is None for t in types):
            return False
        for n, (dtype, shape) in zip(poisoned, types):
            try:
                self.values[n] = self.b.input(dtype, shape)
            except GradirError:
                return False
            self._stand_ins.add(n)
            self.poisoned.discard(n)
        return True

    def _inferred(self) -> dict[str, tuple[str, list]]:
        """Each value's type as ONNX's shape inference finds it (computed once, when first asked: only an
        import with a problem asks), the sizes ``--dim`` gives substituted; values of a type gradir lacks, or
        of no known rank, are absent."""
        if hasattr(self, "_inferred_types"):
            return self._inferred_types
        self._inferred_types: dict[str, tuple[str, list]] = {}
        for vi in self._inferred_value_infos():
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type") or tt.elem_type not in ONNX_TO_DTYPE or not tt.HasField("shape"):
                continue
            shape: list[Optional[int]] = []
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    shape.append(int(d.dim_value))
                else:
                    shape.append(self.dims.get(d.dim_param) if d.HasField("dim_param") else None)
            self._inferred_types[vi.name] = (ONNX_TO_DTYPE[tt.elem_type].value, shape)
        return self._inferred_types

    def _inferred_value_infos(self) -> list:
        """The model's value infos after ONNX's shape inference (its own ones if inference fails); once."""
        if not hasattr(self, "_value_infos"):
            g = self.proto.graph
            try:
                g = self.onnx.shape_inference.infer_shapes(self.proto, strict_mode=False).graph
            except Exception:  # noqa: BLE001 - inference of a model the importer refuses anyway: its own infos do
                pass
            self._value_infos = list(g.value_info) + list(g.output) + list(g.input)
        return self._value_infos

    def dimension_names(self, name: str) -> list[Optional[str]]:
        """The symbolic dimension (``dim_param``) of each axis of the value ``name``, as ONNX's shape inference
        propagates them from the inputs; ``None`` where it knows none (or a size)."""
        for vi in self._inferred_value_infos():
            if vi.name == name and vi.type.HasField("tensor_type"):
                return [d.dim_param if d.HasField("dim_param") else None for d in vi.type.tensor_type.shape.dim]
        return []

    def _poisoned_node(self, node: Any, where: str) -> None:
        """A node fed by a value no placeholder stands in for: reported only if its own op type is unsupported.

        An op the importer folds (``Where``, ``Concat``, ``Gather``, ``Slice``, ...) and has no handler for is
        unsupported here too, unless what poisons it could have been known at import time (``Shape`` of an
        unsupported node's result, a bad initializer, ...): then it would have folded, and is not blamed."""
        d = onnx_domain(node.domain)
        maybe_known = all(n in self.maybe_known for n in node.input if n in self.poisoned)
        if d == "" and node.op_type in ("Shape", "Size") or \
                d == "" and node.op_type in FOLDABLE | {"Constant"} and maybe_known or \
                d == MS_DOMAIN and node.op_type == "BroadcastGradientArgs" and maybe_known:
            self.maybe_known.update(n for n in node.output if n)
        elif (d, node.op_type) not in self.handlers:
            self.problems.append(f"{where}: " + no_handler(d))
        else:  # not blamed, and not imported: what it computes is of no known type (its readers get no placeholder)
            self._skipped.update(n for n in node.output if n)
        outs = [n for n in node.output if n]
        self.poisoned.update(outs)
        self._made_by_failed.update(dict.fromkeys(outs, where))

    def _fail(self) -> None:
        n = len(self.problems)
        # the header names what failed: nodes, initializers or graph inputs, or when they are mixed, problems
        kinds = {next((k for k in ("node", "initializer", "graph input") if p.startswith(k + " ")), "")
                 for p in self.problems}
        kind = kinds.pop() if len(kinds) == 1 else ""
        head = Diagnostic(f"{n} {kind}{'s' if n > 1 else ''} cannot be imported:" if kind else
                          f"the model cannot be imported: {n} problem{'s' if n > 1 else ''}:", filename=self.filename)
        raise OnnxError([head] + [Diagnostic(p, filename=self.filename) for p in self.problems])


def no_handler(domain: str) -> str:
    """Why a node has no handler: no equivalent op, an unknown ``ai.gradir`` op (a user op not loaded), or a
    domain gradir does not read."""
    if domain in ("", MS_DOMAIN):
        return "gradir has no equivalent op"
    if domain == GRADIR_DOMAIN:
        return "no such gradir op (an op of your own is loaded with --ops FILE or gradir.load_ops)"
    return f"the domain {domain!r} is not supported"
