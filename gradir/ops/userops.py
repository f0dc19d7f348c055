"""User-defined ops: loading a Python file of op classes (``gradir.load_ops``, the command line's ``--ops FILE``
and ``GRADIR_OPS=a.py:b.py``).

An op is registered by *defining* its class (``Op.__init_subclass__`` puts ``SoftsignOp`` in ``OPS`` as
``Softsign``), so loading a file is only importing it: under a private, unique module name (two files both
called ``myops.py`` do not collide, and nothing is added to ``sys.path``).  What this module adds is what a
user needs when that goes wrong: every failure is an ``OpDefinitionError`` naming the file (and the op, when
one is at fault), located at the user's line, never a gradir traceback; and a failed load leaves the registry
as it was, so no op of a half-imported file stays registered.

The Python API does not read ``GRADIR_OPS``: a program says which ops it uses by importing its module or
calling ``load_ops``; only the command line (and the conformance suite's fixture) reads the variable, through
``load_env_ops``.  docs/extending.md is the user's page.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import itertools
import os
import sys
import traceback
import types
from typing import Any, Iterator, Optional, Union

from ..errors import ArgumentError, Diagnostic, GradirError, OpDefinitionError, Source, Span, path_problem, shown
from ..ir.op import OPS, REGISTRIES, Op

__all__ = ["load_ops", "load_env_ops", "ENV_VAR", "user_op_file", "loaded_files", "registry_snapshot"]

ENV_VAR = "GRADIR_OPS"

# realpath of each file loaded -> its module: loading the same file again is a no-op
_LOADED: dict[str, types.ModuleType] = {}
_COUNTER = itertools.count()
# private module name -> the op file's path as it was given (what messages and ``gradir ops`` show)
_GIVEN: dict[str, str] = {}


def load_ops(path: Union[str, "os.PathLike[str]"]) -> types.ModuleType:
    """Import the op file ``path`` (its op classes register themselves) and return its module.

    The same file loaded twice (by any path, or already imported as a module) is loaded once.  Errors are
    ``OpDefinitionError``s (a ``GradirError``) naming the file and the op; a bad argument is an
    ``ArgumentError``.
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ArgumentError(f"load_ops() takes the path of a Python file of op classes, got {shown(path)}")
    problem = path_problem(path)
    if problem:
        raise ArgumentError(f"load_ops(): path {shown(path)} {problem}")
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):  # pragma: no cover - realpath only fails on a path_problem
        real = path
    if real in _LOADED:
        return _LOADED[real]
    imported = _already_imported(real)
    if imported is not None:  # ``import myops`` first: its classes are registered already
        _LOADED[real] = imported
        return imported
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        why = "it is a directory, not a Python file" if os.path.isdir(path) else (e.strerror or str(e))
        raise OpDefinitionError(Diagnostic(f"cannot read the op file: {why}", filename=path)) from None
    text = data.decode("utf-8", errors="replace")
    module = _import(path, text)
    _LOADED[real] = module
    return module


def load_env_ops(value: Optional[str] = None) -> list[types.ModuleType]:
    """Load each file of ``GRADIR_OPS`` (or of ``value``): paths separated by ``os.pathsep`` (``:``);
    empty entries are skipped.  What the command line does at start."""
    if value is None:
        value = os.environ.get(ENV_VAR, "")
    out = []
    for p in value.split(os.pathsep):
        if not p.strip():
            continue
        try:
            out.append(load_ops(p))
        except ArgumentError as e:  # a path the file system cannot take: the variable's problem
            raise OpDefinitionError(Diagnostic(f"{ENV_VAR}: {e}")) from None
        except OpDefinitionError as e:
            if any(d.message.startswith("cannot read the op file") for d in e.diagnostics):
                raise OpDefinitionError([Diagnostic(f"{d.message} (named in {ENV_VAR})", d.span, d.source,
                                                    d.filename) for d in e.diagnostics]) from None
            raise
    return out


def loaded_files() -> tuple[str, ...]:
    """The op files loaded so far (absolute, in loading order): what a worker process of a sharded run
    loads before it reads the shard graph."""
    return tuple(_LOADED)


def user_op_file(cls: type) -> Optional[str]:
    """The file a user's op class was defined in (as it was named to ``load_ops``), or ``None`` for a
    built-in op."""
    module = cls.__module__
    if module == "gradir" or module.startswith("gradir."):
        return None
    return _GIVEN.get(module) or getattr(sys.modules.get(module), "__file__", None) or module


@contextlib.contextmanager
def registry_snapshot() -> Iterator[None]:
    """Undo, on leaving, every op registered inside (``OPS``, gradient rules, ``GraphBuilder`` methods, the
    files loaded): for tests that load ops and must leave the process as it was."""
    saved = _snapshot()
    try:
        yield
    finally:
        _restore(saved)


def _snapshot() -> tuple[dict, list, dict]:
    return dict(OPS), [(t, dict(t)) for t in REGISTRIES], dict(_LOADED)


