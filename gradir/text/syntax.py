"""Parser: text -> statement records -> ``Graph``.

Each line is tried by the canonical fast path (``fastparse.py``), then by lark
(LALR, tree-less Transformer).  Both only build plain statement records with
source spans; every semantic check (names, op signatures, types) lives in
``verify.py``, so lark never wraps our exceptions.  The parser is built once
per process.  Comments and blank lines go to ``trivia.py`` so that the printer
(``Graph.to_text``) keeps them.
"""

from __future__ import annotations

import gc
import json
import threading
import os
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Optional, Union

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import ArgumentError, Diagnostic, ParseError, Source, Span, VerifyError, errors_of, path_problem, shown
from .fastparse import (Fallback, Stmt, TypeSyntax, dim_literal, fast_line, float_literal, int_literal,
                        label_literal, type_from_syntax)
from ..ir.graph import Graph, GraphInput
from ..ir.verify import verify_graph
from ..ir.op import OPS, OpLoc
from ..ir.trivia import attach, stmt_key

__all__ = ["parse", "load", "print_graph", "grammar_text"]


def grammar_text() -> str:
    """The grammar: ``gradir/text/gradir.lark`` (installed as ``gradir.text``)."""
    try:
        return resources.files("gradir.text").joinpath("gradir.lark").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):  # running from a source tree without install
        return (Path(__file__).resolve().parent / "gradir.lark").read_text(encoding="utf-8")


_LINE = threading.local()  # line number offset while lark parses one line of a file


def _span(tok: Token) -> Span:
    return Span(tok.line + getattr(_LINE, "offset", 0), tok.column, tok.end_column)


def _span2(a: Span, b: Span) -> Span:
    return Span(a.line, a.col, b.end_col if b.line == a.line else a.end_col)


@v_args(inline=True)
class _Build(Transformer):
    """Turn parse events into ``Stmt`` records (no semantic checks)."""

    def start(self, *stmts: Stmt) -> list[Stmt]:
        return list(stmts)

    def graph_decl(self, name: Token) -> Stmt:
        return Stmt("graph", {"name": str(name), "span": _span(name)})

    def input_decl(self, value: Token, label: Optional[Token], typ: TypeSyntax) -> Stmt:
        return Stmt("input", {"name": str(value), "span": _span(value), "type": typ,
                              "label": None if label is None else label_literal(str(label), _span(label))})

    def output_decl(self, *items: tuple) -> Stmt:
        labels = [None if lb is None else label_literal(str(lb), _span(lb)) for _, lb in items]
        return Stmt("output", {"names": [(str(v), _span(v)) for v, _ in items], "labels": labels})

    def output_item(self, value: Token, label: Optional[Token]) -> tuple:
        return (value, label)

    def op_decl(self, results: list, name: Token, args: Optional[list], types: Optional[list]) -> Stmt:
        return Stmt("op", {"results": results, "name": (str(name), _span(name)), "args": args or [],
                           "types": types})

    def results(self, *values: Token) -> list:
        return [(str(v), _span(v)) for v in values]

    def args(self, *args: Any) -> list:
        return list(args)

    def operand(self, tok: Token) -> tuple:
        return ("operand", str(tok), _span(tok))

    def hole(self, tok: Token) -> tuple:
        return ("operand", None, _span(tok))

    def attr(self, name: Token, value: tuple) -> tuple:
        return ("attr", str(name), _span(name), value)

    # attribute values: (python value, span or None, error or None)
    def int(self, tok: Token) -> tuple:
        return int_literal(str(tok), _span(tok))

    def float(self, tok: Token) -> tuple:
        return float_literal(str(tok), _span(tok))

    def string(self, tok: Token) -> tuple:
        try:
            # strict=False: a raw tab (or other control character) in a string is taken as written, as
            # the fast path takes it; fmt prints it escaped
            return (json.loads(tok, strict=False), _span(tok), None)
        except ValueError:
            return (None, _span(tok), f"invalid escape in string {tok}")

    def true(self) -> tuple:
        return (True, None, None)

    def false(self) -> tuple:
        return (False, None, None)

    def list(self, *items: Any) -> tuple:
        items = tuple(i for i in items if i is not None and not isinstance(i, Token))
        err = next((i[2] for i in items if i[2]), None)
        if any(isinstance(i[0], (tuple, list)) for i in items):
            err = err or "nested lists are not allowed as attribute values"
        # an element's error points at that element
        span = next((i[1] for i in items if i[2] and i[1] is not None), None) if err else None
        span = span or next((i[1] for i in items if i[1] is not None), None)
        return (tuple(i[0] for i in items), span, err)

    def types(self, *ts: TypeSyntax) -> list:
        return list(ts)

    def type(self, dtype: Token, shape: tuple) -> TypeSyntax:
        dims, end = shape
        return TypeSyntax((str(dtype), _span(dtype)), dims, _span2(_span(dtype), _span(end)))

    def dims(self, lsqb: Token, *rest: Any) -> tuple:
        return ([d for d in rest[:-1] if d is not None], rest[-1])

    def scalar(self, tok: Token) -> tuple:
        return (None, tok)

    def dim(self, tok: Token) -> tuple:
        return (dim_literal(str(tok)), _span(tok))

    def unknown_dim(self) -> tuple:
        return (None, None)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(grammar_text(), parser="lalr", lexer="contextual", transformer=_Build(),
                maybe_placeholders=True, cache=False)


