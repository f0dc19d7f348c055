"""What the algebraic rewrite passes share: one forward sweep over the ops that may replace an op,
drop it in favour of a value already computed, or fold it into the op that made its operand.

A dropped op's result is renamed to the value that replaces it in every later operand; when it
was a graph output, ``Program.aliases`` records which value now computes that output (as ``cse``
does), so output names and labels stay.  An output is never handed to a graph input (the runtime
returns fresh arrays, never the caller's), so such an op stays.
"""

from __future__ import annotations

import re
from typing import Optional

from ...ir.op import OPS, Op
from ...ir.types import TensorType
from .pipeline import Program

__all__ = ["Sweep"]


class Sweep:
    """A rewrite of ``program.ops`` in one forward sweep: ``for op in sweep: ...`` yields each op with
    its operands renamed; the loop body calls ``keep``, ``replace`` or ``drop`` (an op not handled
    is kept), and ``finish`` installs the new op list."""

    def __init__(self, program: Program) -> None:
        self.p = program
        self.ops: list[Op] = []
        self.rename: dict[str, str] = {}
        self.producer: dict[str, int] = {}  # value -> index in self.ops
        self.inputs = set(program.inputs)
        self.uses: dict[str, int] = {}  # readers, graph outputs counted as readers
        for op in program.ops:
            for v in op.operands:
                if v is not None:
                    self.uses[v] = self.uses.get(v, 0) + 1
        self.outputs = set(program.live_outputs)
        for v in program.live_outputs:
            self.uses[v] = self.uses.get(v, 0) + 1
        self._handled = False
        self._next = 1 + max((int(m.group(1)) for v in program.types
                              if (m := re.fullmatch(r"t(\d+)", v))), default=-1)

    def __iter__(self):
        for op in self.p.ops:
            operands = [None if v is None else self.resolve(v) for v in op.operands]
            if operands != op.operands:
                op = op.copy(operands=operands)
            self._handled = False
            yield op
            if not self._handled:
                self.keep(op)

    # -- queries ---------------------------------------------------------------------
    def resolve(self, value: str) -> str:
        while value in self.rename:
            value = self.rename[value]
        return value

    def made_by(self, value: Optional[str], *names: str) -> Optional[Op]:
        """The op (already swept) that computes ``value``, if it is one of ``names``."""
        k = self.producer.get(value) if value is not None else None
        if k is None:
            return None
        op = self.ops[k]
        return op if op.op_name in names else None

    def only_use(self, value: str) -> bool:
        """``value`` is read by exactly one op and is no graph output."""
        return self.uses.get(value, 0) == 1 and value not in self.outputs

    def type(self, value: str) -> TensorType:
        return self.p.types[value]

    # -- edits -------------------------------------------------------------------------
    def keep(self, op: Op) -> None:
        self._handled = True
        for r in op.results:
            self.producer[r] = len(self.ops)
        self.ops.append(op)

    def can_drop(self, op: Op, by: str) -> bool:
        """May ``op`` (one result) be dropped in favour of the value ``by``?"""
        r = op.results[0]
        return not (r in self.outputs and by in self.inputs) and r != by

    def drop(self, op: Op, by: str) -> bool:
        """Drop ``op``: later reads of its result read ``by`` instead.  False (and ``op`` kept) when
        the result is a graph output that ``by`` cannot stand for."""
        if not self.can_drop(op, by):
            self.keep(op)
            return False
        self._handled = True
        r = op.results[0]
        self.rename[r] = by
        for v in op.operands:
            if v is not None:
                self.uses[v] -= 1
        self.uses[by] = self.uses.get(by, 0) + self.uses.pop(r, 0)
        if r in self.outputs:
            self.outputs.discard(r)
            self.outputs.add(by)
            self.p.aliases[r] = by
        return True

    def fold_into_producer(self, value: str, producer: Op) -> None:
        """Drop the op being swept and put ``producer`` (a replacement of the op that computed its
        operand ``value``, which only it read) in that op's place, computing the swept op's result."""
        k = self.producer[value]
        for v in self.ops[k].results:
            self.producer.pop(v, None)
            self.uses.pop(v, None)
        self.ops[k] = producer
        for r in producer.results:
            self.producer[r] = k
        self._handled = True

    def new(self, name: str, operands: list, attrs: dict, result: Optional[str] = None,
            like: Optional[Op] = None) -> Op:
        """A typed op ``name(operands, attrs)`` computing ``result`` (a fresh value if None)."""
        cls = OPS[name]
        op = cls([result or self.fresh()], operands, attrs, loc=like.loc if like is not None else None)
        types = op.check([self.p.types[v] for v in operands])
        op.result_types = list(types)
        for r, t in zip(op.results, types):
            if r in self.p.types and self.p.types[r] != t:  # pragma: no cover - a bug in a rewrite
                raise AssertionError(f"{op} changes the type of {r}: {self.p.types[r]} -> {t}")
            self.p.types[r] = t
        for v in operands:
            self.uses[v] = self.uses.get(v, 0) + 1
        return op

    def release(self, op: Op) -> None:
        """``op`` is replaced by another: its operands lose a reader."""
        for v in op.operands:
            if v is not None:
                self.uses[v] -= 1

    def fresh(self) -> str:
        name = f"t{self._next}"
        self._next += 1
        return name

    def finish(self, verb: str, count: int, noun: str = "op") -> str:
        """Install the new ops; what ``gradir plan`` says the pass did."""
        self.p.ops = self.ops
        return f"{verb} {count} {noun}{'s' if count != 1 else ''}"
