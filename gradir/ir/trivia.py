"""Comments and blank lines ("trivia"): found by the parser, kept on the ``Graph``, printed by ``to_text``.

The grammar ignores comments, so they never reach the graph's statements, and
graph equality ignores them.  But a file's comments are its documentation (the
header of a ``*.grad.gir`` file says which output is which gradient), so
``gradir fmt`` must keep every one.  The parser pins each to a statement, and the
printer, which lists statements in canonical order, moves each statement's
comments along with it:

- Comment lines and blank lines before a statement are its *leading* trivia; a
  comment on a statement's own line is its *trailing* comment; comment lines
  after the last statement are the file's *footer*.
- A comment is the text from the first ``#`` outside a string literal to the end
  of the line, kept verbatim but for trailing whitespace.  Comment lines print
  at column 1 (their indentation is dropped).
- A run of blank lines prints as one blank line; none is printed at the start or
  end of the file.
- Trailing comments on consecutive lines are aligned, as gofmt does: in a run of
  printed lines that each carry a trailing comment, every comment starts two
  columns after the longest statement of the run; a lone commented line gets two
  spaces.  With the threshold gofmt uses to break alignment in lists, a line 2.5
  times longer or shorter than the geometric mean of the run's lines so far
  starts a new run, so one long op line does not push the comments of short
  input lines far to the right.
- Statements that print as one keep all their comments: several ``output``
  lines become one, which keeps the first one's comments; each later one adds
  its leading lines and then its trailing comment (as a comment line) to the
  leading lines, so the comments stay in file order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ..text.fastparse import Stmt
    from .graph import Graph

__all__ = ["Trivia", "comment_of", "attach", "render", "stmt_key"]

BLANK = ""  # a blank line in a list of leading or footer lines (a comment starts with '#', so is never empty)

# Code up to the first '#' that is not inside a string literal ("..." with JSON escapes).
_RE_CODE = re.compile(r'(?:[^"#]|"(?:[^"\\\n]|\\.)*")*')


def comment_of(line: str) -> Optional[str]:
    """The comment on ``line`` (without trailing whitespace), or ``None`` if it has none."""
    if "#" not in line:  # nearly every line of a big file: the cheap tests first
        return None
    if '"' not in line:
        return line[line.index("#"):].rstrip()
    end = _RE_CODE.match(line).end()  # type: ignore[union-attr]  # matches the empty string at least
    if end < len(line) and line[end] == "#":
        return line[end:].rstrip()
    return None  # '#' only inside strings (or after an unterminated one: a syntax error lark reports)


@dataclass
class Trivia:
    """A parsed file's comments and blank lines, keyed by statement: ("graph",), ("input", name),
    ("op", first result) or ("output",)."""

    leading: dict[tuple, list[str]] = field(default_factory=dict)  # comment lines and BLANKs, in order
    trailing: dict[tuple, str] = field(default_factory=dict)
    footer: list[str] = field(default_factory=list)

    def add(self, key: tuple, leading: list[str], trailing: Optional[str]) -> None:
        """Attach a statement's trivia to ``key``.  A later statement with the same key (every
        ``output`` line has the key of the one line they print as) adds its leading lines to the
        leading lines, then its trailing comment too if there already is one."""
        if leading:
            self.leading.setdefault(key, []).extend(leading)
        if trailing is not None:
            if key in self.trailing:
                self.leading.setdefault(key, []).append(trailing)
            else:
                self.trailing[key] = trailing

    def __bool__(self) -> bool:
        return bool(self.leading or self.trailing or self.footer)


def stmt_key(st: "Stmt") -> tuple:
    """The key a statement's comments are kept under: an op by its first result, an input by its
    name, the header and the outputs by their kind."""
    if st.kind == "op":
        return ("op", st.data["results"][0][0])
    if st.kind == "input":
        return ("input", st.data["name"])
    return (st.kind,)  # graph, output


def _positions(trivia: Trivia, graph: "Graph") -> dict[int, tuple]:
    """Which line of ``graph.to_text()`` each statement with trivia prints as (the first, if two
    share a key, as only an unverified graph can).  One pass that allocates nothing per statement
    (allocations wake the garbage collector, which then scans the whole big graph)."""
    keys = trivia.leading.keys() | trivia.trailing.keys()
    at: dict[int, tuple] = {}
    i = 0
    if graph.name is not None:
        if ("graph",) in keys:
            at[0] = ("graph",)
        i = 1
    wanted = {k[1]: k for k in keys if k[0] == "input"}
    if wanted:
        for j, inp in enumerate(graph.inputs):
            if inp.name in wanted:
                at[i + j] = wanted.pop(inp.name)
    i += len(graph.inputs)
    wanted = {k[1]: k for k in keys if k[0] == "op"}
    if wanted:
        for j, op in enumerate(graph.ops):
            if op.results[0] in wanted:
                at[i + j] = wanted.pop(op.results[0])
    i += len(graph.ops)
    if graph.outputs and ("output",) in keys:
        at[i] = ("output",)
    return at


def _gap(lines: list[str], lo: int, hi: int, pending: list[str], at_start: bool) -> None:
    """Add the comment and blank lines ``lines[lo:hi]`` (no statement on any) to ``pending``."""
    for line in lines[lo:hi]:
        c = line.find("#")
        if c >= 0:
            pending.append(line[c:].rstrip())
        elif (pending and pending[-1] != BLANK) or (not pending and not at_start):
            pending.append(BLANK)  # a run of blank lines is one; none at the start of the file


def attach(text: str, lines: list[str], rows: list[int], keys: list[tuple]) -> Optional[Trivia]:
    """The trivia of ``text`` (split into ``lines``), whose statements (their ``stmt_key``s
    ``keys``) stand on the 1-based line numbers ``rows``; every other line is blank or a comment.
    ``None`` if there is none to keep, as in big generated files (checked without a pass over
    the lines)."""
    if "#" not in text and (not rows or rows[-1] - rows[0] + 1 == len(rows)):
        return None  # no comment, and no blank line between two statements
    trivia = Trivia()
    pending: list[str] = []
    prev = 0
    for key, n in zip(keys, rows):
        if n > prev + 1:
            _gap(lines, prev, n - 1, pending, prev == 0)
        line = lines[n - 1]
        trailing = comment_of(line) if "#" in line else None
        if pending or trailing is not None:
            trivia.add(key, pending, trailing)
            pending = []
        prev = n
    _gap(lines, prev, len(lines), pending, prev == 0)
    while pending and pending[-1] == BLANK:
        pending.pop()
    trivia.footer = pending
    return trivia or None


def render(trivia: Trivia, graph: "Graph", codes: list[str]) -> str:
    """The text of ``graph``, whose statements print as ``codes``, with its comments and blank lines."""
    p = _Lines()
    prev = 0
    at = _positions(trivia, graph)
    for i in sorted(at):
        key = at[i]
        if i > prev:
            p.plain(codes[prev:i])
        p.leading(trivia.leading.get(key, ()))
        comment = trivia.trailing.get(key)
        if comment is None:
            p.plain(codes[i:i + 1])
        else:
            p.commented(codes[i], comment)
        prev = i + 1
    p.plain(codes[prev:])
    p.leading(trivia.footer)
    p.flush()
    while p.out and p.out[-1] == BLANK:
        p.out.pop()
    return "\n".join(p.out) + "\n"


class _Lines:
    """Printed lines, and the run of commented statements still to be aligned."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.codes: list[str] = []  # a run of commented statements whose comments align
        self.comments: list[str] = []
        self.log_sum = 0.0  # of the run's code lengths (for their geometric mean)

    def plain(self, lines: list[str]) -> None:
        self.flush()
        self.out.extend(lines)

    def leading(self, items: "list[str] | tuple") -> None:
        for item in items:
            self.flush()
            if item != BLANK:
                self.out.append(item)
            elif self.out and self.out[-1] != BLANK:  # a run of blanks is one; none at the start
                self.out.append(BLANK)

    def commented(self, code: str, comment: str) -> None:
        if self.codes and not _aligns(len(code), self.log_sum / len(self.codes)):
            self.flush()
        self.codes.append(code)
        self.comments.append(comment)
        self.log_sum += math.log(len(code))

    def flush(self) -> None:
        if self.codes:
            column = max(map(len, self.codes)) + 2
            self.out.extend(code + " " * (column - len(code)) + comment
                            for code, comment in zip(self.codes, self.comments))
            self.codes.clear()
            self.comments.clear()
            self.log_sum = 0.0


ALIGN_RATIO = 2.5  # gofmt's: a line this many times longer or shorter than its run's mean starts a new run


def _aligns(length: int, mean_log: float) -> bool:
    """Whether a commented line of ``length`` joins the run of aligned comments whose code lengths
    have mean logarithm ``mean_log``: a much longer (or shorter) line would push the run's comments
    far to the right (or its own far from its code), so it starts a run of its own."""
    ratio = length / math.exp(mean_log)
    return 1 / ALIGN_RATIO < ratio < ALIGN_RATIO