def _syntax_error(e: UnexpectedInput, source: Source, n: int, line: str) -> Diagnostic:
    """A lark error on line ``n`` (whose text is ``line``) as a located diagnostic."""
    if isinstance(e, UnexpectedCharacters):
        ch = line[e.column - 1] if 0 < e.column <= len(line) else ""
        what = repr(ch) if ch.isprintable() else f"character U+{ord(ch):04X}" if ch else "character"
        msg = f"unexpected {what}"
        allowed = _describe_expected(e.allowed or set())
        if ch == '"' and "STRING" in (e.allowed or set()):
            msg = "unterminated string: no closing '\"' on this line (write \\\" for a quote inside it)"
        elif allowed:
            msg += f"; expected {allowed}"
        return Diagnostic(msg, Span(n, e.column, e.column + 1), source)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = _describe_expected(e.accepts or e.expected)
        if tok.type in ("_NL", "$END"):
            end = len(line.rstrip("\r")) + 1
            return Diagnostic(f"unexpected end of line; expected {expected}", Span(n, end, end + 1), source)
        return Diagnostic(f"unexpected '{tok}'; expected {expected}",
                          Span(n, tok.column, tok.end_column or tok.column + 1), source)
    if isinstance(e, UnexpectedEOF):  # pragma: no cover - each line ends with a newline
        end = len(line) + 1
        return Diagnostic(f"unexpected end of line; expected {_describe_expected(set(e.expected))}",
                          Span(n, end, end + 1), source)
    return Diagnostic(str(e), Span(n, 1, 2), source)  # pragma: no cover


_TERMINAL_NAMES = {
    "VALUE": "a value name like t0", "HOLE": "'_'", "IDENT": "a name", "INT": "an integer",
    "FLOAT": "a number", "STRING": "a string", "_NL": "end of line", "$END": "end of file",
    "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "COMMA": "','", "EQUAL": "'='",
    "COLON": "':'", "QMARK": "'?'", "GRAPH": "'graph'", "INPUT": "'input'", "OUTPUT": "'output'",
    "TRUE": "'true'", "FALSE": "'false'", "SCALAR": "'scalar'",
}


def _describe_expected(names: set) -> str:
    names = sorted(set(names) - {"COMMENT", "WS"}, key=lambda n: (n.startswith("_") or n.startswith("$"), n))
    shown = [_TERMINAL_NAMES.get(n, n.lower()) for n in names]
    if not shown:
        return "something else"
    if len(shown) == 1:
        return shown[0]
    return "one of " + ", ".join(shown)


MAX_SYNTAX_ERRORS = 50  # described; further bad lines are only counted


