"""``Chunked``: a region of ops independent along their rows, run block of rows by block of rows (made by
the ``chunk-rows`` pass, ``gradir.transforms.memory.chunking``; run by ``gradir.backends.cpu.kernels.chunked``).

A language model's output projection, log-softmax, loss and their backward compute, for each row (a time
step and batch row), values that only that row needs: run whole, they hold the logits, the
log-probabilities and their gradients ([S, B, C] each) at once.  Run in blocks of rows, each of those
exists only for one block; the row-indexed results (the gradient of the projection's input) are written
block by block, and the results that sum over every row (the weight's gradient, a mean loss) are added
up block by block, in an order fixed by the shapes (``ChunkLayout``): the bits do not depend on the
thread count.

Like ``FusedElementwise`` the op exists only after the pass: it is not registered in ``OPS`` (a graph's
text cannot name it).  Its ``body`` attribute holds its members' own lines, so ``gradir plan`` shows what
it computes; its operands are the values it reads from outside, its results the members' results read
outside the region or that are graph outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from ..ir.op import Attr, InferContext, Op, Operand
from ..ir.types import TensorType

__all__ = ["ChunkedOp", "ChunkLayout", "Instr"]


@dataclass(frozen=True)
class Instr:
    """One member of the region as the kernel runs it on a block.

    ``kind``: ``"kernel"`` (the member's own kernel on the blocks of its operands), ``"view"`` (the
    operand's block reshaped: a ``Reshape``, ``Unsqueeze``, ...), ``"sum"`` (the member's kernel on the
    block gives a partial sum over the block's rows, added into the result; ``"mean"`` divides the
    total by ``count`` at the end)."""

    op: Op
    kind: str
    rows: tuple[bool, ...]  # per operand: its block of rows (True) or the whole value (False)
    count: int = 1  # a "mean": how many values the whole reduction averages


@dataclass
class ChunkLayout:
    """What the kernel needs: the rows, the blocks, and each row-indexed value's *period* (how many rows
    one index of its first axis holds: ``[S, 1, B, C]`` over ``S·B`` rows has period ``B``).

    Two block sizes.  ``sub`` (fixed by the shapes) is the grain of the sums over the rows: the rows are
    cut into ``sub``-row pieces, each lane (a contiguous run of pieces) adds its pieces' partial sums in
    order, and the lanes' sums are added in lane order.  ``block`` (a multiple of ``sub``, at most a lane)
    is how many rows the members run on at once: only memory and speed follow it, never the bits (a
    row's values come from the same kernels on the same row, and the sums are still taken piece by
    piece).  Without a budget a block is a few pieces (``chunking.DEFAULT_PIECES``: fewer kernel calls); a
    budget may choose blocks of one piece (``gradir.transforms.memory.chunking.choices``)."""

    rows: int  # N: the rows of the region
    sub: int  # rows per piece of the sums (a multiple of every period), fixed by the shapes
    block: int  # rows the members run on at once: a multiple of ``sub``
    lanes: int  # the pieces are cut into this many contiguous runs, each summing its own
    instrs: list[Instr]
    inputs: list[str]  # the op's operands
    outputs: list[str]  # the op's results
    periods: dict[str, int]  # row-indexed value -> its period
    sums: dict[str, str]  # a reduction's result -> "sum" or "mean"
    types: dict[str, TensorType]  # every value the region reads or makes

    @property
    def n_blocks(self) -> int:
        return sum(-(-(hi - lo) // self.block) for lo, hi in self.lane_rows())

    def lane_rows(self) -> list[tuple[int, int]]:
        """Each lane's rows ``[lo, hi)``: a contiguous run of whole pieces, the same for every block size."""
        pieces = -(-self.rows // self.sub)
        per = -(-pieces // self.lanes)
        return [(k * per * self.sub, min(self.rows, (k + 1) * per * self.sub)) for k in range(self.lanes)
                if k * per * self.sub < self.rows]

    def lane_block(self) -> int:
        """The largest block: a whole lane."""
        return max(hi - lo for lo, hi in self.lane_rows())

    def block_shape(self, v: str, n_rows: int) -> tuple[int, ...]:
        """The shape of ``v``'s block of ``n_rows`` rows."""
        shape = tuple(self.types[v].shape)
        return (n_rows // self.periods[v],) + shape[1:]


class ChunkedOp(Op):
    """A row-independent region run in blocks of rows by the chunk-rows pass (not for graphs)."""

    abstract = True  # not registered in OPS (made concrete below)
    DECLARED_TYPE = True
    OPERANDS = (Operand("X", variadic=True, doc="the values the region reads"),)
    RESULTS = ()
    ATTRS = (Attr("body", "strs", doc="the region's ops, one line each, in order"),
             Attr("outputs", "strs", doc="the values the region writes (the op's results)"),
             Attr("rows", "int", doc="how many rows the region runs over"),
             Attr("sub", "int", doc="rows per piece of the sums over the rows (fixed by the shapes)"),
             Attr("block", "int", doc="rows the members run on at once (a multiple of sub)"))

    def __init__(self, results: Sequence[str], operands: Sequence[Optional[str]],
                 attrs: Optional[Mapping[str, Any]] = None,
                 result_types: Optional[Sequence[Optional[TensorType]]] = None, loc: Any = None,
                 layout: Optional[ChunkLayout] = None) -> None:
        super().__init__(results, operands, attrs, result_types, loc)
        self.layout = layout

    @classmethod
    def build(cls, layout: ChunkLayout) -> "ChunkedOp":
        members = [i.op for i in layout.instrs]
        body = tuple(m.to_string() for m in members)
        return cls(list(layout.outputs), list(layout.inputs),
                   {"body": body, "outputs": tuple(layout.outputs), "rows": layout.rows, "sub": layout.sub,
                    "block": layout.block},
                   [layout.types[v] for v in layout.outputs], loc=members[0].loc, layout=layout)

    @classmethod
    def num_results(cls, attrs: Mapping[str, Any]) -> int:
        return len(attrs["outputs"])

    @classmethod
    def result_names(cls, attrs: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(attrs["outputs"])

    def infer(self, ctx: InferContext) -> list[TensorType]:
        return [ctx.declared(k) for k in range(len(self.results))]

    def kernel_attrs(self) -> dict[str, Any]:
        return {"layout": self.layout}

    def copy(self, **changes: Any) -> "Op":
        kw = dict(results=self.results, operands=self.operands, attrs=self.attrs,
                  result_types=self.result_types, loc=self.loc, layout=self.layout)
        kw.update(changes)
        return type(self)(**kw)

    def with_block(self, block: int) -> "ChunkedOp":
        """This region run in blocks of ``block`` rows (a multiple of ``sub``): the same bits."""
        from dataclasses import replace
        assert self.layout is not None and block % self.layout.sub == 0
        return ChunkedOp.build(replace(self.layout, block=min(block, self.layout.lane_block())))

    def scratch_bytes(self, staged: Any = ()) -> int:
        """The bytes the kernel holds besides its operands and results: each lane's block of every
        value the region makes, and each lane's partial sums.  ``staged``: results written over an operand
        (the plan's donation), whose blocks are made in the lane's buffer first."""
        lay = self.layout
        if lay is None:
            return 0
        made = [i.op.results[0] for i in lay.instrs if i.kind == "kernel" and len(i.op.results) == 1
                and (i.op.results[0] not in lay.outputs  # (an output's rows go straight to its buffer)
                     or i.op.results[0] in staged and i.op.results[0] not in lay.sums)]
        per_lane = sum(math.prod(lay.block_shape(v, lay.block)) * lay.types[v].dtype.numpy.itemsize for v in made)
        per_lane += sum(_nbytes(lay.types[v]) for v in lay.sums)
        return per_lane * lay.lanes

    def plan_lines(self, types: Mapping[str, TensorType]) -> list[str]:
        """What ``gradir plan`` shows under the step: the rows and blocks, what is written per block and
        what is summed over the blocks, and the region's ops."""
        lay = self.layout
        if lay is None:
            return list(self.attrs["body"])
        rows = [v for v in lay.outputs if v not in lay.sums]
        sums = [f"{v} ({lay.sums[v]})" for v in lay.outputs if v in lay.sums]
        head = (f"{lay.rows} rows in {lay.n_blocks} blocks of {lay.block} ({lay.lanes} lanes); "
                f"per block: {', '.join(rows) or 'nothing'}; summed in pieces of {lay.sub} rows, in order: "
                f"{', '.join(sums) or 'nothing'}; scratch {_mib(self.scratch_bytes())}")
        return [head] + list(self.attrs["body"])


def _nbytes(t: TensorType) -> int:
    return math.prod(int(d) for d in t.shape) * t.dtype.numpy.itemsize


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


# concrete, but unregistered: ``Op.__init_subclass__`` registers only classes that are not abstract
ChunkedOp.abstract = False
ChunkedOp.op_name = "Chunked"
