"""The pass pipeline: ``Program``, the pass registry, ``DEFAULT_PASSES``, ``run_passes`` and the lint between passes.

The passes register themselves here (``@register_pass``); the package imports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional
import networkx as nx

from ...ir.graph import Graph
from ...ir.op import Op


__all__ = ["Program", "Pass", "PASSES", "DEFAULT_PASSES", "run_passes", "register_pass", "lint"]


class Program:
    """A graph being compiled: ops in a valid order, outputs, and value aliases.

    ``aliases`` maps a graph output name to the value that now computes it (set
    when CSE merges an output into an identical earlier value).  ``backend`` is what the program
    is compiled for (a backend, or the name of its kernel table): passes ask it what its kernels
    can do (``gradir.backends.base.kernel_info``, ``fusion``), never importing them.
    """

    def __init__(self, graph: Graph, backend: Any = "cpu") -> None:
        self.graph = graph
        self.backend = backend
        self.ops: list[Op] = list(graph.ops)
        self.types = dict(graph.types)
        self.inputs = [i.name for i in graph.inputs]
        self.outputs = list(graph.outputs)
        self.aliases: dict[str, str] = {}

    def resolve(self, name: str) -> str:
        while name in self.aliases:
            name = self.aliases[name]
        return name

    @property
    def live_outputs(self) -> list[str]:
        return [self.resolve(o) for o in self.outputs]

    def lower(self) -> nx.DiGraph:
        """networkx view: one node per op (its index), an edge per value use."""
        g = nx.DiGraph()
        producer: dict[str, int] = {}
        g.add_nodes_from(range(len(self.ops)))
        for k, op in enumerate(self.ops):
            for v in op.operands:
                if v is not None and v in producer:
                    g.add_edge(producer[v], k, value=v)
            for r in op.results:
                producer[r] = k
        return g


@dataclass(frozen=True)
class Pass:
    name: str
    fn: Callable[[Program], str]
    doc: str


PASSES: dict[str, Pass] = {}


def register_pass(name: str, doc: str) -> Callable:
    def deco(fn: Callable[[Program], str]) -> Callable:
        PASSES[name] = Pass(name, fn, doc)
        return fn
    return deco


# folding first: cse then merges equal folded values, and dce drops the Constants only they read
# the algebraic rewrites after cse (fewer ops to look at), before dce (which drops what they bypass)
DEFAULT_PASSES = ["fold-constants", "cse", "simplify", "fold-transpose-matmul", "flatten-batched-matmul",
                  "fold-product-transpose", "dce", "fuse-lstm-cell-grads"]
DEFAULT_PASSES.append("fuse-elementwise")  # the other passes see the ops it would hide
# last: a region's members run in blocks as the passes left them (fused loops included)
DEFAULT_PASSES.append("chunk-rows")


def run_passes(program: Program, names: Optional[list[str]] = None,
               disable: Optional[list[str]] = None) -> list[tuple[str, str]]:
    """Run the pipeline; returns ``(pass name, what it did)`` for each pass run."""
    names = list(DEFAULT_PASSES if names is None else names)
    disable = list(disable or [])
    unknown = [n for n in names + disable if n not in PASSES]
    if unknown:
        from ...errors import ArgumentError
        raise ArgumentError(f"unknown pass '{unknown[0]}'; passes are: {', '.join(PASSES)}")
    log = []
    problem = lint(program)
    if problem:
        from ...errors import CompileError
        raise CompileError(f"the graph is not valid before the passes: {problem}")
    for n in names:
        if n in disable:
            continue
        log.append((n, PASSES[n].fn(program)))
        problem = lint(program)
        if problem:  # a bug in the pass: name it, rather than fail later somewhere else
            from ...errors import CompileError
            raise CompileError(f"the compiler pass '{n}' left an invalid graph: {problem} "
                               f"(a bug in gradir; --disable {n} works around it)")
    return log


def lint(program: Program) -> Optional[str]:
    """The first structural problem of ``program`` (None if none), in one linear pass: every value
    defined once and before it is read, every op with its result types, every output defined.
    (Types were inferred once, at verification; passes keep them on the ops they make.)"""
    defined = set(program.inputs)
    for k, op in enumerate(program.ops):
        for v in op.operands:
            if v is not None and v not in defined:
                return f"op {k} ({op.op_name}) reads {v} before any op defines it"
        for r in op.results:
            if r in defined:
                return f"{r} is defined twice (again by op {k}, {op.op_name})"
            defined.add(r)
            if r not in program.types:
                return f"{r} (op {k}, {op.op_name}) has no type"
    for o in program.outputs:
        v = program.resolve(o)
        if v not in defined:
            return f"output {o} is computed by {v}, which no op defines"
    return None
