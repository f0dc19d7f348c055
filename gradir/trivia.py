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
  spaces.  Like gofmt, a line 2.5 times longer or shorter than the geometric mean
  of the lines aligned so far starts a new run, so one long op line does not push
  the comments of short input lines far to the right.
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
    from .fastparse import Stmt
    from .ir import Graph

__all__ = ["Trivia", "comment_of", "attach", "render", "statement_keys"]

BLANK = ""  # a blank line in a list of leading or footer lines (a comment starts with '#', so is never empty)

# Code up to the first '#' that is not inside a string literal ("..." with JSON escapes).
_RE_CODE = re.compile(r'(?:[^"#]|"(?:[^"\\\n]|\\.)*")*')


def comment_of(line: str) -> Optional[str]:
    """The comment on ``line`` (without trailing whitespace), or ``None`` if it has none."""
    if "#" not in line:  # nearly every line of a big file: the cheap test first
        return None
    end = _RE_CODE.match(line).end()  # type: ignore[union-attr]  # matches the empty string at least
    if end < len(line) and line[end] == "#":
        return line[end:].rstrip()
    return None  # '#' only inside strings (or after an unterminated one: a syntax error lark reports)


@dataclass
class Trivia:
    """A parsed file's comments and blank lines, keyed by statement (see ``statement_keys``)."""

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


def _stmt_key(st: "Stmt") -> tuple:
    if st.kind == "op":
        return ("op", st.data["results"][0][0])
    if st.kind == "input":
        return ("input", st.data["name"])
    return (st.kind,)  # graph, output


def statement_keys(graph: "Graph") -> list[tuple]:
    """The key of each line ``graph.to_text()`` prints, in order (the parser keys statements the same way)."""
    keys: list[tuple] = [("graph",)] if graph.name is not None else []
    keys.extend(("input", i.name) for i in graph.inputs)
    keys.extend(("op", op.results[0]) for op in graph.ops)
    if graph.outputs:
        keys.append(("output",))
    return keys


def _gap(lines: list[str], lo: int, hi: int, pending: list[str], at_start: bool) -> None:
    """Add the comment and blank lines ``lines[lo:hi]`` (no statement on any) to ``pending``."""
    for line in lines[lo:hi]:
        c = line.find("#")
        if c >= 0:
            pending.append(line[c:].rstrip())
        elif (pending and pending[-1] != BLANK) or (not pending and not at_start):
            pending.append(BLANK)  # a run of blank lines is one; none at the start of the file


def attach(text: str, lines: list[str], rows: list[int], stmts: list["Stmt"]) -> Optional[Trivia]:
    """The trivia of ``text`` (split into ``lines``), whose statements ``stmts`` stand on the
    1-based line numbers ``rows``; every other line is blank or a comment.  ``None`` if there
    is none to keep, as in big generated files (checked without a pass over the lines)."""
    if "#" not in text and (not rows or rows[-1] - rows[0] + 1 == len(rows)):
        return None  # no comment, and no blank line between two statements
    trivia = Trivia()
    pending: list[str] = []
    prev = 0
    for st, n in zip(stmts, rows):
        if n > prev + 1:
            _gap(lines, prev, n - 1, pending, prev == 0)
        trailing = comment_of(lines[n - 1])
        if pending or trailing is not None:
            trivia.add(_stmt_key(st), pending, trailing)
            pending = []
        prev = n
    _gap(lines, prev, len(lines), pending, prev == 0)
    while pending and pending[-1] == BLANK:
        pending.pop()
    trivia.footer = pending
    return trivia or None


def render(trivia: Trivia, keys: list[tuple], codes: list[str]) -> str:
    """The text of statements ``codes`` (keyed by ``keys``) with their comments and blank lines."""
    rows: list[tuple[str, Optional[str]]] = []  # (statement or comment line or BLANK, trailing comment)

    def emit(items: list[str]) -> None:
        for item in items:
            if item != BLANK:
                rows.append((item, None))
            elif rows and rows[-1][0] != BLANK:
                rows.append((BLANK, None))

    done: set[tuple] = set()
    for key, code in zip(keys, codes):
        if key in done:  # two statements with one key: only in a graph that failed verification
            rows.append((code, None))
            continue
        done.add(key)
        emit(trivia.leading.get(key, []))
        rows.append((code, trivia.trailing.get(key)))
    emit(trivia.footer)
    while rows and rows[-1][0] == BLANK:
        rows.pop()
    out: list[str] = []
    group: list[tuple[str, str]] = []  # consecutive lines whose trailing comments align
    log_sum = 0.0  # of the group's code lengths (for their geometric mean)
    for code, comment in rows:
        if group and (comment is None or not _aligns(len(code), log_sum / len(group))):
            _flush(group, out)
            log_sum = 0.0
        if comment is None:
            out.append(code)
        else:
            group.append((code, comment))
            log_sum += math.log(len(code))
    _flush(group, out)
    return "\n".join(out) + "\n"


ALIGN_RATIO = 2.5  # gofmt's: a line this many times longer or shorter than its group's mean starts a new group


def _aligns(length: int, mean_log: float) -> bool:
    """Whether a commented line of ``length`` joins the alignment group whose code lengths have
    mean logarithm ``mean_log``: a much longer (or shorter) line would push the group's comments
    far to the right (or its own far from its code), so it starts a group of its own."""
    ratio = length / math.exp(mean_log)
    return 1 / ALIGN_RATIO < ratio < ALIGN_RATIO


def _flush(group: list[tuple[str, str]], out: list[str]) -> None:
    if group:
        column = max(len(code) for code, _ in group) + 2
        out.extend(code + " " * (column - len(code)) + comment for code, comment in group)
        group.clear()
