"""The statement records both parsers build, and the canonical-line fast path.

lark defines the language.  Big files are nearly always in canonical form (the
printer's output), and lark's pure-Python LALR runs at ~7,000 lines/s, so
``syntax.py`` first tries each line against the strict regular expressions here.
They accept a subset of what the grammar accepts and build the very same
statement records; any other line goes to lark (so syntax errors always come
from lark).  A Hypothesis test checks the two paths agree.
"""

from __future__ import annotations

import json
import math
import re
from typing import NamedTuple, Optional

from ..errors import FastPathFallback as Fallback, Diagnostic, Source, Span
from ..ir.types import MAX_ELEMENTS, DType, TensorType, format_shape

__all__ = ["Stmt", "TypeSyntax", "FastType", "Fallback", "fast_line", "type_from_syntax", "MAX_ELEMENTS",
           "MAX_INT_DIGITS", "int_literal", "float_literal", "dim_literal"]


class TypeSyntax(NamedTuple):
    """A type as written, with spans (checked later, so every bad dimension is reported)."""

    dtype: tuple  # (text, Span)
    dims: Optional[list]  # list of (value or None, Span or None); None for `scalar`
    span: Span


class Stmt(NamedTuple):
    """One statement as written: plain data with spans, no semantic checks."""

    kind: str  # graph | input | op | output
    data: dict


_ID = r"[A-Za-z_][A-Za-z0-9_]*"
_TRAIL = r"[ \t]*(?:#.*)?"
_TYPE = r"(" + _ID + r") (\[(?:(?:[0-9]+|\?)(?:, (?:[0-9]+|\?))*)?\]|scalar)"
_RE_BLANK = re.compile(_TRAIL)
# The types group is greedy and its trailing blanks are stripped in code: a lazy group followed by
# ``[ \t]*`` made a long run of spaces backtrack quadratically (32 KB of spaces: 17 s).
_RE_OP = re.compile(r"[ \t]*(t[0-9]+(?:, t[0-9]+)*) = (" + _ID + r")\(([^()#]*)\)(?: : ([^#]*)|[ \t]*)(?:#.*)?")
_LABEL = r'"(?:[^"\\\n]|\\.)*"'  # a JSON string, as the grammar's STRING
_RE_INPUT = re.compile(r"([ \t]*input )(t[0-9]+)(?: (" + _LABEL + r"))? : " + _TYPE + _TRAIL)
_RE_OUTPUT = re.compile(r"([ \t]*output )(t[0-9]+(?: " + _LABEL + r")?(?:, t[0-9]+(?: " + _LABEL + r")?)*)" + _TRAIL)
_RE_OUTPUT_ITEM = re.compile(r"(t[0-9]+)(?: (" + _LABEL + r"))?(?:, |$)")
_RE_GRAPH = re.compile(r"([ \t]*graph )(" + _ID + r")" + _TRAIL)
_RE_VALUE = re.compile(r"t[0-9]+")
_RE_TYPE = re.compile(_TYPE)
_RE_ARG = re.compile(r"(t[0-9]+|_)(?:, |$)|(" + _ID + r")=(\[[^\[\]]*\]|\"[^\"\\]*\"|[^,\[\]\" ]+)(?:, |$)")
_RE_INT = re.compile(r"[+-]?[0-9]+")
_RE_FLOAT = re.compile(r"[+-]?([0-9]+\.[0-9]*([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
                       r"|inf|nan)")
_RE_RESULT = re.compile(r"t[0-9]+")
_KEYWORDS = frozenset({"graph", "input", "output", "true", "false", "scalar", "_"})


# Integer literals longer than this are refused before any int() conversion: Python's int(str) is
# quadratic in the number of digits (hence its own 4,300-digit limit), and nothing in the IR needs
# more than a 64-bit integer.
MAX_INT_DIGITS = 19


def int_literal(text: str, span: Optional[Span]) -> tuple:
    """An attribute's integer literal as (value, span, error)."""
    digits = len(text.lstrip("+-"))
    if digits > MAX_INT_DIGITS:
        return (None, span, f"integer literal {text[:12]}... has {digits} digits; at most {MAX_INT_DIGITS} "
                            f"(a 64-bit integer)")
    return (int(text), span, None)


def float_literal(text: str, span: Optional[Span]) -> tuple:
    """An attribute's float literal as (value, span, error): one beyond a 64-bit float (``1e309``) is an
    error, not a silent ``inf`` (``inf`` is written ``inf``)."""
    value = float(text)
    if math.isinf(value) and "inf" not in text:
        return (None, span, f"number {text[:24]} is beyond the range of a 64-bit float (write inf for infinity)")
    return (value, span, None)


