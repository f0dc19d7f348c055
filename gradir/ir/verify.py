"""Graph-level verification with source spans.

Checks single assignment, use after definition, every op's signature and type
rule (``Op.check``), declared types against inferred ones, and the outputs.
All problems are collected; a value whose defining op failed is "poisoned" so
that one mistake does not cascade into a page of follow-on errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from ..errors import Diagnostic, Source, Span
from .op import VALUE_NAME, Op, OpError, OpLoc, OpErrors
from .labels import check_labels

from .types import TensorType

if TYPE_CHECKING:  # named in annotations only: graph.py imports this module to validate
    from .graph import Graph

__all__ = ["verify_graph", "MAX_NAME_DIGITS"]

# A value name's number fits a 64-bit integer: derived graphs number new values after the largest,
# and Python's int(str) is quadratic in the digits (and refuses more than 4,300).
MAX_NAME_DIGITS = 18


def _op_span(op: Op, e: OpError, source: Optional[Source] = None) -> Optional[Span]:
    loc = op.loc
    if loc is None:
        return None
    if e.operand is not None:
        if e.operand < len(loc.operands):
            return loc.operands[e.operand]
        return loc.name
    if e.attr is not None:
        span = loc.attrs.get(e.attr, loc.name)
        if e.element is not None and source is not None and e.attr in loc.attrs:
            return _list_span(source.line(span.line), span, e.element) or span
        return span
    if e.result is not None and loc.results:
        return loc.results[e.result]
    return loc.name


def _list_span(text: str, attr: Span, element: int) -> Optional[Span]:
    """The span of element ``element`` of the list value of the attribute at ``attr`` (``-1``: the
    whole ``[...]``), found in the line's text: spans are kept per attribute, not per list element,
    and only a message needs one.  ``None`` if the value is not a list."""
    start = text.find("=", attr.col - 1)
    if start < 0:
        return None
    k = start + 1
    while k < len(text) and text[k] in " \t":
        k += 1
    if not text.startswith("[", k):
        return Span(attr.line, k + 1, max(k + 2, attr.end_col)) if element == -1 else None
    close = text.find("]", k)
    if close < 0:
        return None
    if element == -1:
        return Span(attr.line, k + 1, close + 2)
    pos = k + 1
    for i, part in enumerate(text[k + 1:close].split(",")):
        if i == element:
            lead = len(part) - len(part.lstrip(" \t"))
            return Span(attr.line, pos + lead + 1, pos + len(part.rstrip(" \t")) + 1)
        pos += len(part) + 1
    return None


class _LazySpans:
    """``span(i)``: the i-th operand (or result) span of an op, made from its compact ``OpLoc`` on
    the first call only (messages need spans; a valid graph never asks)."""

    def __init__(self, loc: Optional[OpLoc], which: str) -> None:
        self.loc, self.which, self.spans = loc, which, None

    def __call__(self, i: int) -> Optional[Span]:
        if self.spans is None:
            self.spans = getattr(self.loc, self.which) if self.loc is not None else []
        return self.spans[i] if i < len(self.spans) else None


def verify_graph(graph: "Graph", poisoned: Optional[dict] = None) -> list[Diagnostic]:
    """Return every problem in ``graph`` (empty if valid); fills ``graph.types``
    and each op's ``result_types`` when the graph is valid."""
    src = graph.source
    diags: list[Diagnostic] = []

    def err(msg: str, span: Optional[Span]) -> None:
        diags.append(Diagnostic(msg, span, src, filename=None))

    poisoned = dict(poisoned or {})
    types: dict[str, TensorType] = {}
    # Line numbers, not spans: an op's spans are made from its compact OpLoc only for a message.
    where: dict[str, Optional[int]] = {}  # the line of each value's definition
    later: dict[str, Optional[int]] = {}  # every op result's line, for "used before it is defined (line N)"
    for op in graph.ops:
        line = op.loc.lineno if op.loc else None
        for r in op.results:
            later.setdefault(r, line)

    def define(name: str, line: Optional[int], span: Callable[[], Optional[Span]],
               t: Optional[TensorType]) -> None:
        if not VALUE_NAME.match(name):
            shown = name if len(name) <= 40 else name[:20] + "..."
            err(f"'{shown}' is not a value name; values are named t followed by a number (t0, t17)", span())
            return
        if len(name) > MAX_NAME_DIGITS + 1:
            err(f"value name {name[:12]}... has {len(name) - 1} digits; at most {MAX_NAME_DIGITS}", span())
            return
        if name in where or name in poisoned:
            prev = where.get(name) or (poisoned[name].line if poisoned.get(name) else None)
            at = f" (at line {prev})" if prev else ""
            err(f"{name} is already defined{at}; each value is assigned exactly once", span())
            return
        where[name] = line
        if t is None:
            poisoned[name] = span()
        else:
            types[name] = t

    for inp in graph.inputs:
        why = inp.type.limit_problem()
        if why:
            err(f"input {inp.name}: its type has {why}", inp.type_span or inp.span)
            poisoned[inp.name] = inp.span
            continue
        define(inp.name, inp.span.line if inp.span else None, lambda inp=inp: inp.span, inp.type)

    for op in graph.ops:
        loc = op.loc
        line = loc.lineno if loc else None

        operand_span = _LazySpans(loc, "operands")

        # operands: defined before use?
        operand_types: list[Optional[TensorType]] = []
        unknown = False
        for i, v in enumerate(op.operands):
            if v is None:
                operand_types.append(None)
                continue
            if v in types:
                dline = where.get(v)
                if line and dline and dline > line:
                    err(f"{v} is used before it is defined (at line {dline})", operand_span(i))
                    unknown = True
                operand_types.append(types[v])
            elif v in poisoned:
                unknown = True
                operand_types.append(None)
            else:
                unknown = True
                operand_types.append(None)
                if v in later:
                    at = f" (at line {later[v]})" if later[v] else ""
                    err(f"{v} is used before it is defined{at}", operand_span(i))
                else:
                    err(f"{v} is not defined", operand_span(i))
        result_types: Optional[list] = None
        try:
            if unknown:
                op.check_signature()
            else:
                result_types = op.check(operand_types)
        except OpErrors as es:
            for e in es.errors:
                err(e.message, _op_span(op, e, src))
        except OpError as e:
            err(e.message, _op_span(op, e, src))
        # declared types
        if result_types is not None and op.result_types is not None:
            given = op.result_types
            if len(given) != len(result_types):
                span = loc.types[0] if loc and loc.types else (loc.name if loc else None)
                err(f"{op.op_name} has {len(result_types)} result(s) but {len(given)} type(s) are given", span)
                result_types = None
            else:
                for k, (g, t) in enumerate(zip(given, result_types)):
                    if g is not None and g != t:
                        span = loc.types[k] if loc and k < len(loc.types) else None
                        err(f"{op.results[k]}: declared type {g} does not match the inferred type {t}", span)
                        result_types = None
                        break
        result_span = _LazySpans(loc, "results")

        if result_types is not None:
            for k, t in enumerate(result_types):
                why = t.limit_problem()
                if why:
                    span = result_span(k)
                    err(f"{op.op_name}: result {op.results[k]} would have {why}", span)
                    result_types = None
                    break
        mine: set[str] = set()
        for k, r in enumerate(op.results):
            if r in mine:
                err(f"{r} is assigned twice by the same op", result_span(k))
                continue
            mine.add(r)
            define(r, line, lambda k=k: result_span(k), result_types[k] if result_types is not None else None)
        if result_types is not None:
            op.result_types = list(result_types)

    seen: set[str] = set()
    for k, name in enumerate(graph.outputs):
        span = graph.output_spans[k] if k < len(graph.output_spans) else None
        if name in seen:
            err(f"{name} is listed as an output twice", span)
        seen.add(name)
        if name not in types and name not in poisoned:
            if name in later:
                err(f"output {name} is not defined before the output line", span)
            else:
                err(f"output {name} is not defined", span)
    if not graph.outputs:
        if src is not None:
            lines = src.text.rstrip("\n").split("\n") if src.text.strip() else [""]
            n = len(lines)
            msg = ("empty graph: no inputs, ops or outputs" if not graph.inputs and not graph.ops
                   and not poisoned else "graph has no outputs; add a line 'output tN'")
            err(msg, Span(n, 1, max(2, len(lines[-1]) + 1)))
        else:
            err("graph has no outputs", None)
    check_labels(graph, err)
    if not diags:
        graph.types = types
    return diags
