"""Graphviz pictures of a graph: ``to_dot`` and ``gradir dot``.

The DOT text is written here, with no Graphviz Python package: a graph IR must be
drawable on any machine, and only turning DOT into SVG/PNG needs Graphviz's
``dot`` program (called as a subprocess).

What a picture shows:

* inputs are blue ellipses, outputs green double ellipses; ops are boxes (grey:
  forward ops, orange: backward ops) with the op name, the attributes that differ
  from their defaults and the source line;
* each edge is one use of a value, labelled ``tN : Float32 [2, 3]``;
* with ``plan=True``, the compiled program instead: ops after the passes, each
  numbered ``#k`` in schedule order and annotated with its in-place reuse and the
  values freed after it; an op made by fusing several source ops (its results
  come from more than one source op) is a cluster: its one step above the source
  ops it replaced, so the picture still shows where each result comes from.

Every label is an HTML-like label built from escaped text, so any attribute
string (quotes, backslashes, ``<``, non-ASCII) prints as itself.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Iterable, Optional, Sequence

from ..errors import ArgumentError, Diagnostic, RenderError, shown
from ..ir.graph import Graph
from ..ir.op import Op, attr_equal, format_attr_value
from ..ops.fused import FusedElementwiseOp

__all__ = ["to_dot", "render"]

_FONT = "Helvetica,Arial,sans-serif"
_INPUT = 'shape=ellipse, style=filled, fillcolor="#dbeafe", color="#2563eb"'
_OUTPUT = 'shape=ellipse, peripheries=2, style=filled, fillcolor="#dcfce7", color="#16a34a"'
_FORWARD = 'shape=box, style="rounded,filled", fillcolor="#f1f5f9", color="#64748b"'
_BACKWARD = 'shape=box, style="rounded,filled", fillcolor="#ffedd5", color="#ea580c"'
_INPLACE_EDGE = 'color="#9333ea", penwidth=2, fontcolor="#7e22ce"'
_CLUSTER = 'style="rounded,filled", fillcolor="#fef9c3", color="#ca8a04", penwidth=1.5'
_MAX_ATTR = 48  # characters of one attribute shown; longer values end in an ellipsis
_WRAP = 44  # characters per line of a name list ("frees t3, t4, ...")
RENDER_TIMEOUT = 300  # seconds granted to Graphviz's layout

INSTALL_HINT = ("install it (Debian/Ubuntu: apt-get install graphviz; Fedora: dnf install graphviz; "
                "macOS: brew install graphviz; Windows: winget install graphviz)")


# -- escaping ----------------------------------------------------------------------
def _printable(text: str) -> str:
    """Control and other invisible characters as ``\\uXXXX`` (XML forbids most of them in labels)."""
    return "".join(c if c.isprintable() or c == " " else f"\\u{ord(c):04x}" for c in text)


def _html(text: str) -> str:
    """``text`` for an HTML-like label: markup characters as entities and each backslash doubled,
    because Graphviz still reads ``\\N``, ``\\G``, ``\\\\`` in HTML labels (after decoding
    entities, so ``&#92;`` would not protect it)."""
    return (_printable(text).replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;").replace('"', "&quot;"))


def _quote(text: str) -> str:
    """A DOT quoted string; ``\\`` is doubled so that escapes like ``\\n`` or ``\\N`` stay literal."""
    return '"' + _printable(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _clip(text: str, limit: int = _MAX_ATTR) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _wrap(head: str, names: Sequence[str]) -> list[str]:
    """``head`` followed by ``names``, comma-separated, broken into lines of about ``_WRAP`` characters."""
    lines, line = [], head
    for k, n in enumerate(names):
        piece = n + ("," if k < len(names) - 1 else "")
        if len(line) + 1 + len(piece) > _WRAP and line != head:
            lines.append(line)
            line = "  " + piece
        else:
            line += " " + piece
    lines.append(line)
    return lines


def _quoted(label: str) -> str:
    """A label as the IR writes it (a JSON string), shown under its value's name."""
    import json
    return json.dumps(label, ensure_ascii=False)


def _label(title: str, lines: Iterable[tuple[str, str]] = ()) -> str:
    """An HTML-like label: a bold title, then ``(kind, text)`` lines (kind: attr, line, note, free)."""
    parts = [f"<b>{_html(title)}</b>"]
    for kind, text in lines:
        if kind == "attr":
            parts.append(f'<font point-size="10">{_html(text)}</font>')
        elif kind == "note":
            parts.append(f'<font point-size="9" color="#7e22ce">{_html(text)}</font>')
        elif kind == "free":
            parts.append(f'<font point-size="9" color="#be123c">{_html(text)}</font>')
        else:
            parts.append(f'<font point-size="9" color="#64748b">{_html(text)}</font>')
    return "<" + "<br/>".join(parts) + ">"


# -- what a node says -------------------------------------------------------------------
def _key_attrs(op: Op) -> list[str]:
    """``name=value`` for each attribute that is required or differs from its default."""
    out = []
    for a in op.ATTRS:
        if a.name not in op.attrs:
            continue
        v = op.attrs[a.name]
        if a.required or not attr_equal(v, a.default):
            out.append(_clip(f"{a.name}={format_attr_value(v)}"))
    return out


def _line_of(op: Op) -> Optional[int]:
    return op.loc.line.line if op.loc is not None else None


def _op_lines(op: Op, unused: Sequence[str]) -> list[tuple[str, str]]:
    lines = [("attr", a) for a in _key_attrs(op)]
    if unused:
        lines += [("line", s) for s in _wrap("unused:", unused)]
    line = _line_of(op)
    if line is not None:
        lines.append(("line", f"line {line}"))
    return lines


def _edge_label(value: str, types: dict) -> str:
    t = types.get(value)
    return f"{value} : {t}" if t is not None else value


class _Writer:
    """Collects DOT statements; knows which node produces each value."""

    def __init__(self, graph: Graph, types: dict, title: list[str]) -> None:
        self.types = types
        self.out = [f"digraph {_quote(graph.name or 'graph')} {{"]
        label = _label(title[0], [("line", s) for s in title[1:]]) if title else '""'
        self.out.append(f'  graph [rankdir=TB, labelloc=t, fontname="{_FONT}", nodesep=0.35, ranksep=0.45, '
                        f'label={label}];')
        self.out.append(f'  node [fontname="{_FONT}", fontsize=12, margin="0.15,0.06"];')
        self.out.append(f'  edge [fontname="{_FONT}", fontsize=9, color="#64748b", fontcolor="#334155", '
                        f'arrowsize=0.7];')
        self.producer: dict[str, str] = {}  # value -> node id
        self.readers: dict[str, int] = {}  # value -> number of uses (operands and outputs)
        for k, inp in enumerate(graph.inputs):
            self.producer[inp.name] = f"in_{k}"
            self.node(f"in_{k}", _label(inp.name, [("line", _quoted(inp.label))] if inp.label is not None else []),
                      _INPUT)
        from ..ir.labels import output_labels_of
        self.output_labels = output_labels_of(graph)

    def count_uses(self, ops: Iterable[Op], outputs: Iterable[str]) -> None:
        for op in ops:
            for v in op.operands:
                if v is not None:
                    self.readers[v] = self.readers.get(v, 0) + 1
        for o in outputs:
            self.readers[o] = self.readers.get(o, 0) + 1

    def unused(self, op: Op) -> list[str]:
        return [r for r in op.results if not self.readers.get(r)]

    def node(self, ident: str, label: str, style: str, indent: str = "  ") -> None:
        self.out.append(f"{indent}{ident} [{style}, label={label}];")

    def edge(self, value: str, head: str, extra: str = "") -> None:
        tail = self.producer.get(value)
        if tail is None:  # not produced in this graph (cannot happen in a valid graph)
            return
        self.out.append(f"  {tail} -> {head} [label={_quote(_edge_label(value, self.types))}{extra}];")

    def outputs(self, names: Sequence[str], resolve=lambda v: v) -> None:
        for k, name in enumerate(names):
            value = resolve(name)
            note = [] if value == name else [("line", f"computed by {value}")]
            label = self.output_labels[k] if k < len(self.output_labels) else None
            note = ([("line", _quoted(label))] if label is not None else []) + note
            self.node(f"out_{k}", _label(f"output {name}", note), _OUTPUT)
            self.edge(value, f"out_{k}")

    def text(self) -> str:
        return "\n".join(self.out + ["}"]) + "\n"


def _style(op: Op) -> str:
    return _BACKWARD if op.is_backward else _FORWARD


def _title(graph: Graph) -> list[str]:
    if graph.name:
        return [f"graph {graph.name}"]
    if graph.source is not None and not graph.source.filename.startswith("<"):
        return [graph.source.filename]
    return []


# -- the two pictures ------------------------------------------------------------------
def to_dot(graph: Graph, plan: bool = False, *, disable: Optional[Sequence[str]] = None) -> str:
    """The graph as Graphviz DOT text (render it with ``dot -Tsvg``).

    With ``plan=True``, the compiled program after the passes (``disable`` switches
    passes off, as in ``compile``): steps numbered in schedule order, in-place reuse
    and frees annotated, fused ops drawn as clusters.  An invalid graph raises
    ``VerifyError``; a graph that cannot be compiled, ``CompileError``.
    """
    from ..backends.cpu.runtime import pass_list
    if not isinstance(graph, Graph):
        raise ArgumentError(f"to_dot() takes a Graph, not {type(graph).__name__}")
    if not isinstance(plan, bool):
        raise ArgumentError(f"to_dot(): plan must be True or False, got {shown(plan)}")
    disable = pass_list(disable, "to_dot(): disable")
    if disable and not plan:
        raise ArgumentError("to_dot(): disable= only applies with plan=True")
    graph.validate()
    return _plan_dot(graph, disable or []) if plan else _graph_dot(graph)


def _graph_dot(graph: Graph) -> str:
    w = _Writer(graph, graph.types, _title(graph))
    w.count_uses(graph.ops, graph.outputs)
    for k, op in enumerate(graph.ops):
        ident = f"op_{k}"
        w.node(ident, _label(op.op_name, _op_lines(op, w.unused(op))), _style(op))
        for v in op.operands:
            if v is not None:
                w.edge(v, ident)
        for r in op.results:
            w.producer[r] = ident
    w.outputs(graph.outputs)
    return w.text()


def _plan_dot(graph: Graph, disable: list[str]) -> str:
    from ..fileio import human_bytes
    from ..transforms.passes.pipeline import Program, run_passes
    from ..transforms.schedule import build_plan
    from ..ops.composite import expand_composites
    graph = expand_composites(graph)  # the schedule runs a composite op's primitives
    program = Program(graph)
    log = run_passes(program, disable=disable)
    plan = build_plan(program, log)
    title = [", ".join(_title(graph)[:1] + [f"compiled: {len(plan.steps)} step{'' if len(plan.steps) == 1 else 's'}"])]
    title += [f"{name}: {what}" for name, what in log] or ["no passes"]
    title.append(f"planned peak {human_bytes(plan.peak_bytes)}, naive total {human_bytes(plan.naive_bytes)}"
                 + ("" if plan.static else " ('?' dims not counted)"))
    w = _Writer(graph, plan.types, title)
    w.count_uses((st.op for st in plan.steps), plan.live_outputs)
    source_op = {r: op for op in graph.ops for r in op.results}
    for st in plan.steps:
        notes = [("note", f"{st.results[r]} reuses {st.operands[o]}'s buffer") for r, o in st.inplace.items()]
        if st.free_after:
            notes += [("free", s) for s in _wrap("frees", st.free_after)]
        donors = {st.operands[o] for o in st.inplace.values()}
        ident = f"step_{st.index}"
        title = f"#{st.index}  {st.op.op_name}"
        members = _fused_members(st.op, source_op)
        if members:  # the members show their own source lines and unused results
            _cluster(w, st, members, _label(title, [("attr", a) for a in _key_attrs(st.op)] + notes))
        else:
            w.node(ident, _label(title, _op_lines(st.op, w.unused(st.op)) + notes), _style(st.op))
            for r in st.results:
                w.producer[r] = ident
        for v in st.operands:
            if v is not None:
                w.edge(v, ident, ", " + _INPLACE_EDGE if v in donors else "")
    w.outputs(plan.outputs, program.resolve)
    return w.text()


def _fused_members(op: Op, source_op: dict[str, Op]) -> list[Op]:
    """The source ops a compiled op replaced, when it is a fusion of several (passes keep
    result names, so each result still names the source op that defined it); else []."""
    members: list[Op] = []
    # a fused element-wise loop replaced its members, intermediates included; other fused ops
    # (siblings over the same operands) replaced the ops that defined their results
    defined = [r for m in op.members for r in m.results] if isinstance(op, FusedElementwiseOp) else op.results
    for r in defined:
        src = source_op.get(r)
        if src is not None and all(src is not m for m in members):
            members.append(src)
    return members if len(members) > 1 else []


def _cluster(w: _Writer, st, members: list[Op], label: str) -> None:
    """Draw step ``st``, a fused op, as a cluster: its kernel node, fed by the operands, above
    the source ops it replaced (in source order), each of which hands on its own results."""
    names = " and ".join(sorted({m.op_name for m in members}))
    w.out.append(f"  subgraph cluster_{st.index} {{")
    w.out.append(f'    graph [{_CLUSTER}, fontname="{_FONT}", fontsize=10, fontcolor="#854d0e", '
                 f"label=<{_html(f'fused: one kernel for {len(members)} {names} ops')}>];")
    w.node(f"step_{st.index}", label, _style(st.op), indent="    ")
    for j, m in enumerate(members):
        ident = f"step_{st.index}_{j}"
        unused = [r for r in m.results if r in st.op.results and not w.readers.get(r)]
        style = _style(m).replace('"rounded,filled"', '"rounded,filled,dashed"')  # not a step of its own
        w.node(ident, _label(m.op_name, _op_lines(m, unused)), style, indent="    ")
        w.out.append(f'    step_{st.index} -> {ident} [style=dashed, arrowhead=none, color="#ca8a04"];')
        for r in m.results:
            if r in st.op.results:
                w.producer[r] = ident
    w.out.append("  }")


# -- rendering ----------------------------------------------------------------------------
def render(dot_text: str, fmt: str, *, timeout: float = RENDER_TIMEOUT) -> bytes:
    """Run Graphviz's ``dot -T<fmt>`` on ``dot_text``; returns the picture's bytes.

    Raises ``RenderError`` when ``dot`` is not installed, fails or takes too long.
    """
    exe = shutil.which("dot")
    if exe is None:
        raise RenderError(Diagnostic(f"rendering needs Graphviz's 'dot' program (not found on PATH); "
                                     f"{INSTALL_HINT}", filename="gradir"))
    try:
        r = subprocess.run([exe, f"-T{fmt}"], input=dot_text.encode("utf-8"), capture_output=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RenderError(Diagnostic(f"Graphviz's dot did not finish within {timeout:g} s; write the DOT text "
                                     f"with -o OUT.dot and render a part of the graph, or use another layout "
                                     f"(e.g. sfdp -T{fmt})", filename="gradir")) from None
    except OSError as e:
        raise RenderError(Diagnostic(f"cannot run Graphviz's dot ({exe}): {e.strerror or e}",
                                     filename="gradir")) from None
    err = r.stderr.decode("utf-8", "replace").strip()
    if r.returncode != 0 or not r.stdout:
        raise RenderError(Diagnostic(f"Graphviz's dot failed (exit {r.returncode}) rendering {fmt.upper()}"
                                     + (f":\n{err}" if err else ""), filename="gradir"))
    if err:  # warnings (e.g. a huge picture scaled down): the user should see them
        print(err, file=sys.stderr)
    return r.stdout
