"""Placement analysis: given the batch axis of some inputs, where every value of a graph lives
when the batch is cut into shards.

A value is

* ``replicated``: every shard holds all of it (the weights);
* ``split(a)``: each shard holds a slice along axis ``a`` (the batch rows), and the whole value is
  the shards' slices concatenated in shard order;
* ``partial``: each shard holds a tensor of the full shape, and the true value is their sum (every
  weight gradient).

Each op's results are placed, given its operands' placements, by a rule of ``gradir.distributed.rules.RULES``
(``placement_rule``: derived from its traits for element-wise ops and reductions, else named by
``Op.SHARDING``); a rule that cannot keep the meaning of the op refuses, and
``gradir.distributed.analysis`` makes the refusal a located ``ShardError`` that names the op and says
why.  The rules follow GSPMD, ``jax.shard_map`` and PyTorch DTensor (docs/distributed.md).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ..errors import ArgumentError, Diagnostic, Refusal, ShardError, shown
from ..ir.graph import Graph
from ..ir.op import Op
from ..ir.types import TensorType

__all__ = ["Placement", "REPLICATED", "PARTIAL", "split", "RuleContext", "resolve_batch", "integer"]


def integer(value: Any) -> Optional[int]:
    """``value`` as a Python int when it is an integer (an ``int`` or a NumPy integer such as ``np.int64``,
    which ``a.shape[0]`` or ``np.argmax`` give; any ``numbers.Integral``), else None.  A bool (``True``,
    ``np.True_``) is not an integer here: ``shards=True`` is a mistake, not one shard."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        return None
    return int(value)


@dataclass(frozen=True)
class Placement:
    kind: str  # "replicated", "split" or "partial"
    axis: Optional[int] = None  # the split axis

    def __post_init__(self) -> None:
        if self.kind not in ("replicated", "split", "partial"):
            raise ArgumentError(f"a placement is \"replicated\", \"split\" or \"partial\", not {shown(self.kind)}")
        if self.kind == "split":
            axis = integer(self.axis)
            if axis is None or axis < 0:
                raise ArgumentError(f"a split placement needs an axis >= 0, got {shown(self.axis)}")
            object.__setattr__(self, "axis", axis)  # frozen: a NumPy integer becomes the int it is
        elif self.axis is not None:
            raise ArgumentError(f"a {self.kind} placement has no axis, got {shown(self.axis)}")

    def __str__(self) -> str:
        return f"split({self.axis})" if self.kind == "split" else self.kind

    @property
    def is_split(self) -> bool:
        return self.kind == "split"

    @property
    def is_partial(self) -> bool:
        return self.kind == "partial"

    @property
    def is_replicated(self) -> bool:
        return self.kind == "replicated"


REPLICATED = Placement("replicated")
PARTIAL = Placement("partial")


def split(axis: int) -> Placement:
    return Placement("split", axis)


class RuleContext:
    """What a rule sees of one op: its operands' placements and global types, its results' global
    types and its attributes; ``refuse(why)`` stops the analysis with a located error."""

    def __init__(self, op: Op, placements: Sequence[Optional[Placement]], types: Sequence[Optional[TensorType]],
                 result_types: Sequence[TensorType]) -> None:
        self.op = op
        self.placements = list(placements)
        self.types = list(types)
        self.result_types = list(result_types)
        self.attrs = op.attrs
        self.mean_rewrite = False  # set by the reduce rule: a ReduceMean over the split axis

    def p(self, i: int) -> Optional[Placement]:
        """Operand ``i``'s placement (``None``: an omitted optional operand)."""
        return self.placements[i] if i < len(self.placements) else None

    def rank(self, i: int) -> int:
        t = self.types[i]
        return t.rank if t is not None else 0

    def name(self, i: int) -> str:
        return self.op.operand_value(i)

    def refuse(self, why: str, operand: Optional[int] = None) -> "Refusal":
        raise Refusal(why, operand)

    def given(self) -> list[int]:
        return [i for i, p in enumerate(self.placements) if p is not None]


def resolve_batch(graph: Graph, batch: Mapping[str, int], option: str = "batch") -> dict[str, int]:
    """``{input label or tN: axis}`` as ``{input value name: axis >= 0}``; bad names and axes are
    ``ShardError``s that say what the inputs are, starting with ``option`` (what the user gave:
    ``batch=`` in Python, ``--shard`` on the command line)."""
    from ..ir.labels import label_text
    if not isinstance(batch, Mapping) or not batch:
        raise ShardError("batch must name at least one input and its batch axis, e.g. {\"x\": 0}")
    by_key = {}
    for i in graph.inputs:
        by_key[i.name] = i
        if i.label is not None:
            by_key[i.label] = i
    out: dict[str, int] = {}
    inputs = ", ".join(i.name + label_text(i.label) for i in graph.inputs)
    for key, axis in batch.items():
        inp = by_key.get(key) if isinstance(key, str) else None
        if inp is None:
            raise ShardError(Diagnostic(f"{option}: {key!r} is not an input of the graph (its inputs are {inputs})",
                                        filename=graph.source.filename if graph.source else None))
        number = integer(axis)
        if number is None or not -inp.type.rank <= number < inp.type.rank:
            raise ShardError(Diagnostic(f"{option}: axis {shown(axis)} of input {key} is out of range for its type "
                                        f"{inp.type} (rank {inp.type.rank})", inp.span, graph.source))
        out[inp.name] = number % inp.type.rank
    sizes = {n: dict((i.name, i.type) for i in graph.inputs)[n].shape[a] for n, a in out.items()}
    known = {n: s for n, s in sizes.items() if s is not None}
    if len(set(known.values())) > 1:
        raise ShardError(Diagnostic(f"{option}: the batch axes have different sizes ("
                                    + ", ".join(f"{n} axis {out[n]}: {s}" for n, s in known.items()) + ")",
                                    filename=graph.source.filename if graph.source else None))
    return out
