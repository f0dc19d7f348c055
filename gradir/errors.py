"""The one exception family (rooted at ``GradirError``) and located diagnostics.

A diagnostic is plain data: a message and, when the graph came from text, a span.
It is rendered once, as::

    FILE:LINE:COL: error: MESSAGE
        <the source line>
        ^^^^
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Optional, Sequence

__all__ = ["Span", "Diagnostic", "Source", "GradirError", "ParseError", "VerifyError",
           "ExecutionError", "InputError", "CompileError", "ArgumentError", "UsageError", "StdoutError",
           "RenderError", "AutodiffError", "BuilderError", "GradcheckError", "OnnxError", "OnnxUnsupported",
           "Terminated", "ConstantValueError", "OpError", "OpErrors", "OpDefinitionError",
           "FastPathFallback", "ShardError", "Refusal", "shown", "path_problem"]

_MAX_SHOWN = 120  # columns of a long source line shown around the error


class Span(NamedTuple):
    """1-based line and column; ``end_col`` is exclusive and on ``line``."""

    line: int
    col: int
    end_col: int


@dataclass
class Source:
    """The text a graph was parsed from, kept to render diagnostics."""

    filename: str
    text: str
    _lines: Optional[list[str]] = field(default=None, repr=False)

    def line(self, n: int) -> str:
        if self._lines is None:
            self._lines = self.text.split("\n")
        if 1 <= n <= len(self._lines):
            return self._lines[n - 1].rstrip("\r")
        return ""


@dataclass
class Diagnostic:
    message: str
    span: Optional[Span] = None
    source: Optional[Source] = None
    filename: Optional[str] = None

    @property
    def file(self) -> str:
        if self.source is not None:
            return self.source.filename
        return self.filename or "<graph>"

    def render(self) -> str:
        if self.span is None:
            return f"{self.file}: error: {self.message}"
        head = f"{self.file}:{self.span.line}:{self.span.col}: error: {self.message}"
        if self.source is None:
            return head
        text = self.source.line(self.span.line)
        col0 = self.span.col - 1
        end0 = max(col0 + 1, min(self.span.end_col - 1, len(text) + 1))
        # Show a window of a very long line around the error.
        start = 0
        prefix = ""
        if len(text) > _MAX_SHOWN:
            start = max(0, min(col0 - 20, len(text) - _MAX_SHOWN))
            if start > 0:
                prefix = "..."
            shown = text[start:start + _MAX_SHOWN]
            suffix = "..." if start + _MAX_SHOWN < len(text) else ""
            end0 = min(end0, start + _MAX_SHOWN + 1)
        else:
            shown, suffix = text, ""
        shown = "".join(c if c.isprintable() or c == "\t" else "\ufffd" for c in shown)
        pad = "".join("\t" if c == "\t" else " " for c in text[start:col0])
        caret = "^" * max(1, end0 - col0)
        return f"{head}\n    {prefix}{shown}{suffix}\n    {' ' * len(prefix)}{pad}{caret}"

    def __str__(self) -> str:
        return self.render()


class GradirError(Exception):
    """Base of every error gradir reports to a user; carries diagnostics."""

    def __init__(self, diagnostics: str | Diagnostic | Iterable[Diagnostic]) -> None:
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic(diagnostics)]
        elif isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)

    def __str__(self) -> str:
        return self.render()

    @property
    def messages(self) -> list[str]:
        return [d.message for d in self.diagnostics]


class ParseError(GradirError):
    """The text is not well-formed IR (lexing, syntax, encoding).

    Only the first bad lines are described; ``more`` counts the rest, and a last
    line says how many there are, so a user knows how much is left to fix.
    """

    def __init__(self, diagnostics: str | Diagnostic | Iterable[Diagnostic], *, more: int = 0) -> None:
        self.more = more
        super().__init__(diagnostics)

    def render(self) -> str:
        text = super().render()
        if self.more:
            file = self.diagnostics[-1].file if self.diagnostics else "<string>"
            text += f"\n{file}: note: ... and {self.more} more syntax error{'' if self.more == 1 else 's'} not shown"
        return text


class VerifyError(GradirError):
    """The graph is well-formed but invalid (names, arity, attributes, types)."""


class CompileError(GradirError):
    """The graph is valid but cannot be compiled (e.g. an op has no kernel)."""


class InputError(GradirError):
    """Run-time inputs do not match the graph (missing, unexpected, dtype, shape)."""


class ExecutionError(GradirError):
    """A kernel failed, or produced NaN/Inf under --check-numerics."""


class ArgumentError(GradirError, ValueError, TypeError):
    """A Python API function was called with an argument it cannot take (``compile(g, threads=0)``,
    ``parse(None)``, an unknown dtype name, ...).

    It is also a ``ValueError`` and a ``TypeError``, so code written against the built-in
    exceptions these calls raised before keeps working.  It is about a call, not a file,
    so it renders as its message alone.
    """

    def render(self) -> str:
        return "\n".join(d.render() if d.span is not None or d.filename else d.message for d in self.diagnostics)


class UsageError(Exception):
    """A command line gradir cannot make sense of (exit code 2); only the CLI raises it."""


class StdoutError(Exception):
    """Writing to standard output failed (a full disk, a closed terminal): exit code 1."""

    def __init__(self, error: OSError) -> None:
        self.error = error
        super().__init__(f"cannot write to standard output: {error.strerror or error}")


class RenderError(GradirError):
    """A picture could not be drawn: Graphviz's ``dot`` is missing, failed or timed out."""