def label_literal(text: str, span: Span) -> tuple:
    """A label's JSON string literal as (value, span, error), as both parse paths build it."""
    try:
        value = json.loads(text, strict=False)  # a raw tab inside is taken, as in strings
    except ValueError:
        return (None, span, f"invalid escape in label {text}")
    from ..ir.labels import surrogate_problem
    why = surrogate_problem(value)  # "\ud800" is valid JSON, but no text: no file could hold the label
    return (None, span, f"label {text[:80]}{'...' if len(text) > 80 else ''}: {why}") if why else (value, span, None)


def dim_literal(text: str) -> "int | str":
    """A dimension's value; a literal too long to convert is kept as its text (``type_from_syntax``
    reports it)."""
    return text if len(text.lstrip("+-")) > MAX_INT_DIGITS else int(text)


def _plain_ident(name: str) -> bool:
    return name not in _KEYWORDS and not (name[0] == "t" and name[1:].isdigit())


def _fast_scalar(text: str, line: int, col: int) -> tuple:
    span = Span(line, col, col + len(text))
    if _RE_INT.fullmatch(text):
        return int_literal(text, span)
    if _RE_FLOAT.fullmatch(text):
        return float_literal(text, span)
    if text == "true":
        return (True, None, None)
    if text == "false":
        return (False, None, None)
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"' and '"' not in text[1:-1] and "\\" not in text:
        return (text[1:-1], span, None)
    raise Fallback


def _fast_value(text: str, line: int, col: int) -> tuple:
    if text.startswith("["):
        inner = text[1:-1]
        if not inner:
            return ((), None, None)
        items, c = [], col + 1
        for part in inner.split(", "):
            items.append(_fast_scalar(part, line, c))
            c += len(part) + 2
        bad = next((i for i in items if i[2]), None)  # as the lark path: the first element's error, located
        return (tuple(i[0] for i in items), bad[1] if bad else items[0][1], bad[2] if bad else None)
    return _fast_scalar(text, line, col)


_FAST_TYPES: dict[str, TensorType] = {}


class FastType(NamedTuple):
    """A canonical type text whose TensorType is known (spans computed only on error)."""

    type: TensorType
    span: Span


def _fast_type(m: "re.Match", line: int, g: int) -> "TypeSyntax | FastType":
    key = m.group(g, g + 1)
    t = _FAST_TYPES.get(key)
    if t is not None:
        return FastType(t, Span(line, m.start(g) + 1, m.end(g + 1) + 1))
    ts = _fast_type_syntax(m, line, g)
    diags: list = []
    t = type_from_syntax(ts, None, diags)
    if t is not None and not diags and len(_FAST_TYPES) < 4096:
        _FAST_TYPES[key] = t
    return ts


def _fast_type_syntax(m: "re.Match", line: int, g: int) -> TypeSyntax:
    dtype, shape = m.group(g), m.group(g + 1)
    if not _plain_ident(dtype):
        raise Fallback
    dspan = Span(line, m.start(g) + 1, m.end(g) + 1)
    if shape == "scalar":  # the span covers the whole type, as lark's does
        return TypeSyntax((dtype, dspan), None, Span(line, dspan.col, m.end(g + 1) + 1))
    dims = []
    c = m.start(g + 1) + 2
    if len(shape) > 2:
        for part in shape[1:-1].split(", "):
            dims.append((None, None) if part == "?" else (dim_literal(part), Span(line, c, c + len(part))))
            c += len(part) + 2
    return TypeSyntax((dtype, dspan), dims, Span(line, dspan.col, m.end(g + 1) + 1))