class Parsed(NamedTuple):
    """The statements of a text, where they stand, and its syntax errors."""

    stmts: list[Stmt]
    errors: list[Diagnostic]  # the first MAX_SYNTAX_ERRORS bad lines
    more_errors: int  # how many more bad lines there are
    lines: list[str]  # the text, split at "\n"
    rows: list[int]  # the 1-based line of each statement


class _Tally:
    """What ``_iter_statements`` learns besides the statements: where each stands, the key the
    comments attach by, and the syntax errors."""

    def __init__(self) -> None:
        self.rows: list[int] = []  # the 1-based line of each statement
        self.keys: list[tuple] = []  # its trivia key (trivia.stmt_key)
        self.errors: list[Diagnostic] = []  # the first MAX_SYNTAX_ERRORS bad lines
        self.more = 0  # how many more bad lines there are


def _iter_statements(lines: list[str], src: Source, tally: _Tally, fast: bool = True) -> Iterator[Stmt]:
    """The statements of ``lines``, one at a time, so that a big file's statement records never
    all exist at once (they took 30 bytes per byte of text, the graph itself 16).

    A statement never spans lines, so each line is parsed on its own: the canonical fast path
    first, lark for any other line.  That is the grammar's language (``(_stmt? _NL)* _stmt?``)
    and lets every bad line be reported.  Past ``MAX_SYNTAX_ERRORS`` the bad lines are counted,
    not described (lark rejects a garbage line within a token or two, so counting stays cheap).
    """
    rows, keys = tally.rows, tally.keys
    for n, line in enumerate(lines, 1):
        if fast:
            try:
                st = fast_line(line, n)
                if st is not None:
                    rows.append(n)
                    keys.append(stmt_key(st))
                    yield st
                continue
            except Fallback:
                pass
        _LINE.offset = n - 1
        try:
            got = _parser().parse(line + "\n")
        except UnexpectedInput as e:
            if len(tally.errors) < MAX_SYNTAX_ERRORS:
                tally.errors.append(_syntax_error(e, src, n, line))
            else:
                tally.more += 1
            continue
        finally:
            _LINE.offset = 0
        for st in got:
            rows.append(n)
            keys.append(stmt_key(st))
            yield st


def _statements(text: str, *, fast: bool = True, source: Optional[Source] = None) -> Parsed:
    """Every statement of ``text`` at once, with where they stand and the syntax errors (for tests
    and tools; ``parse`` streams them)."""
    tally = _Tally()
    lines = text.split("\n")
    stmts = list(_iter_statements(lines, source or Source("<string>", text), tally, fast))
    return Parsed(stmts, tally.errors, tally.more, lines, tally.rows)


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: parsing allocates millions of small,
    acyclic objects, and its repeated full-heap scans made big files quadratic."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse(text: Union[str, bytes], filename: str = "<string>", *, verify: bool = True) -> Graph:
    if not isinstance(text, (str, bytes, bytearray)):
        raise ArgumentError(f"parse() takes IR text (str or bytes), not {type(text).__name__}"
                            + ("; to read a file use gradir.load(path)" if isinstance(text, os.PathLike) else ""))
    if not isinstance(filename, str):
        raise ArgumentError(f"parse(): filename must be a str, not {type(filename).__name__}")
    if not isinstance(verify, bool):
        raise ArgumentError(f"parse(): verify must be True or False, not {type(verify).__name__}")
    with no_gc():
        return _parse(text, filename, verify=verify)


