"""``FusedElementwise``: a connected group of element-wise ops run as one loop (made by the
``fuse-elementwise`` pass, ``gradir.transforms.passes.elementwise``; compiled by ``gradir.backends.cpu.kernels.fused``).

The op exists only after the pass: it is not registered in ``OPS``, so a graph's text cannot
name it (the parser reports an unknown op), and the pass is the only place that builds one.
Its ``body`` attribute holds the members' own lines (``t5 = Add(t3, t2)``, real value names, in
order), so ``gradir plan`` and the printed optimized graph show what the loop computes; its
operands are the values the loop reads from outside, its results the members' results that
are read outside the group or are graph outputs.  The member ops themselves are kept on the
instance (``members``): the kernel is built from their classes' scalar ``FORMULA``.

A group may end in reductions: ``ReduceSumTo`` members (after the element-wise ones) that sum a
member's value over the loop's leading axes (a broadcast bias's gradient).  The loop adds each
value into the sum as it computes it, so the summed value need not be written at all (it is a
result only when something else reads it); the sums are the op's last results, each of its
``Like``'s shape (``Like`` itself is not read: only its static shape matters).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

from ..ir.op import Attr, InferContext, Op, Operand, freeze
from ..ir.types import TensorType

__all__ = ["FusedElementwiseOp", "FusedBody", "sum_lead"]


class FusedBody:
    """The group as the kernel needs it: value slots ``0..n_inputs-1`` are the operands, slot
    ``n_inputs + k`` the result of member ``k``; ``outputs`` are the slots the op returns.

    ``key`` is canonical (no value names): groups with the same ops, wiring, attributes, shape
    and dtype share one compiled loop."""

    def __init__(self, members: Sequence[Op], inputs: Sequence[str], outputs: Sequence[str],
                 loop_type: TensorType, sum_shapes: Mapping[str, Sequence[int]] = {}) -> None:
        from .shape import ReduceSumToOp
        slot = {v: k for k, v in enumerate(inputs)}
        self.n_inputs = len(inputs)
        self.instrs: list[tuple[type, tuple[int, ...], dict[str, Any]]] = []
        summed: dict[str, int] = {}  # a ReduceSumTo member's result -> the slot it sums
        for op in members:
            if isinstance(op, ReduceSumToOp):
                summed[op.results[0]] = slot[op.operands[0]]
                continue
            args = tuple(slot[v] for v in op.operands if v is not None)
            self.instrs.append((type(op), args, dict(op.attrs)))
            slot[op.results[0]] = len(slot)
        self.outputs = tuple(slot[v] for v in outputs if v not in summed)
        # (slot, result shape) of each sum, in the order of the op's results (after ``outputs``)
        self.sums = tuple((summed[v], tuple(sum_shapes[v])) for v in outputs if v in summed)
        self.type = loop_type
        self.shape = tuple(loop_type.shape)
        self.numel = math.prod(self.shape)
        self.dtype = loop_type.dtype.numpy
        # the leading axes every sum adds over (the same for all of a group's sums: the pass checks)
        self.lead = sum_lead(self.shape, self.sums[0][1]) if self.sums else 0
        # (the formula too: a user op redefined under the same name in one process is another loop)
        self.key = (self.n_inputs, tuple((cls.op_name, cls.FORMULA, args, freeze(attrs))
                                         for cls, args, attrs in self.instrs),
                    self.outputs, tuple(s for s, _ in self.sums), self.lead, self.dtype.str)


def sum_lead(shape: Sequence[int], like: Sequence[int]) -> int:
    """How many leading axes of ``shape`` a ``ReduceSumTo`` to ``like`` sums over, when it sums
    over leading axes only: the leading 1s of ``like`` aligned to the right of ``shape``."""
    padded = (1,) * (len(shape) - len(like)) + tuple(like)
    n = 0
    while n < len(padded) and padded[n] == 1:
        n += 1
    return n


class FusedElementwiseOp(Op):
    """Element-wise ops fused into one loop by the fuse-elementwise pass (not for graphs)."""

    abstract = True  # not registered in OPS: see the module docstring (made concrete below)
    DECLARED_TYPE = True  # the members' result types, kept when a run re-infers shapes
    OPERANDS = (Operand("X", variadic=True, doc="the values the loop reads"),)
    RESULTS = ()
    ATTRS = (Attr("body", "strs", doc="the fused ops, one line each, in order"),
             Attr("outputs", "strs", doc="the values the loop writes (the op's results)"))

    def __init__(self, results: Sequence[str], operands: Sequence[Optional[str]],
                 attrs: Optional[Mapping[str, Any]] = None,
                 result_types: Optional[Sequence[Optional[TensorType]]] = None, loc: Any = None,
                 members: Sequence[Op] = (), loop_type: Optional[TensorType] = None) -> None:
        super().__init__(results, operands, attrs, result_types, loc)
        self.members = list(members)
        # the loop's shape and dtype (the element-wise members' results'); the results' own types
        # differ from it only for the sums of a group that ends in reductions
        self.loop_type = loop_type if loop_type is not None else (result_types[0] if result_types else None)
        self._body: Optional[FusedBody] = None

    @classmethod
    def build(cls, members: Sequence[Op], inputs: Sequence[str], outputs: Sequence[str],
              types: Mapping[str, TensorType], loop_type: Optional[TensorType] = None) -> "FusedElementwiseOp":
        """``members``: the element-wise ops in order, then any ``ReduceSumTo`` ending the group;
        ``outputs``: the element-wise results read outside, then the sums."""
        # each member's line without its type (the loop's type is shown once)
        body = [m.to_string().rsplit(" : ", 1)[0] if m.result_types else m.to_string() for m in members]
        loop_type = loop_type if loop_type is not None else types[outputs[0]]
        op = cls(list(outputs), list(inputs), {"body": tuple(body), "outputs": tuple(outputs)},
                 [types[v] for v in outputs], loc=members[0].loc, members=members, loop_type=loop_type)
        op._body = FusedBody(members, inputs, outputs, loop_type,  # now, while the compiler holds off the GC
                             {v: types[v].shape for v in outputs})
        return op

    @classmethod
    def num_results(cls, attrs: Mapping[str, Any]) -> int:
        return len(attrs["outputs"])

    @classmethod
    def result_names(cls, attrs: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(attrs["outputs"])

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return [ctx.declared(k) for k in range(len(self.results))]

    @property
    def body(self) -> FusedBody:
        if self._body is None:
            t, types = self.loop_type, self.result_types
            assert t is not None and types, "a FusedElementwise op carries its result types"
            self._body = FusedBody(self.members, self.operands, self.results, t,  # type: ignore[arg-type]
                                   {v: tv.shape for v, tv in zip(self.results, types) if tv is not None})
        return self._body

    def kernel_attrs(self) -> dict[str, Any]:
        return {"body": self.body}

    def copy(self, **changes: Any) -> "Op":
        kw = dict(results=self.results, operands=self.operands, attrs=self.attrs,
                  result_types=self.result_types, loc=self.loc, members=self.members, loop_type=self.loop_type)
        kw.update(changes)
        return type(self)(**kw)

    def plan_lines(self, types: Mapping[str, TensorType]) -> list[str]:
        """What ``gradir plan`` shows under the step: the loop's shape, what it reads and writes,
        and the fused ops."""
        t = self.loop_type
        reads = []
        for v in self.operands:
            tv = types.get(v) if v is not None else None
            bcast = tv is not None and t is not None and tuple(tv.shape) != tuple(t.shape)
            reads.append(f"{v} {_shape(tv)} (broadcast)" if bcast else str(v))
        n_sums = len(self.body.sums)
        full, sums = self.results[:len(self.results) - n_sums], self.results[len(self.results) - n_sums:]
        writes = [", ".join(full)] * bool(full) + [
            f"{'sums' if n_sums > 1 else 'the sum'} {', '.join(f'{v} {_shape(types.get(v))}' for v in sums)} over "
            f"axes {list(range(self.body.lead))}, added up as the loop goes"] * bool(sums)
        lines = [f"one loop over {t}: reads {', '.join(reads)}; writes {'; '.join(writes)}"]
        lines += list(self.attrs["body"])
        return lines


def _shape(t: Optional[TensorType]) -> str:
    from ..ir.types import format_shape
    return format_shape(t.shape) if t is not None else "?"


# concrete, but unregistered: ``Op.__init_subclass__`` registers only classes that are not abstract
FusedElementwiseOp.abstract = False
FusedElementwiseOp.op_name = "FusedElementwise"