class AutodiffError(GradirError):
    """The graph cannot be differentiated as asked (an op without a rule, a bad ``wrt``, ...)."""


class BuilderError(VerifyError):
    """A mistake in a ``GraphBuilder`` call (raised at that call)."""


class OnnxError(GradirError):
    """An ONNX model gradir cannot import (unsupported nodes, all listed at once; a model that fails
    ``onnx.checker``), a graph it cannot export, or ``onnx`` not installed."""


class OnnxUnsupported(Exception):
    """Raised inside ``gradir.interop.onnx`` for one node (import) or op (export) that has no exact counterpart,
    with the reason; collected, and reported all at once as one ``OnnxError``."""


class GradcheckError(GradirError):
    """The check cannot be set up as asked (a backward graph that does not fit the forward graph, ...)."""


class OpDefinitionError(GradirError):
    """An op class that cannot be registered (a bad ``FORMULA`` or ``VJP``: syntax, unknown names, a
    function given the wrong number of arguments; a name clash with another op), raised when the class
    is created, or a user's op file that cannot be loaded (missing, a syntax error, an exception while
    importing it); the message names the op and the file that defines it."""

    def render(self) -> str:
        return "\n".join(d.render() if d.source is not None or d.filename else f"error: {d.message}"
                         for d in self.diagnostics)


class ShardError(GradirError):
    """A graph cannot be sharded as asked (an op refuses its operands' placements, a bad batch axis, ...),
    or a sharded run cannot be set up (no Dask, a bad scheduler, a shard file missing)."""


class Refusal(Exception):
    """Raised by a sharding rule (``RuleContext.refuse``); the placement pass makes it a located
    ``ShardError`` naming the op.  ``operand``: the operand at fault, to point at."""

    def __init__(self, message: str, operand: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.operand = operand


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C, so temporary files are removed on the way out."""


class ConstantValueError(ValueError):
    """A value that does not suit its type; ``element`` is the list index at fault (``None``: the value)."""

    def __init__(self, message: str, element: Optional[int] = None) -> None:
        super().__init__(message)
        self.element = element


class OpError(Exception):
    """Raised by a type rule; ``operand``/``attr``/``result`` say where to point."""

    def __init__(self, message: str, *, operand: int | None = None, attr: str | None = None,
                 result: int | None = None, element: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.operand = operand
        self.attr = attr
        self.result = result
        self.element = element  # with ``attr``: the index in a list value (-1: the whole value)


class OpErrors(Exception):
    """Several ``OpError``s of one op's signature check, raised together."""

    def __init__(self, errors: list[OpError]) -> None:
        super().__init__("; ".join(e.message for e in errors))
        self.errors = errors


class FastPathFallback(Exception):
    """The parser's fast path does not take this line (not in canonical form): lark parses it."""


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` for a message about a caller's argument: at most ``limit`` characters, and never
    an exception of its own (an int past Python's 4300-digit str limit, a broken ``__repr__``)."""
    try:
        text = repr(value)
    except Exception:
        if isinstance(value, int):
            return f"an int of {value.bit_length()} bits"
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def path_problem(path: str) -> Optional[str]:
    """Why ``path`` cannot name a file (None: it can): a NUL, or a character the file system encoding cannot
    write (a lone surrogate such as ``"\\ud800"``, which ``open()`` would raise ``UnicodeEncodeError`` on).
    For the Python API's path arguments: their callers raise ``ArgumentError`` with it."""
    import os
    if "\0" in path:
        return "contains a NUL character"
    try:
        os.fsencode(path)
    except UnicodeError as e:
        bad = path[e.start] if isinstance(e, UnicodeEncodeError) and e.start < len(path) else "?"
        return f"cannot be encoded as a file name (character U+{ord(bad):04X})"
    return None


def errors_of(diags: Sequence[Diagnostic]) -> list[Diagnostic]:
    return sorted(diags, key=lambda d: (d.span.line, d.span.col) if d.span else (1 << 30, 0))