def _restore(saved: tuple[dict, list, dict]) -> None:
    from .builder import GraphBuilder
    ops, tables, loaded = saved
    for name in [n for n in OPS if n not in ops]:
        if isinstance(GraphBuilder.__dict__.get(name), types.FunctionType):  # made on first use
            delattr(GraphBuilder, name)
    for table, old in [(OPS, ops), *tables, (_LOADED, loaded)]:
        table.clear()
        table.update(old)


def _already_imported(real: str) -> Optional[types.ModuleType]:
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and file.endswith(".py"):
            try:
                if os.path.realpath(file) == real:
                    return module
            except (OSError, ValueError):
                continue
    return None


class _Loader(importlib.machinery.SourceFileLoader):
    """Python's loader of source files, except that it writes no ``__pycache__`` beside the user's file:
    gradir writes only what it is asked to."""

    def set_data(self, path: str, data: bytes, *, _mode: int = 0o666) -> None:
        pass


def _import(path: str, text: str) -> types.ModuleType:
    """Execute the file as a new module; on any failure undo what it registered and raise the
    ``OpDefinitionError`` that says why."""
    stem = "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
    name = f"_gradir_ops_{next(_COUNTER)}_{stem}"
    loader = _Loader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)  # type: ignore[arg-type]
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    saved = _snapshot()
    sys.modules[name] = module  # dataclasses, typing and pickle look a class's module up here
    try:
        loader.exec_module(module)
    except BaseException as e:  # no half-registered ops: the registry goes back to what it was
        sys.modules.pop(name, None)
        _restore(saved)
        if isinstance(e, SyntaxError):
            raise _syntax_error(path, text, e) from None
        if isinstance(e, OpDefinitionError):
            raise _located(path, text, e, e.__traceback__) from None
        if isinstance(e, (Exception, SystemExit)):  # the user's code failed while importing: show their line
            raise _import_error(path, text, e) from None
        raise  # Ctrl-C, SIGTERM
    _GIVEN[name] = path
    return module


def _same(a: str, b: str) -> bool:
    try:
        return a == b or os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):  # pragma: no cover
        return False


def _line_span(text: str, line: int) -> Optional[Span]:
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        return None
    s = lines[line - 1].rstrip("\r")
    col = len(s) - len(s.lstrip()) + 1
    return Span(line, col, max(col + 1, len(s) + 1))


def _user_frame(path: str, tb: Any) -> Optional[int]:
    """The line of the deepest traceback entry in the op file (the user's line that failed)."""
    line = None
    try:
        real = os.path.realpath(path)
        for frame in traceback.extract_tb(tb):
            if frame.filename == path or os.path.realpath(frame.filename) == real:
                line = frame.lineno
    except (OSError, ValueError):  # pragma: no cover
        return None
    return line


def _op_at_fault(tb: Any) -> Optional[str]:
    """The op class being defined when the error happened (its ``__init_subclass__`` or class body), if any."""
    name = None
    while tb is not None:
        frame = tb.tb_frame
        local = frame.f_locals
        cls = local.get("cls")
        if isinstance(cls, type) and issubclass(cls, Op):
            name = cls.__name__
        elif "__qualname__" in local and "__module__" in local and frame.f_code.co_name.endswith("Op"):
            name = frame.f_code.co_name  # a class body that failed
        tb = tb.tb_next
    return name


def _syntax_error(path: str, text: str, e: SyntaxError) -> OpDefinitionError:
    line = e.lineno or 0
    span = None
    if line:
        span = _line_span(text, line)
        if span is not None and e.offset:
            span = Span(line, max(1, e.offset), max(1, e.offset) + 1)
    message = f"the op file does not import: SyntaxError: {e.msg}"
    return OpDefinitionError(Diagnostic(message, span, Source(path, text) if span else None, filename=path))


def _import_error(path: str, text: str, e: BaseException) -> OpDefinitionError:
    tb = e.__traceback__
    line = _user_frame(path, tb)
    span = _line_span(text, line) if line else None
    what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    if isinstance(e, SystemExit):
        what = f"it called sys.exit({e.code!r})"
    elif isinstance(e, GradirError):
        what = "; ".join(e.messages)
    op = _op_at_fault(tb)
    subject = f"op class {op}: " if op else ""
    message = f"{subject}the op file does not import: {what}"
    return OpDefinitionError(Diagnostic(message, span, Source(path, text) if span else None, filename=path))


def _located(path: str, text: str, e: OpDefinitionError, tb: Any) -> OpDefinitionError:
    """``e`` (raised while a class of the file was defined) pointed at the file's line, when its
    diagnostics have no place yet."""
    line = _user_frame(path, tb)
    span = _line_span(text, line) if line else None
    out = []
    for d in e.diagnostics:
        if d.span is not None:
            out.append(d)
            continue
        message = d.message
        prefix = f"{d.filename}: " if d.filename and not _same(d.filename, path) else ""
        out.append(Diagnostic(prefix + message, span, Source(path, text) if span else None, filename=path))
    return OpDefinitionError(out)
