"""Files the command line writes: atomic replacement, and never over one of its own inputs.

Every output of a command (``-o``, ``--trace``, ``--save-inputs``, ...) goes
through ``write_file``.  Before a command does any work, ``check_output_paths``
refuses an output path that names the same file as one of its inputs (symbolic
and hard links included: ``os.path.samefile`` semantics), or as another output,
so that ``gradir run g.gir -o g.gir`` cannot replace the graph being run.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import stat
import sys
import tempfile
import threading
from typing import Iterable, Optional, Sequence

from .errors import Diagnostic, GradirError, Terminated

__all__ = ["write_file", "write_files", "check_output_paths", "is_special", "is_stdout", "can_have_a_file_beside",
           "human_bytes",
           "terminate_cleanly", "Terminated"]


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


def is_special(path: str) -> bool:
    """An existing path that is not a regular file or a directory (a device, a FIFO, a socket)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def is_stdout(path: Optional[str]) -> bool:
    """``-``, or a path to the file standard output is (``/dev/stdout``, ``/dev/fd/1``, or the file stdout was
    redirected to): a command writing there keeps its own messages off standard output."""
    if not path:
        return False
    if path == "-":
        return True
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # no file behind stdout (captured)
        return False


_SPECIAL_TREES = ("/dev", "/proc", "/sys")  # file systems of devices and of the kernel: no user's files in them


def _under(path: str, trees: Sequence[str]) -> bool:
    return any(path == t or path.startswith(t + os.sep) for t in trees)


def can_have_a_file_beside(path: str) -> bool:
    """Whether ``path`` is a regular file, or a new file in a real directory: a place where another file may
    be put beside it (``gradir import -o OUT.gir``'s ``OUT.inputs.npz``).  A new file in a missing
    directory counts: ``check_output_paths`` then reports the directory.

    Not a device, FIFO or socket, and nothing under ``/dev``, ``/proc`` or ``/sys``, whatever it
    leads to: ``-o /dev/stdout > out.gir`` is a regular file through a link, but ``/dev/stdout.inputs.npz``
    is no place for a weights file.
    """
    if os.name != "posix":
        return not is_special(path)
    try:
        given = os.path.abspath(path)
        parent = os.path.realpath(os.path.dirname(given))
        if _under(given, _SPECIAL_TREES) or _under(parent, _SPECIAL_TREES):
            return False
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:  # a new file (a missing directory is check_output_paths' error, found before any work)
        return True
    except (OSError, ValueError):
        return False


