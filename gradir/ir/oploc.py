"""``OpLoc``: where an op's pieces are in the source text, kept compact (one array per op)."""

from __future__ import annotations

from array import array
from typing import Mapping, Optional, Sequence

from ..errors import Span

__all__ = ["OpLoc"]


class OpLoc:
    """Where an op's pieces are in the source text: the op's line, its name, and each result,
    operand, attribute (name and value) and type.

    A statement is one line, so each piece is a column range on it.  A big file has hundreds of
    thousands of ops, each with a dozen pieces: they are stored as one flat array of columns per
    op (4 bytes each, instead of a 72-byte ``Span`` object each) and made into ``Span``s when
    read, which only error messages and tools do.
    """

    __slots__ = ("_cols", "_keys", "_counts")

    def __init__(self, line: Span, name: Span, results: Sequence[Span] = (), operands: Sequence[Span] = (),
                 attrs: Optional[Mapping[str, Span]] = None, attr_names: Optional[Mapping[str, Span]] = None,
                 types: Sequence[Span] = ()) -> None:
        cols = [line.line, line.col, line.end_col, name.col, name.end_col]
        add = cols.append
        for sp in results:
            add(sp[1])
            add(sp[2])
        for sp in operands:
            add(sp[1])
            add(sp[2])
        if attrs:
            keys = tuple(attrs)
            for k in keys:
                sp = attrs[k]
                add(sp[1])
                add(sp[2])
            for k in keys:
                sp = (attr_names or attrs).get(k, attrs[k])
                add(sp[1])
                add(sp[2])
        else:
            keys = ()
        for sp in types:
            add(sp[1])
            add(sp[2])
        self._cols = array("i", cols)
        self._keys = keys
        self._counts = (len(results), len(operands), len(types))

    def _spans(self, start: int, n: int) -> list[Span]:
        c, line = self._cols, self._cols[0]
        return [Span(line, c[start + 2 * k], c[start + 2 * k + 1]) for k in range(n)]

    @property
    def lineno(self) -> int:
        """The op's line number (no ``Span`` made)."""
        return self._cols[0]

    @property
    def line(self) -> Span:
        return Span(self._cols[0], self._cols[1], self._cols[2])

    @property
    def name(self) -> Span:
        return Span(self._cols[0], self._cols[3], self._cols[4])

    @property
    def results(self) -> list[Span]:
        return self._spans(5, self._counts[0])

    @property
    def operands(self) -> list[Span]:
        return self._spans(5 + 2 * self._counts[0], self._counts[1])

    def _attr_start(self) -> int:
        return 5 + 2 * (self._counts[0] + self._counts[1])

    @property
    def attrs(self) -> dict[str, Span]:
        return dict(zip(self._keys, self._spans(self._attr_start(), len(self._keys))))

    @property
    def attr_names(self) -> dict[str, Span]:
        return dict(zip(self._keys, self._spans(self._attr_start() + 2 * len(self._keys), len(self._keys))))

    @property
    def types(self) -> list[Span]:
        return self._spans(self._attr_start() + 4 * len(self._keys), self._counts[2])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpLoc) and (self._cols, self._keys, self._counts) == (
            other._cols, other._keys, other._counts)

    def __repr__(self) -> str:
        return f"OpLoc(line={self._cols[0]}, name={self.name}, results={self.results}, operands={self.operands})"

