"""What a name a user gave (a ``--wrt`` entry, a key of an ``--inputs`` archive) means in a graph, for
messages: the op that computes a value, with its location, and the names the user may have meant."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Optional, Sequence

from ..errors import Diagnostic, Span
from ..ir.labels import output_labels_of

if TYPE_CHECKING:
    from ..ir.graph import Graph

__all__ = ["SHOWN_NAMES", "computed_values", "computed_diagnostic", "name_list", "close_matches", "did_you_mean"]

SHOWN_NAMES = 8  # at most this many names listed in a message; the rest are counted


def name_list(names: Sequence[str], limit: int = SHOWN_NAMES) -> str:
    """``a, b, c``; past ``limit`` names, the first ones and ``... (N in all)``."""
    if len(names) <= limit:
        return ", ".join(names) or "none"
    return f"{', '.join(names[:limit])}, ... ({len(names)} in all)"


def close_matches(word: str, candidates: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``candidates`` that look like ``word`` (a typo), best first."""
    return difflib.get_close_matches(word, list(dict.fromkeys(candidates)), n=n)


def did_you_mean(matches: Sequence[str]) -> str:
    """``did you mean a, b or c?``, or ``""``."""
    if not matches:
        return ""
    return "did you mean " + (matches[0] if len(matches) == 1 else
                              f"{', '.join(matches[:-1])} or {matches[-1]}") + "?"


def computed_values(graph: "Graph") -> dict[str, tuple[str, str, Optional[Span]]]:
    """Every key that names a value the graph computes, by name or by an output's label: (the value's name, the
    name of the op computing it, that op's result span or ``None``).  Built once per message, not per key."""
    out: dict[str, tuple[str, str, Optional[Span]]] = {}
    for op in graph.ops:
        loc = getattr(op, "loc", None)
        spans = loc.results if loc is not None else []
        for k, r in enumerate(op.results):
            out.setdefault(r, (r, op.op_name, spans[k] if k < len(spans) else None))
    for n, label in zip(graph.outputs, output_labels_of(graph)):
        if label is not None and label != n and n in out:
            out.setdefault(label, out[n])
    return out


def computed_diagnostic(graph: "Graph", key: str, head: str, tail: str,
                        computed: Optional[dict[str, tuple[str, str, Optional[Span]]]] = None) -> Optional[Diagnostic]:
    """A diagnostic located at the line computing ``key`` (see ``computed_values``, which ``computed`` may hold
    already): ``HEAD: KEY is computed here (by OP)TAIL``, or ``None`` if the graph computes no such value."""
    found = (computed_values(graph) if computed is None else computed).get(key)
    if found is None:
        return None
    name, op_name, span = found
    what = key if name == key else f'"{key}" labels output {name}, which'
    where = "here" if span is not None else "by the graph"
    filename = graph.source.filename if graph.source else None
    return Diagnostic(f"{head}: {what} is computed {where} (by {op_name}){tail}", span,
                      graph.source if span is not None else None, filename=filename)