def _parse(text: Union[str, bytes], filename: str = "<string>", *, verify: bool = True) -> Graph:
    """Parse IR text into a ``Graph`` and (by default) validate it.

    Raises ``ParseError`` for malformed text and ``VerifyError`` listing every
    semantic problem; both are ``GradirError``s with located diagnostics.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            before = bytes(text[:e.start])
            line = before.count(b"\n") + 1
            col = e.start - (before.rfind(b"\n") + 1) + 1
            src = Source(filename, before.decode("utf-8", "replace"))
            raise ParseError(Diagnostic(
                f"file is not UTF-8 text (byte 0x{text[e.start]:02x} at offset {e.start}); "
                "gradir IR files are UTF-8 text", Span(line, col, col + 1), src)) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    source = Source(filename, text)
    lines = text.split("\n")
    tally = _Tally()
    try:
        graph, diags, poisoned = _build_graph(_iter_statements(lines, source, tally), source)
    except RecursionError:  # pragma: no cover - defensive
        raise ParseError(Diagnostic("input is too deeply nested", Span(1, 1, 2), source)) from None
    if tally.errors:
        raise ParseError(tally.errors, more=tally.more)
    graph.trivia = attach(text, lines, tally.rows, tally.keys)
    if verify and not diags and not poisoned:
        return graph.validate()  # every problem at once, as below; and the graph is marked validated
    if verify:
        diags = diags + verify_graph(graph, poisoned=poisoned)
        if diags:
            raise VerifyError(errors_of(diags))
        return graph.validate()
    if diags:
        raise VerifyError(errors_of(diags))
    return graph


def read_source(path: Union[str, os.PathLike]) -> tuple[bytes, str]:
    """The bytes of a file (``-`` reads standard input) and the name to report it by."""
    import sys
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"a file path is a str or os.PathLike, not {type(path).__name__}")
    name = os.fspath(path) if isinstance(os.fspath(path), str) else str(path)
    problem = path_problem(name) if isinstance(os.fspath(path), str) else None
    if problem:
        raise ArgumentError(f"the file path {shown(name)} {problem}")
    try:
        if name == "-":
            data, name = sys.stdin.buffer.read(MAX_SOURCE_BYTES + 1), "<stdin>"
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_SOURCE_BYTES + 1)  # bounded: /dev/zero or a FIFO may never end
    except OSError as e:
        raise ParseError(Diagnostic(f"cannot read file: {e.strerror or e}", filename=name)) from None
    if len(data) > MAX_SOURCE_BYTES:
        raise ParseError(Diagnostic(f"input is larger than {MAX_SOURCE_BYTES >> 20} MiB, the most gradir reads "
                                    f"(parsing takes about 30 bytes of memory per byte of text)", filename=name))
    return data, name


# The largest IR text gradir reads: about 8 GB of memory once parsed (docs/performance.md).
MAX_SOURCE_BYTES = 256 << 20


def graph_argument(value: Any, who: str) -> Graph:
    """A validated Graph from what ``grad()`` and ``gradcheck()`` take: a Graph, IR text or the path of a
    .gir file; anything else is an ``ArgumentError`` naming ``who`` (the function, or its argument)."""
    if isinstance(value, str) and names_a_file(value):
        value = load(value)
    elif isinstance(value, (str, bytes)):
        value = parse(value)
    elif isinstance(value, os.PathLike):
        value = load(value)
    elif not isinstance(value, Graph):
        raise ArgumentError(f"{who} takes a Graph, IR text or a path, not {type(value).__name__}")
    if not value.validated:
        value.validate()
    return value


def names_a_file(text: str) -> bool:
    """Whether a str given where a graph goes is a path rather than IR text: one line that names an existing
    file or ends in ``.gir`` (a missing ``.gir`` file is then "cannot read file", not a syntax error)."""
    one_line = "\n" not in text and text.strip()
    return bool(one_line) and (text.strip().endswith(".gir") or os.path.isfile(text))


def load(path: Union[str, os.PathLike], *, verify: bool = True) -> Graph:
    """Read and parse a ``.gir`` file (``-`` reads standard input)."""
    data, name = read_source(path)
    return parse(data, name, verify=verify)


def _build_graph(stmts: list[Stmt], source: Source) -> tuple[Graph, list[Diagnostic], dict]:
    """Statements -> Graph.  Structural problems that prevent building an op
    (unknown op name, bad type syntax, misplaced header) become diagnostics; the
    names such ops define are returned as ``poisoned`` (defined, type unknown)."""
    diags: list[Diagnostic] = []
    poisoned: dict[str, Span] = {}
    graph = Graph(source=source)
    outputs: list[tuple[str, Span]] = []
    output_labels: list[tuple] = []
    for k, st in enumerate(stmts):
        d = st.data
        if st.kind == "graph":
            if graph.name is not None:
                diags.append(Diagnostic(f"second graph header; the graph is already named '{graph.name}'",
                                        d["span"], source))
            elif k != 0:
                diags.append(Diagnostic("the graph header must be the first statement", d["span"], source))
            else:
                graph.name = d["name"]
                graph.name_span = d["span"]
        elif st.kind == "input":
            t = type_from_syntax(d["type"], source, diags)
            if t is None:
                poisoned[d["name"]] = d["span"]
                continue
            label, label_span = _label_of(d.get("label"), diags, source)
            graph.inputs.append(GraphInput(d["name"], t, d["span"], d["type"].span, label, label_span))
        elif st.kind == "output":
            outputs.extend(d["names"])
            output_labels.extend(_label_of(lb, diags, source) for lb in d.get("labels") or [None] * len(d["names"]))
        else:
            op_name, name_span = d["name"]
            results = d["results"]
            cls = OPS.get(op_name)
            if cls is None:
                import difflib
                public = [n for n, c in OPS.items() if not n.endswith("Fused")]
                lower = {n.lower(): n for n in public}
                hint = [lower[op_name.lower()]] if op_name.lower() in lower else []
                hint = hint or difflib.get_close_matches(op_name, public, n=1, cutoff=0.6)
                msg = f"unknown op '{op_name}'"
                msg += (f"; did you mean '{hint[0]}'?" if hint
                        else " (gradir ops lists them all; an op of your own is loaded with --ops FILE)")
                diags.append(Diagnostic(msg, name_span, source))
                for r, sp in results:
                    poisoned.setdefault(r, sp)
                continue
            operands, op_spans, attrs, attr_spans, attr_name_spans = [], [], {}, {}, {}
            bad = False
            seen_attr = False
            for a in d["args"]:
                if a[0] == "operand":
                    if seen_attr:
                        diags.append(Diagnostic(f"{op_name}: operands must come before attributes",
                                                a[2], source))
                        bad = True
                    operands.append(a[1])
                    op_spans.append(a[2])
                else:
                    seen_attr = True
                    _, key, kspan, (value, vspan, err) = a
                    if key in attrs:
                        diags.append(Diagnostic(f"{op_name}: attribute '{key}' is given twice", kspan, source))
                        bad = True
                    if err:
                        diags.append(Diagnostic(f"{op_name}: attribute {key}: {err}", vspan or kspan, source))
                        bad = True
                    attrs[key] = value
                    attr_name_spans[key] = kspan
                    attr_spans[key] = _span2(kspan, vspan) if vspan else kspan
            types = None
            type_spans: list[Span] = []
            if d["types"] is not None:
                types = []
                for ts in d["types"]:
                    t = type_from_syntax(ts, source, diags)
                    if t is None:
                        bad = True
                    types.append(t)
                    type_spans.append(ts.span)
            loc = OpLoc(line=Span(results[0][1].line, results[0][1].col, 0), name=name_span,
                        results=[sp for _, sp in results], operands=op_spans, attrs=attr_spans,
                        attr_names=attr_name_spans, types=type_spans)
            if bad:
                for r, sp in results:
                    poisoned.setdefault(r, sp)
                continue
            graph.ops.append(cls([r for r, _ in results], operands, attrs, types, loc))
    graph.outputs = [n for n, _ in outputs]
    graph.output_spans = [sp for _, sp in outputs]
    graph.output_labels = [lb for lb, _ in output_labels]
    graph.output_label_spans = [sp for _, sp in output_labels]
    return graph, diags, poisoned


def _label_of(label: Optional[tuple], diags: list, source: Source) -> tuple:
    """(label, span) from a statement's (value, span, error) label record; a bad string is reported."""
    if label is None:
        return (None, None)
    value, span, err = label
    if err:
        diags.append(Diagnostic(err, span, source))
        return (None, span)
    return (value, span)


def print_graph(graph: Graph) -> str:
    """Canonical text of ``graph`` (same as ``graph.to_text()``)."""
    return graph.to_text()
