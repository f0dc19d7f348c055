"""``Graph``: inputs, ops in order, outputs (with labels) and a name; validation and canonical text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from .attrs import checked_items, is_str
from ..errors import ArgumentError, Diagnostic, Source, Span, VerifyError, errors_of
from .op import Op
from .labels import label_text, output_label_list, output_labels_of, output_line
from .trivia import Trivia, render
from .types import TensorType
from .verify import verify_graph

__all__ = ["Graph", "GraphInput"]


@dataclass
class GraphInput:
    name: str
    type: TensorType
    span: Optional[Span] = None
    type_span: Optional[Span] = None
    label: Optional[str] = None  # a person's name for it (docs/format.md "Labels"); see labels.py
    label_span: Optional[Span] = None


class Graph:
    """Inputs, ops in order, outputs and an optional name.

    ``validate()`` checks the whole graph (single assignment, use after
    definition, each op's signature and types, outputs) and fills in every op's
    result types; it raises ``VerifyError`` with *all* problems found.
    """

    def __init__(self, inputs: Iterable[GraphInput | tuple[str, TensorType]] = (),
                 ops: Iterable[Op] = (), outputs: Iterable[str] = (), name: Optional[str] = None,
                 source: Optional[Source] = None, output_labels: Optional[Iterable[Optional[str]]] = None) -> None:
        if name is not None and not isinstance(name, str):
            raise ArgumentError(f"a graph's name must be a str or None, got {type(name).__name__}")
        self.name = name
        self.inputs: list[GraphInput] = [
            i if isinstance(i, GraphInput) else GraphInput(*i) for i in checked_items(
                inputs, "Graph inputs", lambda i: isinstance(i, GraphInput) or (
                    isinstance(i, tuple) and len(i) == 2 and is_str(i[0]) and isinstance(i[1], TensorType)),
                "GraphInput or (name, TensorType) pairs")]
        self.ops: list[Op] = checked_items(ops, "Graph ops", lambda o: isinstance(o, Op), "Op objects")
        self.outputs: list[str] = checked_items(outputs, "Graph outputs", is_str, "value names")
        self.source = source
        self.output_spans: list[Optional[Span]] = [None] * len(self.outputs)
        self.output_labels: list[Optional[str]] = output_label_list(output_labels, len(self.outputs))
        self.output_label_spans: list[Optional[Span]] = [None] * len(self.outputs)
        self.name_span: Optional[Span] = None
        self.types: dict[str, TensorType] = {}
        self._checked: Optional[tuple] = None  # the structure that validate() last passed (``validated``)
        self.trivia: Optional[Trivia] = None  # a parsed file's comments and blank lines, kept by to_text

    # -- queries -------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    def type_of(self, name: str) -> TensorType:
        """The type of value ``name`` (after validation)."""
        return self.types[name]

    # -- validation ------------------------------------------------------------
    def diagnostics(self) -> list[Diagnostic]:
        return verify_graph(self)

    def validate(self) -> "Graph":
        """Check the graph; raise ``VerifyError`` with every problem, or return the graph (``validated``)."""
        self._checked = None
        diags = self.diagnostics()
        if diags:
            raise VerifyError(errors_of(diags))
        self._checked = self._structure()
        return self

    @property
    def validated(self) -> bool:
        """True when ``validate()`` passed and the graph's inputs, ops, outputs and labels are the same
        objects since (ops are values: change one by replacing it, e.g. with ``op.copy(...)``)."""
        return self._checked is not None and self._checked == self._structure()

    def _structure(self) -> tuple:
        return (self.name, tuple(map(id, self.inputs)), tuple(map(id, self.ops)), tuple(self.outputs),
                tuple(output_labels_of(self)))

    # -- printing ------------------------------------------------------------
    def to_text(self) -> str:
        """Canonical text: the header, inputs, ops, outputs, a statement a line; the comments and
        blank lines of a parsed graph move with their statements (see ``trivia.py``)."""
        lines = []
        if self.name is not None:
            lines.append(f"graph {self.name}")
        for i in self.inputs:
            lines.append(f"input {i.name}{label_text(i.label)} : {i.type}")
        for op in self.ops:
            if not op.result_types and self.types:
                types = [self.types.get(r) for r in op.results]
                if all(t is not None for t in types):
                    op.result_types = types
            lines.append(op.to_string())
        if self.outputs:
            lines.append(output_line(self))
        if self.trivia:
            return render(self.trivia, self, lines)
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<Graph {self.name or ''} {len(self.inputs)} inputs, {len(self.ops)} ops, {len(self.outputs)} outputs>"

    def key(self) -> tuple:
        return (self.name, tuple((i.name, i.type, i.label) for i in self.inputs), tuple(op.key() for op in self.ops),
                tuple(self.outputs), tuple(output_labels_of(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.key() == other.key()

    __hash__ = None  # type: ignore[assignment]