def check_output_paths(inputs: Iterable[tuple[str, str]], outputs: Sequence[tuple[str, str]],
                       hint: Optional[str] = None) -> None:
    """Refuse output paths that are the same file as an input or as another output.

    ``inputs`` and ``outputs`` are ``(what, path)`` pairs (``what`` names the option,
    for the message); ``-`` (standard input or output) is never compared.  ``hint`` replaces
    the advice for an output that is an input (``fmt``: its ``-i``).
    """
    ins = [(w, p) for w, p in inputs if p and p != "-"]
    # a device or FIFO (-o /dev/null) is written through, never replaced: it may take several outputs
    outs = [(w, p) for w, p in outputs if p and p != "-" and not is_special(p)]
    problems = []
    for k, (wo, po) in enumerate(outs):
        for wi, pi in ins:
            if _same_file(po, pi):
                same = "" if os.path.abspath(po) == os.path.abspath(pi) else f" ({pi})"
                problems.append(Diagnostic(f"{wo} {po} is the same file as {wi}{same}; refusing to overwrite "
                                           f"an input ({hint or 'choose another output path'})", filename=po))
                break
        else:
            for wp, pp in outs[:k]:
                if os.path.abspath(po) == os.path.abspath(pp) or _same_file(po, pp):
                    problems.append(Diagnostic(f"{wo} {po} is also the path of {wp}; each output needs its own "
                                               f"file", filename=po))
                    break
    for wo, po in outs:  # a missing directory, or a directory as the output, fails now, not after the run
        parent = os.path.dirname(os.path.abspath(po))
        if os.path.isdir(po):
            problems.append(Diagnostic(f"{wo} {po} is a directory; name a file", filename=po))
        elif not os.path.isdir(parent):
            problems.append(Diagnostic(f"{wo} {po}: directory {parent} does not exist", filename=po))
    if problems:
        raise GradirError(problems)


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` the way a careful tool does.

    - ``-`` is standard output.
    - A regular file, or a path that does not exist yet, is replaced atomically: the
      data goes to a temporary file beside it (``.gradir-NAME-XXXXXX.tmp``), which is
      flushed, synced and renamed over the target, so a reader never sees half a
      file; the new file gets the mode a plain ``open()`` would give (an existing
      file's mode is kept, a new one gets 0666 less the umask).  A symbolic link is
      followed: its target is rewritten, the link kept.
    - Anything else (a character or block device such as ``/dev/null``, a FIFO, a
      socket, ``/dev/stdout``) is opened and written directly, never replaced.

    An ``OSError`` becomes a ``GradirError`` naming the file; the temporary file is
    removed on any error, on Ctrl-C and on SIGTERM (see ``terminate_cleanly``).
    """
    if path == "-":
        _write_stdout(data)
        return
    try:
        st, real = _target(path)
        if st is not None and not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory")
            with open(path, "wb") as f:  # a device, FIFO or socket: write through, never replace
                f.write(data)
            return
        _write_atomic_raw(real, data, None if st is None else stat.S_IMODE(st.st_mode))
    except OSError as e:
        raise GradirError(Diagnostic(f"cannot write file: {e.strerror or e}", filename=path)) from None


def write_files(files: Sequence[tuple[str, bytes]]) -> None:
    """Write several files that belong together (``gradir import``'s graph and its weights): all of them,
    or none (each target left as it was).

    Every regular (or new) file is first written in full to a temporary file beside it, as
    ``write_file`` does; only when all are written are they renamed over their targets, in order.  If a
    rename fails, the ones done are undone: a target that existed gets its old content back (kept as a
    hard link until the end), a new one is removed.  A device or FIFO is written through, and ``-``
    (standard output) last, after every file is in place: neither can be taken back.
    """
    staged: list[tuple[str, str, str, bool]] = []  # (path as given, real path, temporary, it existed)
    later: list[tuple[str, bytes]] = []
    try:
        for path, data in files:
            if path == "-":
                later.append((path, data))
                continue
            try:
                st, real = _target(path)
            except OSError as e:
                raise _cannot_write(path, e) from None
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise _cannot_write(path, IsADirectoryError(errno.EISDIR, "Is a directory"))
            if st is not None and not stat.S_ISREG(st.st_mode):
                later.append((path, data))
                continue
            try:
                tmp = _stage(real, data, None if st is None else stat.S_IMODE(st.st_mode))
            except OSError as e:
                raise _cannot_write(path, e) from None
            staged.append((path, real, tmp, st is not None))
        _rename_all(staged)
        staged = []
        for path, data in later:
            if path == "-":
                _write_stdout(data)
            else:
                write_file(path, data)
    finally:
        for _, _, tmp, _ in staged:  # not renamed: a failure, Ctrl-C or SIGTERM before the renames
            _discard(tmp)


def _target(path: str) -> tuple[Optional[os.stat_result], str]:
    """What ``path`` is (its ``os.stat``, following symbolic links; None: it does not exist yet) and where a
    regular or new file is written (its real path).

    The kind is decided on the path as given, never on its real path: ``/dev/stdout`` is a link to
    ``/proc/self/fd/1``, whose "target" is ``pipe:[1234]`` when standard output is a pipe, a name that is
    not a file at all; ``os.stat`` follows the link to the pipe itself.  Only a regular file (or a new
    one) needs its real path, to be replaced atomically where it is, its links kept.
    """
    try:
        st: Optional[os.stat_result] = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        return st, path
    return st, os.path.realpath(path)


def _cannot_write(path: str, error: OSError) -> GradirError:
    return GradirError(Diagnostic(f"cannot write file: {error.strerror or error}", filename=path))


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
    _PENDING.discard(path)


def _stage(real: str, data: bytes, mode: Optional[int]) -> str:
    """``data`` in a new temporary file beside ``real``, synced, with ``mode`` (or the umask's); its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".gradir-{os.path.basename(real)[:40]}-", suffix=".tmp",
                               dir=os.path.dirname(real) or ".")
    _PENDING.add(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())
    except BaseException:
        _discard(tmp)
        raise
    return tmp


def _rename_all(staged: list[tuple[str, str, str, bool]]) -> None:
    """Rename each temporary over its target; on a failure, put back the targets already replaced."""
    done: list[tuple[str, Optional[str]]] = []  # (real path, a hard link to its old content, or None: new)
    backups: list[str] = []
    try:
        for path, real, tmp, existed in staged:
            backup = None
            if existed:
                backup = _hard_link(real)
                if backup is not None:
                    backups.append(backup)
            try:
                os.replace(tmp, real)
            except OSError as e:
                raise _cannot_write(path, e) from None
            _PENDING.discard(tmp)
            done.append((real, backup))
    except BaseException:
        for real, backup in reversed(done):
            try:
                if backup is not None:
                    os.replace(backup, real)
                else:
                    os.unlink(real)
            except OSError:
                pass
        raise
    finally:
        for b in backups:
            try:
                os.unlink(b)
            except OSError:
                pass


def _hard_link(real: str) -> Optional[str]:
    """A new hard link to ``real``'s current content beside it (None where links cannot be made)."""
    for k in range(100):
        name = os.path.join(os.path.dirname(real), f".gradir-{os.path.basename(real)[:40]}-{os.getpid()}-{k}.old")
        try:
            os.link(real, name)
            return name
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


def _write_stdout(data: bytes) -> None:
    from .errors import StdoutError
    stream = getattr(sys.stdout, "buffer", None)
    try:
        if stream is None:  # a text-only stream (captured in tests)
            sys.stdout.write(data.decode("utf-8", "replace"))
        else:
            sys.stdout.flush()
            stream.write(data)
            stream.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise StdoutError(e) from None


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    with _UMASK_LOCK:  # os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


# Temporary files being written, removed by the SIGTERM handler if the process is told to stop.
_PENDING: set[str] = set()


def _write_atomic_raw(path: str, data: bytes, mode: Optional[int]) -> None:
    tmp = _stage(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp)
        raise
    _PENDING.discard(tmp)


def terminate_cleanly() -> None:
    """Make SIGTERM unwind the main thread (``Terminated``) instead of killing the process
    where it stands, so that a write in progress removes its temporary file.  The CLI
    calls this; a library user's own handlers are left alone."""
    def handler(signum: int, frame: object) -> None:
        for tmp in list(_PENDING):  # also when the main thread is blocked in a system call
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise Terminated()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
