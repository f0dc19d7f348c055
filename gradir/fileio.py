"""Files the command line writes: atomic replacement, and never over one of its own inputs.

Every output of a command (``-o``, ``--trace``, ``--save-inputs``, ...) goes
through ``write_file``.  Before a command does any work, ``check_output_paths``
refuses an output path that names the same file as one of its inputs (symbolic
and hard links included: ``os.path.samefile`` semantics), or as another output,
so that ``gradir run g.gir -o g.gir`` cannot replace the graph being run.
"""

from __future__ import annotations

import os
import tempfile
from typing import Iterable, Optional, Sequence

from .errors import Diagnostic, GradirError

__all__ = ["write_file", "check_output_paths", "human_bytes"]


def human_bytes(n: Optional[float]) -> str:
    """``n`` bytes in binary units, three significant digits: ``512 B``, ``1.50 KiB``, ``3.2 GiB``."""
    if n is None:
        return "unknown"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(n)} B"
            return f"{n:.3g} {unit}" if n < 1000 else f"{n:.0f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one of them does not exist (yet): not the same file
        return False


def check_output_paths(inputs: Iterable[tuple[str, str]], outputs: Sequence[tuple[str, str]]) -> None:
    """Refuse output paths that are the same file as an input or as another output.

    ``inputs`` and ``outputs`` are ``(what, path)`` pairs (``what`` names the option,
    for the message); ``-`` (standard input or output) is never compared.
    """
    ins = [(w, p) for w, p in inputs if p and p != "-"]
    outs = [(w, p) for w, p in outputs if p and p != "-"]
    problems = []
    for k, (wo, po) in enumerate(outs):
        for wi, pi in ins:
            if _same_file(po, pi):
                same = "" if os.path.abspath(po) == os.path.abspath(pi) else f" ({pi})"
                problems.append(Diagnostic(f"{wo} {po} is the same file as {wi}{same}; refusing to overwrite "
                                           f"an input (choose another output path)", filename=po))
                break
        else:
            for wp, pp in outs[:k]:
                if os.path.abspath(po) == os.path.abspath(pp) or _same_file(po, pp):
                    problems.append(Diagnostic(f"{wo} {po} is also the path of {wp}; each output needs its own "
                                               f"file", filename=po))
                    break
    if problems:
        raise GradirError(problems)


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename: never a half-written file.

    A symbolic link is followed (its target is rewritten, the link kept).  An
    ``OSError`` becomes a ``GradirError`` naming the file.
    """
    try:
        _write_atomic_raw(os.path.realpath(path), data)
    except OSError as e:
        raise GradirError(Diagnostic(f"cannot write file: {e.strerror or e}", filename=path)) from None


def _write_atomic_raw(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".gradir-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        except OSError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