def fast_line(text: str, n: int) -> Optional[Stmt]:
    """The statement on line ``n`` if it is in canonical form, ``None`` if blank;
    raises ``Fallback`` otherwise."""
    if text.endswith("\r"):
        text = text[:-1]
    m = _RE_OP.fullmatch(text)
    if m:
        results = [(r.group(), Span(n, m.start(1) + r.start() + 1, m.start(1) + r.end() + 1))
                   for r in _RE_RESULT.finditer(m.group(1))]
        name = m.group(2)
        if not _plain_ident(name):
            raise Fallback
        args = []
        body, base = m.group(3), m.start(3)
        pos = 0
        while pos < len(body):
            a = _RE_ARG.match(body, pos)
            if a is None:
                raise Fallback
            if a.group(1) is not None:
                sp = Span(n, base + a.start(1) + 1, base + a.end(1) + 1)
                args.append(("operand", None if a.group(1) == "_" else a.group(1), sp))
            else:
                key = a.group(2)
                if not _plain_ident(key):
                    raise Fallback
                args.append(("attr", key, Span(n, base + a.start(2) + 1, base + a.end(2) + 1),
                             _fast_value(a.group(3), n, base + a.start(3) + 1)))
            pos = a.end()
        if body.endswith(", "):
            raise Fallback
        types = None
        if m.group(4) is not None:
            types = []
            tb, tbase, pos = m.group(4).rstrip(" \t"), m.start(4), 0
            while True:
                t = _RE_TYPE.match(tb, pos)
                if t is None:
                    raise Fallback
                ts = _fast_type(t, n, 1)
                off = tbase  # shift spans from the types group to line columns
                if isinstance(ts, FastType):
                    types.append(FastType(ts.type, Span(n, ts.span.col + off, ts.span.end_col + off)))
                else:
                    dt = (ts.dtype[0], Span(n, ts.dtype[1].col + off, ts.dtype[1].end_col + off))
                    dims = None if ts.dims is None else [
                        (v, Span(n, sp.col + off, sp.end_col + off) if sp else None) for v, sp in ts.dims]
                    types.append(TypeSyntax(dt, dims, Span(n, ts.span.col + off, ts.span.end_col + off)))
                pos = t.end()
                if pos == len(tb):
                    break
                if not tb.startswith(", ", pos):
                    raise Fallback
                pos += 2
        return Stmt("op", {"results": results, "name": (name, Span(n, m.start(2) + 1, m.end(2) + 1)),
                           "args": args, "types": types})
    m = _RE_INPUT.fullmatch(text)
    if m:
        label = None if m.group(3) is None else label_literal(m.group(3), Span(n, m.start(3) + 1, m.end(3) + 1))
        return Stmt("input", {"name": m.group(2), "span": Span(n, m.start(2) + 1, m.end(2) + 1),
                              "type": _fast_type(m, n, 4), "label": label})
    m = _RE_OUTPUT.fullmatch(text)
    if m:
        names, labels = [], []
        body, pos = m.group(2), 0
        while pos < len(body):
            r = _RE_OUTPUT_ITEM.match(body, pos)
            base = m.start(2)
            names.append((r.group(1), Span(n, base + r.start(1) + 1, base + r.end(1) + 1)))
            labels.append(None if r.group(2) is None else
                          label_literal(r.group(2), Span(n, base + r.start(2) + 1, base + r.end(2) + 1)))
            pos = r.end()
        return Stmt("output", {"names": names, "labels": labels})
    m = _RE_GRAPH.fullmatch(text)
    if m:
        if not _plain_ident(m.group(2)):
            raise Fallback
        return Stmt("graph", {"name": m.group(2), "span": Span(n, m.start(2) + 1, m.end(2) + 1)})
    if _RE_BLANK.fullmatch(text):
        return None
    raise Fallback


_DTYPES = {d.value: d for d in DType}


def type_from_syntax(ts: "TypeSyntax | FastType", source: Optional[Source], diags: list) -> Optional[TensorType]:
    """The TensorType a type's syntax spells, or ``None`` after adding a diagnostic to ``diags``."""
    if isinstance(ts, FastType):
        return ts.type
    try:
        dtype = _DTYPES[ts.dtype[0]]
    except KeyError:
        try:
            DType.parse(ts.dtype[0])
        except ValueError as e:
            diags.append(Diagnostic(str(e), ts.dtype[1], source))
        return None
    if ts.dims is None:
        return TensorType(dtype, ())
    shape = []
    ok = True
    for value, span in ts.dims:
        if isinstance(value, str):  # too many digits to convert (dim_literal)
            diags.append(Diagnostic(f"dimension {value[:12]}... has {len(value)} digits; a type has at most 2^48 "
                                    f"elements", span, source))
            ok = False
        elif value is not None and value <= 0:
            diags.append(Diagnostic(f"dimension {value} is not a positive integer or '?'", span, source))
            ok = False
        shape.append(value)
    if not ok:
        return None
    t = TensorType(dtype, shape)
    why = t.limit_problem()
    if why:
        shown = f"{ts.dtype[0]} {format_shape(shape)}" if t.rank <= 8 else ts.dtype[0]
        diags.append(Diagnostic(f"type {shown} has {why}", ts.span, source))
        return None
    return t
